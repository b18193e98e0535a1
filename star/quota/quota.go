// Package quota enforces a basin's quotas (api.BasinQuotas: stored bytes,
// append bytes per second, streams) across the stars (docs/design.md,
// "Quotas per basin").
//
// A basin's use is the sum over the stars that lead its streams. Each star
// counts what it admits to each basin with a quota over a sliding window
// and, every Period, writes its figures to its usage row of the basin
// (shared/meta's quota#<basin>/<star>) and reads every star's rows; an
// append is admitted against the other stars' rows as last read plus its
// own window now. Basins without a quota cost nothing but a map lookup:
// no row, no metastore write.
package quota

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
)

// DefaultPeriod is how often a star writes its usage rows and reads the
// others': the staleness of what a star knows of the other stars' use is
// at most two periods (their write, then its read).
const DefaultPeriod = 2 * time.Second

// DefaultWindow is the span the append rate is averaged over.
const DefaultWindow = 5 * time.Second

// staleRows is how many periods a usage row counts for after it was
// written: a star that stopped (or no longer appends to the basin) drops
// out of the sum within that.
const staleRows = 3

// Config is a star's quota enforcement's config.
type Config struct {
	Star   string        // this star's id: its rows' sort key
	Period time.Duration // 0: DefaultPeriod
	Window time.Duration // 0: DefaultWindow
}

// Deps are what the enforcement reads.
type Deps struct {
	Meta meta.Store
	Now  func() time.Time
	// Basin reads a basin's incarnation id and quotas as the catalog has
	// them (cached within its TTL); a deleted basin is an *api.Error 404.
	Basin func(ctx context.Context, name string) (id string, q *api.BasinQuotas, err error)
	// Stored reads a basin's retained bytes (the catalog's
	// BasinStorageBytes): read only for a basin with a stored-bytes quota.
	Stored   func(ctx context.Context, basin string) (uint64, error)
	Registry prometheus.Registerer
	Logger   *slog.Logger
}

// Manager is one star's quota enforcement.
type Manager struct {
	cfg Config
	d   Deps

	// seen are the basins appended to since the last tick that had no
	// state: the tick reads their config, so a quota set on a basin
	// reaches appenders that opened before it.
	seen sync.Map // basin → struct{}

	mu     sync.RWMutex
	basins map[string]*basinState // the basins with a quota this star met

	refused *prometheus.CounterVec
}

// basinState is what a star knows of one basin with a quota.
type basinState struct {
	id  string
	q   api.BasinQuotas
	win *window
	// others is the other stars' append rate and the newest stored-bytes
	// reading (any star's, this one's too) as of the last tick.
	others   Usage
	storedAt time.Time
	streams  uint64    // live streams at the last create's count
	active   time.Time // the last append admitted or refused here
	wrote    bool      // this star's row says it is using the basin
}

// New returns a star's quota enforcement; Run starts its rows' loop.
func New(cfg Config, d Deps) *Manager {
	if cfg.Period <= 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.Default()
	}
	m := &Manager{cfg: cfg, d: d, basins: map[string]*basinState{}}
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Name: "quota_refused_total",
		Help: "Requests refused 403 quota_exhausted by a basin's quota, by dimension (stored_bytes, append_bytes_per_sec, streams).",
	}, []string{"dimension"})
	if d.Registry != nil {
		m.refused = register(d.Registry, m.refused, d.Logger)
		register(d.Registry, prometheus.Collector(collector{m}), d.Logger)
	}
	return m
}

// register registers c, or returns the collector a registry shared by
// several stars (tests) already has.
func register[C prometheus.Collector](reg prometheus.Registerer, c C, log *slog.Logger) C {
	err := reg.Register(c)
	if err == nil {
		return c
	}
	if dup, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if prev, ok := dup.ExistingCollector.(C); ok {
			return prev
		}
		return c
	}
	log.Warn("registering a quota metric failed", "err", err)
	return c
}

// Observe records a basin's config as an appender opening on it read it:
// its quotas take effect at once here (nil: none, the basin is forgotten).
func (m *Manager) Observe(basin, id string, q *api.BasinQuotas) {
	if q == nil || q.IsZero() {
		// The common case, a basin without quotas, takes only the read
		// lock: every unary append opens through here.
		m.mu.RLock()
		_, known := m.basins[basin]
		m.mu.RUnlock()
		if known {
			m.mu.Lock()
			delete(m.basins, basin)
			m.mu.Unlock()
		}
		return
	}
	m.mu.Lock()
	st := m.state(basin)
	st.id, st.q = id, *q
	m.mu.Unlock()
}

// state is basin's state, made if new; m.mu is held.
func (m *Manager) state(basin string) *basinState {
	st := m.basins[basin]
	if st == nil {
		st = &basinState{win: newWindow(m.cfg.Window)}
		m.basins[basin] = st
	}
	return st
}

// Take admits an append of n metered bytes to basin, or refuses it with
// 403 quota_exhausted: its stored bytes or its append rate, summed over
// the stars, are at or over the basin's quota. Admitted bytes count
// toward this star's rate.
func (m *Manager) Take(basin string, n uint64) error {
	m.mu.RLock()
	_, known := m.basins[basin]
	m.mu.RUnlock()
	if !known {
		if _, ok := m.seen.Load(basin); !ok {
			m.seen.Store(basin, struct{}{})
		}
		return nil
	}
	m.mu.Lock()
	st := m.basins[basin]
	if st == nil { // forgotten meanwhile: no quota
		m.mu.Unlock()
		return nil
	}
	now := m.d.Now()
	st.active = now
	u := st.others
	u.AppendBytesPerSec = satAdd(u.AppendBytesPerSec, st.win.rate(now))
	dim, err := DecideAppend(st.q, u)
	if err == nil {
		st.win.add(now, n)
	}
	m.mu.Unlock()
	if err != nil {
		m.refused.WithLabelValues(dim).Inc()
		return err
	}
	return nil
}

