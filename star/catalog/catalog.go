// Package catalog keeps a star's basins and streams: their rows in the
// metastore (shared/meta's BasinRow and StreamRow), the star's bounded
// caches of them, creation, reconfiguration and deletion with their
// idempotency, listings, and the row check's judgment of a led stream.
//
// Layering: catalog sits below star/lead and star/node and imports
// neither. What a catalog change means for the streams this star leads
// (stop leading a deleted stream, retire its lease, apply a new config,
// tell peers a basin went) it asks of the Leader the node passes in.
//
// Every failure a client should see is an *api.Error.
package catalog

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

// The catalog's caches are bounded (issue 26): a cached basin entry is
// trusted for Config.BasinCacheTTL at most, and never to judge a row a
// write will overwrite (createStream reads the basin again after the name
// row, so "a stream of an earlier basin" is decided on a basin row read
// after it). See docs/write-path.md, "Catalog invariants".

// DefaultBasinCacheTTL is Config.BasinCacheTTL's default: well below the
// deletion-pending window (30 s), so a star's answers for a deleted or
// re-created basin catch up long before its name can be reused.
const DefaultBasinCacheTTL = 5 * time.Second

// Config is the catalog's part of the star's config.
type Config struct {
	// DeletionPending is how long a deleted stream or basin answers 409
	// *_deletion_pending before it is gone.
	DeletionPending time.Duration
	// BasinCacheTTL bounds how long a cached basin row is trusted.
	BasinCacheTTL time.Duration
}

// Leader is what the catalog asks of the star's leadership when a
// change touches streams this star may lead. The node implements it.
type Leader interface {
	// StopDeleted stops leading deleted stream id here for good and, if
	// this star led it, retires its lease.
	StopDeleted(ctx context.Context, id, name string)
	// RetireLease retires deleted stream id's lease before its name moves
	// to a new id (the delete fence).
	RetireLease(ctx context.Context, id, name string) error
	// Reconfigured applies stream id's new resolved config if it is led
	// here: its timestamping at once and, with reopen, a changed storage
	// class by releasing the stream to reopen on its new chain.
	Reconfigured(ctx context.Context, id string, cfg api.EffectiveStreamConfig, reopen bool)
	// TellPeers asks the live peers to run the row check of a basin this
	// star deleted.
	TellPeers(ctx context.Context, basin string)
}

// Deps are the catalog's stores, clock and collaborators.
type Deps struct {
	Meta     meta.Store
	Now      func() time.Time // resource times and deletion timing
	NewID    func() string    // ids of new basins and streams (nil: NewID)
	Logger   *slog.Logger
	Registry prometheus.Registerer
	Leader   Leader
	// AdmitCreate, when set, admits a new stream in a basin with quotas
	// (star/quota's stream count) or refuses it with an *api.Error.
	AdmitCreate func(ctx context.Context, basin, basinID string, q api.BasinQuotas) error
}

// Catalog is one star's view of the basins and streams.
type Catalog struct {
	cfg  Config
	meta meta.Store
	now  func() time.Time
	ids  func() string
	log  *slog.Logger
	lead Leader
	m    *metrics

	admitCreate func(ctx context.Context, basin, basinID string, q api.BasinQuotas) error

	mu      sync.Mutex
	basins  map[string]*BasinEntry
	streams map[StreamKey]*StreamEntry
}

// New returns the catalog of a star.
func New(cfg Config, d Deps) *Catalog {
	c := &Catalog{
		cfg: cfg, meta: d.Meta, now: d.Now, ids: d.NewID, log: d.Logger, lead: d.Leader, admitCreate: d.AdmitCreate,
		basins:  map[string]*BasinEntry{},
		streams: map[StreamKey]*StreamEntry{},
	}
	if c.now == nil {
		c.now = time.Now
	}
	if c.ids == nil {
		c.ids = NewID
	}
	if c.log == nil {
		c.log = slog.Default()
	}
	c.m = newMetrics(d.Registry, c.log)
	return c
}

// metrics counts the catalog's cache re-reads.
type metrics struct {
	// basinRereads counts basin rows read again, by why: "expired" (the
	// entry outlived the TTL), "deleted" (a deleted row is never trusted)
	// or "stale" (a stream row named another incarnation of the basin
	// than the cached one).
	basinRereads *prometheus.CounterVec
	// stopped counts streams the row check stopped leading.
	stopped prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, log *slog.Logger) *metrics {
	m := &metrics{
		basinRereads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "catalog", Name: "basin_rereads_total",
			Help: "Basin rows read again instead of trusted from the cache, by reason (expired: older than the basin cache TTL; deleted: a deleted row, never trusted; stale: a stream row named another incarnation of the basin).",
		}, []string{"reason"}),
	}
	m.basinRereads = RegisterShared(reg, log, m.basinRereads, "catalog_basin_rereads_total")
	m.stopped = RegisterShared(reg, log, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "catalog", Name: "deleted_streams_stopped_total",
		Help: "Streams this star stopped leading because the row check found them deleted or replaced, or their basin deleted, by a request served elsewhere.",
	}), "catalog_deleted_streams_stopped_total")
	return m
}

// RegisterShared registers c with reg; when a registry shared by several
// stars (tests) has it already, it returns the one registered, so this
// star counts there too. Another failure is logged and c is returned
// unregistered.
func RegisterShared[C prometheus.Collector](reg prometheus.Registerer, log *slog.Logger, c C, what string) C {
	if reg == nil {
		return c
	}
	err := reg.Register(c)
	if err == nil {
		return c
	}
	if dup, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if prev, ok := dup.ExistingCollector.(C); ok {
			return prev
		}
	}
	log.Warn("registering a metric failed", "metric", what, "err", err)
	return c
}

// basinFresh reports whether cached entry e may still be trusted at now.
func (c *Catalog) basinFresh(e *BasinEntry, now time.Time) bool {
	return now.Sub(e.ReadAt) < c.cfg.BasinCacheTTL
}

// Cached is how many stream rows the catalog caches.
func (c *Catalog) Cached() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.streams)
}

// Forget drops stream key's cached row if it still names stream id (the
// idle release: a stream not led here costs nothing).
func (c *Catalog) Forget(key StreamKey, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur := c.streams[key]; cur != nil && cur.Row.ID == id {
		delete(c.streams, key)
	}
}

// cachedStreams returns the cached rows of basin's streams.
func (c *Catalog) cachedStreams(basin string) []*StreamEntry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*StreamEntry
	for k, e := range c.streams {
		if k.Basin == basin {
			out = append(out, e)
		}
	}
	return out
}
