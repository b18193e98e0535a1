package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
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

// catalogMetrics counts the catalog's cache re-reads.
type catalogMetrics struct {
	// basinRereads counts basin rows read again, by why: "expired" (the
	// entry outlived the TTL), "deleted" (a deleted row is never trusted)
	// or "stale" (a stream row named another incarnation of the basin
	// than the cached one).
	basinRereads *prometheus.CounterVec
	// stopped counts streams the row check stopped leading.
	stopped prometheus.Counter
}

func newCatalogMetrics(n *Node) *catalogMetrics {
	m := &catalogMetrics{
		basinRereads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "catalog", Name: "basin_rereads_total",
			Help: "Basin rows read again instead of trusted from the cache, by reason (expired: older than the basin cache TTL; deleted: a deleted row, never trusted; stale: a stream row named another incarnation of the basin).",
		}, []string{"reason"}),
	}
	m.basinRereads = registerShared(n, m.basinRereads, "catalog_basin_rereads_total")
	m.stopped = registerShared(n, prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "catalog", Name: "deleted_streams_stopped_total",
		Help: "Streams this star stopped leading because the row check found them deleted or replaced, or their basin deleted, by a request served elsewhere.",
	}), "catalog_deleted_streams_stopped_total")
	return m
}

// basinFresh reports whether cached entry e may still be trusted at now.
func (n *Node) basinFresh(e *basinEntry, now time.Time) bool {
	return now.Sub(e.readAt) < n.cfg.BasinCacheTTL
}
