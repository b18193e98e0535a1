package subs

import (
	"bytes"
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/durable/subs/signing"
)

// Bounds of the subscription driver (the schedule of its passes is in
// schedule.go).
const (
	// webhookTimeout bounds one webhook POST, connect to response.
	webhookTimeout = 10 * time.Second
	// maxWebhookResponse bounds the response body read ({"done": true}).
	maxWebhookResponse = 64 << 10
	// maxDeliveries bounds the webhook POSTs and wake-event appends one
	// star runs at once; a wake that finds no slot is withdrawn when its
	// lease runs out and issued again.
	maxDeliveries = 64
	// subAttempts bounds the conditional-write retries of one transition.
	subAttempts = 16
	// passTimeout bounds one pass over one subscription (its tails, its write).
	passTimeout = 10 * time.Second
	// maxSubsPerSweep bounds the rows one audit reads.
	maxSubsPerSweep = 10000
)

// subKey is a subscription's metastore row, in the basin's Durable
// Streams partition beside the stream rows (s#…) and the keys (k#…). The
// root never holds a __ds segment, so "<root>__ds/<id>" is unambiguous.
func subKey(basin, root, id string) meta.Key {
	return meta.Key{PK: "ds#" + basin, SK: subSKPrefix + root + reservedSegment + "/" + id}
}

const subSKPrefix = "u#"

// keyEnd is past every string key with a given prefix (the largest code
// point), for range queries.
const keyEnd = "\U0010FFFF"

// Streams is what the subscriptions need of the Durable Streams protocol
// (star/durable's handler implements it): the tail of a stream, an
// append of a wake event, and the names of the streams that exist. Each
// is served as a client's request would be (forwarded to the stream's
// leader, with the protocol's rules on closure, expiry and deletion), so
// the subscriptions never read a stream's rows or records themselves.
type Streams interface {
	// Tail is the stream's next offset (a seq num); ok is false when
	// there is no such stream (deleted, expired, or not a valid name). An
	// error is a stream that did not answer: retry later.
	Tail(ctx context.Context, name string) (next uint64, ok bool, err error)
	// Append appends body (a JSON message) to the stream as the server.
	Append(ctx context.Context, name, contentType string, body []byte) error
	// Names calls f with the name of each existing stream that starts
	// with prefix, in order, until f returns false. An error is the
	// metastore's.
	Names(ctx context.Context, prefix string, f func(name string) bool) error
}

// Cluster is what the driver needs of the star it runs on (a *node.Node):
// its id and the live stars, among which each subscription has one owner.
type Cluster interface {
	StarID() string
	LiveStars(ctx context.Context) ([]string, error)
}

// Config configures a Manager. star/durable fills it from its own Config.
type Config struct {
	Streams Streams
	Cluster Cluster
	// Meta holds the subscription rows and the keys row, in the Durable
	// Streams basin's partition beside the stream rows.
	Meta  meta.Store
	Basin string
	// Prefix is the path the protocol is served under (no trailing slash).
	Prefix   string
	Registry prometheus.Registerer
	Logger   *slog.Logger
	// AllowLoopbackWebhooks, TokenStands, Audit and KeyRotation are
	// star/durable's Config.AllowLoopbackWebhooks, TokenStands,
	// SubscriptionAudit and KeyRotation (documented there).
	AllowLoopbackWebhooks bool
	TokenStands           func(ctx context.Context, id, credential string) (bool, error)
	Audit                 time.Duration
	KeyRotation           time.Duration
	// Clock is the keys' time (time.Now when nil).
	Clock func() time.Time
}

// Manager drives the subscriptions of one handler: it keeps no state a
// client can observe (that is the rows), only a cache of the rows for
// matching appends, the names it saw appended lately and the work in
// flight.
type Manager struct {
	streams     Streams
	cluster     Cluster
	meta        meta.Store
	basin       string
	prefix      string
	tokenStands func(ctx context.Context, id, credential string) (bool, error)
	log         *slog.Logger
	keys        *signing.Loader
	policy      webhookPolicy
	client      *http.Client

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	slots  chan struct{}
	// nudged wakes the driver for the names in appended.
	nudged chan struct{}

	// auditEvery is the audit period (Config.SubscriptionAudit).
	auditEvery time.Duration

	mu     sync.Mutex
	cache  map[meta.Key]cachedSub // the rows as last read
	byRoot map[string]map[meta.Key]struct{}
	// appended holds the names written through this star since the driver
	// last looked (a set: a hot stream is one entry); recent remembers
	// them a while.
	appended map[string]struct{}
	recent   map[string]time.Time
	stars    []string // the live stars at the last audit (owners)
	// busy holds the subscriptions an append found with a wake in flight:
	// the append is pending once the wake ends (tick).
	busy map[meta.Key]time.Time
	// retried remembers, per subscription, the retry time a pass was made
	// for, so a backoff that ended with nothing pending is passed once.
	retried map[meta.Key]time.Time

	wakes      *prometheus.CounterVec
	deliveries *prometheus.CounterVec
	control    *prometheus.CounterVec
	passes     *prometheus.CounterVec
	owned      prometheus.Gauge
}

