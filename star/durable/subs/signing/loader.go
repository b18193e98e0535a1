// Package signing keeps the Durable Streams subscription keys (protocol
// §6.5): the Ed25519 keys that sign webhooks, published in the JWK Set,
// and the HMAC keys of wake tokens. The set is one metastore row that
// every star reads and rotates (loader.go); which key signs when, and
// what a rotation or a drop makes of the set, is pure (keyset.go); what
// a key signs is sign.go. star/durable/subs uses it; it imports nothing
// of the protocol.
package signing

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/meta"
)

// RowKey is the basin's subscription keys row, beside the stream (s#…)
// and subscription (u#…) rows. Whoever can read the metastore can read
// the keys.
func RowKey(basin string) meta.Key { return meta.Key{PK: "ds#" + basin, SK: "k#subscriptions"} }

// keyAttempts bounds the conditional-write retries of one change.
const keyAttempts = 4

// passTimeout bounds one periodic pass (a read, perhaps a write).
const passTimeout = 10 * time.Second

// MetaError is a metastore failure reading or writing the keys row: 503
// to clients, who retry.
type MetaError struct{ Err error }

func (e *MetaError) Error() string { return "durable: subscription keys: metastore: " + e.Err.Error() }
func (e *MetaError) Unwrap() error { return e.Err }

// Kinds of rotation (the metric's label and the log's reason).
const (
	rotationScheduled = "scheduled" // the period is up
	rotationManual    = "manual"    // an operator, with the publish lead
	rotationEmergency = "emergency" // an operator, every other key dropped
)

// Loader keeps this star's copy of the subscription keys row
// (keyset.go). The row is created when a star first needs a key
// (IfAbsent: every star then reads the one that won). Once loaded it is
// reread every KeyReload, and at once (at most every keyMissReload) when a
// wake token verifies under none of the cached keys, so a key another star
// added reaches this one. The periodic pass also adds a key when the
// rotation period is up and removes dropped keys, by a conditional put on
// the row's version: stars racing add one key, not one each.
type Loader struct {
	store  meta.Store
	key    meta.Key
	now    func() time.Time
	period time.Duration // ≤ 0: never rotate
	log    *slog.Logger
	met    Metrics

	// io serializes this star's reads and writes of the row; a semaphore
	// rather than a mutex, so a waiter gives up with its context.
	io chan struct{}

	mu       sync.Mutex
	set      *Set // nil until first needed
	lastMiss time.Time
}

// Metrics have bounded labels: the rotation kinds, ok or error.
type Metrics struct {
	keys      prometheus.Gauge
	rotations *prometheus.CounterVec
	reloads   *prometheus.CounterVec
}

func NewMetrics() Metrics {
	return Metrics{
		keys: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "starlog", Subsystem: "durable", Name: "subscription_keys",
			Help: "Subscription keys (webhook signing and wake tokens) in the keys row as this star last read it.",
		}),
		rotations: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "durable", Name: "subscription_key_rotations_total",
			Help: "Subscription keys this star added, by kind (scheduled, manual, emergency).",
		}, []string{"kind"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "durable", Name: "subscription_key_reads_total",
			Help: "Reads of the subscription keys row, by result (ok, error).",
		}, []string{"result"}),
	}
}

func (m Metrics) Collectors() []prometheus.Collector {
	return []prometheus.Collector{m.keys, m.rotations, m.reloads}
}

func NewLoader(store meta.Store, key meta.Key, now func() time.Time, period time.Duration, log *slog.Logger, met Metrics) *Loader {
	return &Loader{store: store, key: key, now: now, period: period, log: log, met: met, io: make(chan struct{}, 1)}
}

// Now is the keys' time (the clock NewLoader was given).
func (l *Loader) Now() time.Time { return l.now() }

// Period is the rotation period (≤ 0: never).
func (l *Loader) Period() time.Duration { return l.period }

func (l *Loader) cached() *Set {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.set
}

func (l *Loader) keep(s *Set) {
	l.mu.Lock()
	l.set = s
	l.mu.Unlock()
	l.met.keys.Set(float64(len(s.keys)))
}

