package reader

import "github.com/prometheus/client_golang/prometheus"

// Cache kinds (the "kind" label of the cache metrics).
const (
	kindEpoch   = "epoch"   // epoch params: bucket sets
	kindFooter  = "footer"  // settled footers
	kindExtent  = "extent"  // decoded span-ref extents of transit bundles
	kindSettled = "settled" // decoded block chunks of settled objects
)

// GET kinds (the "kind" label of object_gets_total) are the cache kinds
// that read objects, plus "head" for a settled object whose size the
// catalog row lacks.
const kindHead = "head"

type metrics struct {
	cacheHits    *prometheus.CounterVec
	cacheMisses  *prometheus.CounterVec
	gets         *prometheus.CounterVec
	getErrors    *prometheus.CounterVec
	fallthroughs prometheus.Counter
	hedges       prometheus.Counter
	metaQueries  prometheus.Counter
	// tailExtents counts tail window extents read from their slot objects
	// because the leader's flight index no longer held their bundles.
	tailExtents prometheus.Counter
	readLatency prometheus.Histogram
	// prefetchBytes is the read budget in use; prefetchUnits counts units
	// fetched ahead by what became of them (used, failed, unfinished).
	prefetchBytes prometheus.Gauge
	prefetchUnits *prometheus.CounterVec
}

// newMetrics creates the reader's instruments and registers them with reg
// (nil: unregistered, still usable).
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		cacheHits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "reader",
			Name: "cache_hits_total", Help: "Read cache hits by kind (epoch, footer, extent, settled)."}, []string{"kind"}),
		cacheMisses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "reader",
			Name: "cache_misses_total", Help: "Read cache misses by kind (epoch, footer, extent, settled)."}, []string{"kind"}),
		gets: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "reader",
			Name: "object_gets_total", Help: "Object store requests issued by reads, by kind (extent, footer, settled, head)."}, []string{"kind"}),
		getErrors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "reader",
			Name: "object_get_errors_total", Help: "Object store reads that failed or returned undecodable bytes, by kind."}, []string{"kind"}),
		fallthroughs: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "reader",
			Name: "bucket_fallthroughs_total", Help: "Extent reads that asked a further bucket of the set (the previous one failed, or a hedge)."}),
		hedges: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "reader",
			Name: "bucket_hedges_total", Help: "Extent reads that asked the next bucket of the set because the previous one had not answered within the hedge delay."}),
		metaQueries: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "reader",
			Name: "meta_queries_total", Help: "Metastore row queries issued by reads (floor lookups, forward pages, time scans)."}),
		tailExtents: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "reader",
			Name: "tail_store_extents_total", Help: "Tail window extents (released, not yet absorbed) read from the object store because the flight index had evicted their bundles."}),
		readLatency: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "starlog", Subsystem: "reader",
			Name: "read_duration_seconds", Help: "Duration of one Read call.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 18)}), // 0.1 ms … 13 s
		prefetchBytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "starlog", Subsystem: "reader",
			Name: "prefetch_bytes", Help: "Bytes of the star-wide read budget held by readers' read-ahead: ranged GETs in flight and data fetched ahead of the reader."}),
		prefetchUnits: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "reader",
			Name: "prefetch_units_total", Help: "Extents and settled chunks fetched ahead, by outcome once the reader passed them (used, unused, failed, unfinished)."}, []string{"result"}),
	}
	for _, r := range []string{"used", "unused", "failed", "unfinished"} {
		m.prefetchUnits.WithLabelValues(r)
	}
	for _, k := range []string{kindEpoch, kindFooter, kindExtent, kindSettled} {
		m.cacheHits.WithLabelValues(k)
		m.cacheMisses.WithLabelValues(k)
	}
	for _, k := range []string{kindExtent, kindFooter, kindSettled, kindHead} {
		m.gets.WithLabelValues(k)
		m.getErrors.WithLabelValues(k)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.cacheHits, m.cacheMisses, m.gets, m.getErrors, m.fallthroughs, m.hedges, m.metaQueries, m.tailExtents, m.readLatency, m.prefetchBytes, m.prefetchUnits} {
			reg.MustRegister(c)
		}
	}
	return m
}