// cachedSub is a row as this star last read or wrote it, and when;
// owned says this star owns it (ownsLocked, decided when cached).
type cachedSub struct {
	row   subRow
	at    time.Time
	owned bool
}

// New starts the driver (its loop and the keys' rereads) until Close.
func New(cfg Config) (*Manager, error) {
	cfg.KeyRotation = cmp.Or(cfg.KeyRotation, signing.DefaultKeyRotation)
	if cfg.KeyRotation > 0 && cfg.KeyRotation < signing.MinKeyRotation {
		return nil, fmt.Errorf("durable: key rotation %v: want at least %v (or never)", cfg.KeyRotation, signing.MinKeyRotation)
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	m := &Manager{
		streams: cfg.Streams, cluster: cfg.Cluster, meta: cfg.Meta, basin: cfg.Basin, prefix: cfg.Prefix,
		tokenStands: cfg.TokenStands, log: cfg.Logger.With("part", "subscriptions"),
		policy: webhookPolicy{AllowLoopback: cfg.AllowLoopbackWebhooks},
		slots:  make(chan struct{}, maxDeliveries),
		nudged: make(chan struct{}, 1),
		cache:  map[meta.Key]cachedSub{},
		byRoot: map[string]map[meta.Key]struct{}{},
		recent: map[string]time.Time{},

		appended: map[string]struct{}{},
		busy:     map[meta.Key]time.Time{},

		retried:    map[meta.Key]time.Time{},
		auditEvery: cmp.Or(max(cfg.Audit, 0), DefaultSubscriptionAudit),
	}
	m.client = webhookClient(m.policy)
	km := signing.NewMetrics()
	m.keys = signing.NewLoader(cfg.Meta, signing.RowKey(cfg.Basin), cfg.Clock, cfg.KeyRotation, m.log, km)
	m.wakes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "durable", Name: "subscription_wakes_total",
		Help: "Durable Streams subscription wakes issued, by type (webhook, pull-wake).",
	}, []string{"type"})
	m.deliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "durable", Name: "subscription_deliveries_total",
		Help: "Webhook POSTs and wake-event appends, by type (webhook, pull-wake) and result (ok, done, failed; refused: the creator's access token no longer stands).",
	}, []string{"type", "result"})
	m.control = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "durable", Name: "subscription_requests_total",
		Help: "Subscription control requests by operation (put, get, delete, streams, callback, claim, ack, release, jwks) and result (ok or the protocol's error code).",
	}, []string{"op", "result"})
	m.passes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "durable", Name: "subscription_passes_total",
		Help: "Passes of the subscription driver over one subscription, by trigger (append, timer, busy, audit) and result (unchanged: decided on the cached row, no metastore I/O; written; fenced: the fresh row needed nothing; gone; error).",
	}, []string{"trigger", "result"})
	m.owned = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "starlog", Subsystem: "durable", Name: "subscriptions_owned",
		Help: "Subscriptions this star owns (audits and drives the timers of) at its last audit.",
	})
	for _, c := range append([]prometheus.Collector{m.wakes, m.deliveries, m.control, m.passes, m.owned}, km.Collectors()...) {
		if err := cfg.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("durable: register metrics: %w", err)
		}
	}
	m.ctx, m.cancel = context.WithCancel(context.Background())
	m.wg.Add(2)
	go m.run()
	go func() {
		defer m.wg.Done()
		m.keys.Run(m.ctx)
	}()
	return m, nil
}