// AdmitCreate admits the creation of a stream in basin (incarnation id)
// under quotas q, counting the basin's live streams in the metastore (up
// to the quota: the count costs at most that many rows' reads). Two
// stars creating at once may both pass the last slot (docs/design.md,
// "Quotas per basin", states the bound).
func (m *Manager) AdmitCreate(ctx context.Context, basin, id string, q api.BasinQuotas) error {
	if q.Streams == nil {
		return nil
	}
	live, err := m.countStreams(ctx, basin, id, *q.Streams)
	if err != nil {
		return err
	}
	m.mu.Lock()
	st := m.state(basin)
	st.id, st.q, st.streams = id, q, live
	m.mu.Unlock()
	if err := DecideCreate(q, live); err != nil {
		m.refused.WithLabelValues(DimStreams).Inc()
		return err
	}
	return nil
}

// countStreams counts basin's live streams of incarnation id (a stream
// being deleted no longer counts), stopping at limit.
func (m *Manager) countStreams(ctx context.Context, basin, id string, limit uint64) (uint64, error) {
	q := meta.Query{PK: meta.StreamNameKey(basin, "").PK, From: meta.StreamNamePrefix, To: meta.StreamNameEnd, Limit: 500}
	var live uint64
	for {
		pg, err := m.d.Meta.Query(ctx, q)
		if err != nil {
			return 0, api.Unavailable("counting the basin's streams for its quota: %v", err)
		}
		for _, it := range pg.Items {
			row, err := meta.DecodeStreamRow(it)
			if err != nil || row.BasinID != id || row.DeletedAt != nil {
				continue
			}
			if live++; live >= limit {
				return live, nil
			}
		}
		if pg.Next == "" {
			return live, nil
		}
		q.PageToken = pg.Next
	}
}

// Run writes this star's usage rows and reads the others' every period
// until ctx ends.
func (m *Manager) Run(ctx context.Context) {
	t := time.NewTicker(m.cfg.Period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		tctx, cancel := context.WithTimeout(ctx, m.cfg.Period)
		m.Tick(tctx)
		cancel()
	}
}

// Tick is one period's work: refresh the config of every basin met since
// the last tick, and for each basin with a quota this star uses, write
// its usage row and read every star's.
func (m *Manager) Tick(ctx context.Context) {
	names := map[string]bool{}
	m.seen.Range(func(k, _ any) bool {
		names[k.(string)] = true
		m.seen.Delete(k)
		return true
	})
	m.mu.Lock()
	for b := range m.basins {
		names[b] = true
	}
	m.mu.Unlock()
	for b := range names {
		if ctx.Err() != nil {
			return
		}
		m.tickBasin(ctx, b)
	}
}

// tickBasin refreshes one basin and exchanges its usage rows.
func (m *Manager) tickBasin(ctx context.Context, basin string) {
	id, q, err := m.d.Basin(ctx, basin)
	if err != nil {
		if ae, ok := errors.AsType[*api.Error](err); ok && ae.Status == 404 {
			m.Observe(basin, "", nil)
		}
		return // a failed read keeps what is known
	}
	m.Observe(basin, id, q)
	if q == nil || (q.StoredBytes == nil && q.AppendBytesPerSec == nil) {
		return // no quota, or only a stream quota: the catalog counts those
	}
	now := m.d.Now()
	m.mu.Lock()
	st := m.basins[basin]
	if st == nil {
		m.mu.Unlock()
		return
	}
	rate := st.win.rate(now)
	using := now.Sub(st.active) <= m.cfg.Window+m.cfg.Period
	wrote := st.wrote
	m.mu.Unlock()
	if !using && !wrote {
		return // no row to write, none to read: an idle basin costs nothing
	}
	var stored uint64
	if q.StoredBytes != nil && using {
		if stored, err = m.d.Stored(ctx, basin); err != nil {
			m.d.Logger.Warn("quota: reading a basin's stored bytes", "basin", basin, "err", err)
		}
	}
	row := meta.QuotaUsageRow{BasinID: id, AppendBytesPerSec: rate, StoredBytes: stored, At: now.UTC()}
	k := meta.QuotaUsageKey(basin, m.cfg.Star)
	if _, err := m.d.Meta.Put(ctx, k.PK, k.SK, meta.Encode(row), meta.Always()); err != nil {
		m.d.Logger.Warn("quota: writing a usage row", "basin", basin, "err", err)
	}
	rows, err := m.readRows(ctx, basin)
	if err != nil {
		m.d.Logger.Warn("quota: reading the usage rows", "basin", basin, "err", err)
		return
	}
	others, storedAt := Others(m.cfg.Star, id, rows, now, staleRows*m.cfg.Period)
	m.mu.Lock()
	if st := m.basins[basin]; st != nil {
		st.others, st.storedAt, st.wrote = others, storedAt, using
	}
	m.mu.Unlock()
}

// readRows reads every star's usage row of basin.
func (m *Manager) readRows(ctx context.Context, basin string) (map[string]meta.QuotaUsageRow, error) {
	q := meta.Query{PK: meta.QuotaUsageKey(basin, "").PK, From: "", To: "~", Limit: 500}
	rows := map[string]meta.QuotaUsageRow{}
	for {
		pg, err := m.d.Meta.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, it := range pg.Items {
			if r, err := meta.DecodeQuotaUsageRow(it); err == nil {
				rows[it.SK] = r
			}
		}
		if pg.Next == "" {
			return rows, nil
		}
		q.PageToken = pg.Next
	}
}