func (l *Loader) acquire(ctx context.Context) error {
	select {
	case l.io <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *Loader) release() { <-l.io }

// Get returns the keys as last read, reading (or creating) the row the
// first time. During a metastore outage the cached keys go on serving.
func (l *Loader) Get(ctx context.Context) (*Set, error) {
	if s := l.cached(); s != nil {
		return s, nil
	}
	return l.reload(ctx, false)
}

// reload reads the row and caches it. Unless force, keys another caller
// loaded while this one waited are taken as they are.
func (l *Loader) reload(ctx context.Context, force bool) (*Set, error) {
	if err := l.acquire(ctx); err != nil {
		return nil, err
	}
	defer l.release()
	if s := l.cached(); s != nil && !force {
		return s, nil
	}
	s, _, err := l.read(ctx)
	if err != nil {
		return nil, err
	}
	l.keep(s)
	return s, nil
}

// read reads the row and its version, creating it (one key, signing at
// once) when absent. The caller holds io.
func (l *Loader) read(ctx context.Context) (*Set, int64, error) {
	s, ver, err := l.readOnce(ctx)
	result := "ok"
	if err != nil {
		result = "error"
	}
	l.met.reloads.WithLabelValues(result).Inc()
	return s, ver, err
}

func (l *Loader) readOnce(ctx context.Context) (*Set, int64, error) {
	for range keyAttempts {
		it, err := l.store.Get(ctx, l.key.PK, l.key.SK)
		if err == nil {
			s, err := Decode(it.Val)
			return s, it.Ver, err
		}
		if !errors.Is(err, meta.ErrNotFound) {
			return nil, 0, &MetaError{err}
		}
		now := l.now()
		s, err := firstKeys(now, randomKey())
		if err != nil {
			return nil, 0, err
		}
		ver, err := l.store.Put(ctx, l.key.PK, l.key.SK, s.encode(now), meta.IfAbsent())
		if err == nil {
			l.log.Info("subscription key created", "kid", s.keys[0].kid)
			return s, ver, nil
		}
		if !errors.Is(err, meta.ErrConditionFailed) {
			return nil, 0, &MetaError{err}
		}
		// Another star created it first: read what won.
	}
	return nil, 0, errors.New("durable: subscription keys row kept changing")
}

// change rewrites the row: next maps the row as read to what to write
// (nil: nothing), and the put is conditional on the version read, so a
// change another star made meanwhile is read and next decides again. It
// caches what it read or wrote.
func (l *Loader) change(ctx context.Context, kind string, next func(cur *Set, now time.Time) (*Set, error)) (*Set, error) {
	if err := l.acquire(ctx); err != nil {
		return nil, err
	}
	defer l.release()
	for range keyAttempts {
		cur, ver, err := l.read(ctx)
		if err != nil {
			return nil, err
		}
		l.keep(cur)
		now := l.now()
		n, err := next(cur, now)
		if err != nil {
			return nil, err
		}
		if n == nil {
			return cur, nil
		}
		_, err = l.store.Put(ctx, l.key.PK, l.key.SK, n.encode(now), meta.IfVer(ver))
		if errors.Is(err, meta.ErrConditionFailed) {
			continue
		}
		if err != nil {
			return nil, &MetaError{err}
		}
		l.keep(n)
		l.logChange(cur, n, kind)
		return n, nil
	}
	return nil, errors.New("durable: subscription keys row kept changing")
}

func (l *Loader) logChange(cur, next *Set, kind string) {
	was, is := cur.kids(), next.kids()
	level := slog.LevelInfo
	if kind == rotationEmergency {
		level = slog.LevelWarn
	}
	for _, k := range next.keys {
		if !slices.Contains(was, k.kid) {
			l.met.rotations.WithLabelValues(kind).Inc()
			l.log.Log(context.Background(), level, "subscription key added", "kid", k.kid, "kind", kind, "signs_from", k.signsFrom)
		}
	}
	for _, kid := range was {
		if !slices.Contains(is, kid) {
			l.log.Log(context.Background(), level, "subscription key dropped", "kid", kid, "kind", kind)
		}
	}
}

// Pass is the periodic reread: it adds a key when the period is up and
// removes the dropped ones. A star that has not needed the keys yet does
// nothing (the row is created on need).
func (l *Loader) Pass(ctx context.Context) error {
	if l.cached() == nil {
		return nil
	}
	_, err := l.change(ctx, rotationScheduled, func(cur *Set, now time.Time) (*Set, error) {
		p, gone := cur.pruned(now)
		if p.due(now, l.period) {
			return p.rotated(now, randomKey(), false)
		}
		if gone != nil {
			return p, nil
		}
		return nil, nil
	})
	return err
}

// Rotate adds a key now, for an operator: with the publish lead, or in an
// emergency signing at once with every other key dropped.
func (l *Loader) Rotate(ctx context.Context, emergency bool) (*Set, error) {
	kind := rotationManual
	if emergency {
		kind = rotationEmergency
	}
	return l.change(ctx, kind, func(cur *Set, now time.Time) (*Set, error) {
		return cur.rotated(now, randomKey(), emergency)
	})
}

// Verify checks a wake token under the cached keys. If none takes it the
// row is reread once (a key another star added since this one's last
// read), unless a token already caused a reread within keyMissReload: a
// stream of bad tokens costs at most one read per keyMissReload.
func (l *Loader) Verify(ctx context.Context, tok string) (WakeToken, bool, error) {
	s, err := l.Get(ctx)
	if err != nil {
		return WakeToken{}, false, err
	}
	if t, ok := s.parseToken(tok, l.now()); ok || !strings.HasPrefix(tok, tokenPrefix) {
		return t, ok, nil
	}
	l.mu.Lock()
	now := l.now()
	limited := !l.lastMiss.IsZero() && now.Sub(l.lastMiss) < keyMissReload
	if !limited {
		l.lastMiss = now
	}
	l.mu.Unlock()
	if limited {
		return WakeToken{}, false, nil
	}
	if s, err = l.reload(ctx, true); err != nil {
		return WakeToken{}, false, err
	}
	t, ok := s.parseToken(tok, l.now())
	return t, ok, nil
}

// Run rereads and maintains the row every KeyReload until ctx ends.
func (l *Loader) Run(ctx context.Context) {
	t := time.NewTicker(KeyReload)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			pctx, cancel := context.WithTimeout(ctx, passTimeout)
			if err := l.Pass(pctx); err != nil && ctx.Err() == nil {
				l.log.Warn("subscription keys: reread failed; serving the keys last read", "err", err)
			}
			cancel()
		}
	}
}

// randomKey is new key material (crypto/rand does not fail).
func randomKey() keyMaterial {
	m := keyMaterial{seed: make([]byte, ed25519.SeedSize), tokenKey: make([]byte, 32)}
	_, _ = rand.Read(m.seed)
	_, _ = rand.Read(m.tokenKey)
	return m
}