// webhookClient posts webhooks: no proxy from the environment, no
// redirects (a redirect could aim at a host the URL policy refuses), and
// a dial that refuses addresses outside the policy, whatever the name
// resolved to.
func webhookClient(p webhookPolicy) *http.Client {
	d := &net.Dialer{Timeout: webhookTimeout, Control: func(_, address string, _ syscall.RawConn) error {
		host, _, err := net.SplitHostPort(address)
		if err != nil {
			return err
		}
		ip, err := netip.ParseAddr(host)
		if err != nil || !p.allowedIP(ip) {
			return fmt.Errorf("webhook: address %s is refused by the URL policy", host)
		}
		return nil
	}}
	return &http.Client{
		Timeout:       webhookTimeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			Proxy: nil, DialContext: d.DialContext, MaxIdleConnsPerHost: 4,
			IdleConnTimeout: 90 * time.Second, TLSHandshakeTimeout: webhookTimeout, ResponseHeaderTimeout: webhookTimeout,
		},
	}
}

// Close stops the driver and waits for its deliveries (they are bounded
// by webhookTimeout; cancelling ends them sooner).
func (m *Manager) Close() {
	m.cancel()
	m.wg.Wait()
	m.client.CloseIdleConnections()
}

// mutate applies change to the row until its conditional write holds
// (bounded by subAttempts). change sees the tails of the links and of
// extra; it returns whether the row changed (unchanged rows are not
// written) or a *subError (nothing written).
func (m *Manager) mutate(ctx context.Context, root, id string, extra []string, change func(*subRow, tails) (bool, error)) (subRow, error) {
	return m.mutateWith(ctx, root, id, extra, nil, nil, change)
}

// mutateAs is mutate for a client's request: authz checks each version of
// the row before its tails are read (a refused request costs no HEAD).
func (m *Manager) mutateAs(ctx context.Context, root, id string, extra []string, authz func(*subRow) error, change func(*subRow, tails) (bool, error)) (subRow, error) {
	return m.mutateWith(ctx, root, id, extra, nil, authz, change)
}

// mutateWith is mutate reusing known, tails read a moment ago, for the
// paths it has (a pass read them for its decision on the cached row), and
// checking authz (if set) first.
func (m *Manager) mutateWith(ctx context.Context, root, id string, extra []string, known *tails, authz func(*subRow) error, change func(*subRow, tails) (bool, error)) (subRow, error) {
	k := subKey(m.basin, root, id)
	for range subAttempts {
		it, err := m.meta.Get(ctx, k.PK, k.SK)
		if errors.Is(err, meta.ErrNotFound) {
			m.uncache(k)
			return subRow{}, errSubNotFound
		}
		if err != nil {
			return subRow{}, &metaError{err}
		}
		var s subRow
		if err := json.Unmarshal(it.Val, &s); err != nil {
			return subRow{}, fmt.Errorf("durable: decode subscription %s: %w", id, err)
		}
		if authz != nil {
			if err := authz(&s); err != nil {
				return subRow{}, err
			}
		}
		paths := make([]string, 0, len(s.Links)+len(extra))
		for i := range s.Links {
			paths = append(paths, s.Links[i].Path)
		}
		paths = append(paths, extra...)
		t := tails{}
		if known != nil && known.cover(paths) {
			t = *known
		} else if t, err = m.tails(ctx, root, paths); err != nil {
			return subRow{}, err
		}
		changed, err := change(&s, t)
		if err != nil || !changed {
			return s, err
		}
		val, err := json.Marshal(&s)
		if err != nil {
			return subRow{}, err
		}
		if _, err := m.meta.Put(ctx, k.PK, k.SK, val, meta.IfVer(it.Ver)); errors.Is(err, meta.ErrConditionFailed) {
			continue
		} else if err != nil {
			return subRow{}, &metaError{err}
		}
		m.recache(k, s)
		return s, nil
	}
	return subRow{}, fmt.Errorf("durable: subscription %s kept changing", id)
}

func (m *Manager) recache(k meta.Key, s subRow) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.cacheLocked(k, cachedSub{row: s, at: time.Now(), owned: m.ownsLocked(k)})
}

// cacheLocked caches a row and indexes it by root (m.mu held).
func (m *Manager) cacheLocked(k meta.Key, c cachedSub) {
	m.cache[k] = c
	keys := m.byRoot[c.row.Root]
	if keys == nil {
		keys = map[meta.Key]struct{}{}
		m.byRoot[c.row.Root] = keys
	}
	keys[k] = struct{}{}
}

func (m *Manager) uncache(k meta.Key) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c, ok := m.cache[k]; ok {
		delete(m.byRoot[c.row.Root], k)
		if len(m.byRoot[c.row.Root]) == 0 {
			delete(m.byRoot, c.row.Root)
		}
	}
	delete(m.cache, k)
	delete(m.busy, k)
	delete(m.retried, k)
}

// tails reads the Durable Streams tail of each path (under root) through
// the protocol (Streams.Tail), so a stream another star leads is asked of
// that star and closure, expiry and deletion count as they do for clients.
func (m *Manager) tails(ctx context.Context, root string, paths []string) (tails, error) {
	t := tails{at: make(map[string]uint64, len(paths)), present: make(map[string]bool, len(paths))}
	for _, p := range paths {
		if _, done := t.present[p]; done {
			continue
		}
		at, ok, err := m.streams.Tail(ctx, root+p)
		if err != nil {
			// A stream that does not answer (503, a timeout): the pass or
			// request is retried (503 to clients).
			return tails{}, err
		}
		t.at[p], t.present[p] = at, ok
	}
	return t, nil
}

// dispatch runs what a wake asks for, off the caller's path: a webhook
// POST or a wake-event append, in one of maxDeliveries slots.
func (m *Manager) dispatch(s subRow, wk wake) {
	m.wakes.WithLabelValues(wk.Type).Inc()
	select {
	case m.slots <- struct{}{}:
	default:
		m.log.Warn("subscription deliveries saturated; the wake waits for its lease to run out", "subscription", s.ID)
		return
	}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		defer func() { <-m.slots }()
		if !m.mayWake(s, wk) {
			return
		}
		if wk.Type == subWebhook {
			m.deliver(s, wk)
		} else {
			m.wakeEvent(s, wk)
		}
	}()
}

// streamInfo is a link as wakes and claims show it.
type streamInfo struct {
	Path       string `json:"path"`
	LinkType   string `json:"link_type"`
	Acked      string `json:"acked_offset"`
	Tail       string `json:"tail_offset"`
	HasPending bool   `json:"has_pending"`
}

func (s *subRow) infos(tailOf func(string) uint64) []streamInfo {
	out := make([]streamInfo, 0, len(s.Links))
	for i := range s.Links {
		l := &s.Links[i]
		tail := tailOf(l.Path)
		out = append(out, streamInfo{Path: l.Path, LinkType: l.linkType(), Acked: offsets.Format(l.Acked),
			Tail: offsets.Format(tail), HasPending: tail > l.Acked})
	}
	return out
}

// deliver POSTs the signed wake to the webhook and records the outcome:
// {"done": true} acks the snapshot and finishes the wake (and wakes again
// if more is pending); a failure withdraws the wake and backs off.
func (m *Manager) deliver(s subRow, wk wake) {
	keys, err := m.keys.Get(m.ctx)
	if err != nil {
		m.log.Warn("webhook: no signing key", "subscription", s.ID, "err", err)
		m.failed(s, wk)
		return
	}
	// One key signs the wake and its token: the one signing now.
	key := keys.Signer(m.keys.Now())
	body, _ := json.Marshal(map[string]any{
		"subscription_id": s.ID,
		"wake_id":         wk.WakeID,
		"generation":      wk.Generation,
		"streams":         s.infos(func(p string) uint64 { return s.Snapshot[p] }),
		"callback_url":    s.Base + reservedSegment + "/subscriptions/" + url.PathEscape(s.ID) + "/callback",
		"callback_token":  key.MintToken(signing.WakeToken{Root: s.Root, ID: s.ID, Incarnation: s.Incarnation, Generation: wk.Generation, WakeID: wk.WakeID}),
	})
	ctx, cancel := context.WithTimeout(m.ctx, webhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.Config.WebhookURL, bytes.NewReader(body))
	if err != nil {
		m.failed(s, wk)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Webhook-Signature", key.Signature(body, time.Now().Unix()))
	resp, err := m.client.Do(req)
	if err != nil {
		m.log.Info("webhook delivery failed", "subscription", s.ID, "generation", wk.Generation, "err", err)
		m.failed(s, wk)
		return
	}
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxWebhookResponse))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		m.log.Info("webhook delivery refused", "subscription", s.ID, "generation", wk.Generation, "status", resp.StatusCode)
		m.failed(s, wk)
		return
	}
	var reply struct {
		Done bool `json:"done"`
	}
	_ = json.Unmarshal(raw, &reply) // anything but {"done": true} waits for a callback
	result := "ok"
	if reply.Done {
		result = "done"
	}
	m.deliveries.WithLabelValues(subWebhook, result).Inc()
	pctx, pcancel := context.WithTimeout(m.ctx, passTimeout)
	defer pcancel()
	var next *wake
	row, err := m.mutate(pctx, s.Root, s.ID, nil, func(cur *subRow, t tails) (bool, error) {
		next = nil
		if cur.Incarnation != s.Incarnation || cur.WakeID != wk.WakeID {
			return false, nil // fenced meanwhile: a callback finished it, or its lease ran out
		}
		changed := cur.Failed || cur.Retries > 0
		cur.deliveryOK()
		if reply.Done {
			cur.ackSnapshot()
			next = cur.done(time.Now(), newWakeID(), t)
			changed = true
		}
		return changed, nil
	})
	if err != nil {
		m.log.Warn("webhook: recording the delivery failed", "subscription", s.ID, "err", err)
		return
	}
	if next != nil {
		m.dispatch(row, *next)
	}
}

// mayWake checks, before a delivery, that the subscription's creator
// still stands (creatorStands): a wake of a subscription whose creator's
// token was revoked, expired or never allowed the append is withdrawn
// (result refused) and backs off as a failed delivery does, so it is
// checked again at most every retryCap while work is pending.
func (m *Manager) mayWake(s subRow, wk wake) bool {
	ctx, cancel := context.WithTimeout(m.ctx, passTimeout)
	ok, err := m.creatorStands(ctx, &s)
	cancel()
	switch {
	case err != nil:
		m.log.Info("subscription: checking its creator's token failed", "subscription", s.ID, "err", err)
		m.failed(s, wk)
		return false
	case !ok:
		m.deliveries.WithLabelValues(wk.Type, "refused").Inc()
		m.log.Warn("subscription: its creator's access token was revoked, has expired or does not allow the wake; not waking",
			"subscription", s.ID, "root", s.Root, "token", s.Creator.TokenID)
		m.withdraw(s, wk)
		return false
	}
	return true
}

// failed withdraws the wake if it is still current and backs off.
func (m *Manager) failed(s subRow, wk wake) {
	m.deliveries.WithLabelValues(wk.Type, "failed").Inc()
	m.withdraw(s, wk)
}

// withdraw ends the wake if it is still current (and not claimed) and
// backs the next one off.
func (m *Manager) withdraw(s subRow, wk wake) {
	ctx, cancel := context.WithTimeout(m.ctx, passTimeout)
	defer cancel()
	_, err := m.mutate(ctx, s.Root, s.ID, nil, func(cur *subRow, _ tails) (bool, error) {
		if cur.Incarnation != s.Incarnation || cur.WakeID != wk.WakeID || cur.Holder != "" {
			return false, nil
		}
		cur.deliveryFailed(time.Now(), rand.Float64())
		return true, nil
	})
	if err != nil && !errors.Is(err, errSubNotFound) && m.ctx.Err() == nil {
		m.log.Warn("subscription: recording a failed delivery failed", "subscription", s.ID, "err", err)
	}
}

// wakeEvent appends the wake event to the pull-wake subscription's wake
// stream (a JSON stream the application created), through the protocol
// (Streams.Append), so it is an ordinary, serialized append on the
// stream's leader.
func (m *Manager) wakeEvent(s subRow, wk wake) {
	ev, _ := json.Marshal(map[string]any{
		"type": "wake", "subscription_id": s.ID, "stream": wk.Stream,
		"generation": wk.Generation, "ts": time.Now().UnixMilli(),
	})
	ctx, cancel := context.WithTimeout(m.ctx, passTimeout)
	defer cancel()
	if err := m.streams.Append(ctx, s.Root+s.Config.WakeStream, "application/json", ev); err != nil {
		m.log.Info("wake event append failed", "subscription", s.ID, "wake_stream", s.Config.WakeStream, "err", err)
		m.failed(s, wk)
		return
	}
	m.deliveries.WithLabelValues(subPullWake, "ok").Inc()
}

func newWakeID() string { return "w_" + newIncarnation() }

// newIncarnation is a random id (16 hex digits).
func newIncarnation() string {
	var b [8]byte
	_, _ = crand.Read(b[:])
	return hex.EncodeToString(b[:])
}
