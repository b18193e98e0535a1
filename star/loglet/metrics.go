package loglet

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are one loglet's Prometheus instruments; the class is a constant
// label so the star's two loglets share one registry.
type Metrics struct {
	ackLatency prometheus.Observer
	// ackQuantiles and putQuantiles repeat ackLatency and putLatency as
	// summaries (p50, p99 over the last minute): the CloudWatch agent
	// drops histograms and forwards summaries, so the stack's dashboard
	// reads these (infra/userdata/forwarded.json).
	ackQuantiles  prometheus.Observer
	putQuantiles  *prometheus.SummaryVec
	commitLatency prometheus.Observer
	poolWait      prometheus.Observer
	admitWait     prometheus.Observer
	flightBytes   prometheus.Observer
	putLatency    *prometheus.HistogramVec
	putErrors     *prometheus.CounterVec
	inflight      prometheus.Gauge
	// degraded is 1 while the class is degraded (failing.degraded).
	degraded       prometheus.Gauge
	backlogFlights prometheus.Gauge
	backlogAge     prometheus.Gauge
	stalls         *prometheus.CounterVec
	admitStalls    *prometheus.CounterVec
	undecidable    prometheus.Counter
	recoveries     *prometheus.CounterVec
	recoveryRetry  *prometheus.CounterVec
	absorbPass     prometheus.Observer
	absorbErrors   prometheus.Counter
	// absorbWrites counts the metastore writes of absorb passes (refs,
	// markers, shards, checkpoints); absorbPressured the passes run before
	// the write budget allowed, because the backlog was under pressure.
	absorbWrites    prometheus.Counter
	absorbPressured prometheus.Counter
	halts           prometheus.Counter
	// indexBytes is the bundle bytes the flight index holds in memory;
	// indexEvictions counts the bundles it let go of before their absorb.
	indexBytes     prometheus.Gauge
	indexEvictions prometheus.Counter
}

// MetricClassDegraded is the degraded-class gauge, without the starlog_
// namespace: starlog_storage_class_degraded{class} on /metrics, which the
// stack forwards to CloudWatch and alarms on (infra/userdata,
// infra/stack/alarms.go).
const MetricClassDegraded = "storage_class_degraded"

// NewMetrics registers a loglet's instruments with reg (nil: unregistered).
func NewMetrics(reg prometheus.Registerer, labels ...string) *Metrics {
	cl := prometheus.Labels{}
	for i := 0; i+1 < len(labels); i += 2 {
		cl[labels[i]] = labels[i+1]
	}
	f := func(c prometheus.Collector) {
		if reg != nil {
			reg.MustRegister(c)
		}
	}
	lat := prometheus.ExponentialBuckets(0.0005, 2, 18) // 0.5 ms … 65 s
	h := func(name, help string, buckets []float64) prometheus.Histogram {
		x := prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "starlog", Name: name, Help: help, ConstLabels: cl, Buckets: buckets})
		f(x)
		return x
	}
	g := func(name, help string) prometheus.Gauge {
		x := prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "starlog", Name: name, Help: help, ConstLabels: cl})
		f(x)
		return x
	}
	m := &Metrics{
		ackLatency:     h("ack_latency_seconds", "From cut to release of a flight: the append's durable ack latency below the pool.", lat),
		commitLatency:  h("commit_latency_seconds", "From cut to W confirms of a slot.", lat),
		poolWait:       h("pool_wait_seconds", "Time a batch waited in the pool before its flight was cut.", lat),
		admitWait:      h("admit_wait_seconds", "Time an append waited for pool budget.", lat),
		flightBytes:    h("flight_bytes", "Size of rendered flights.", prometheus.ExponentialBuckets(1024, 2, 16)),
		inflight:       g("slots_in_flight", "Slots claimed and not yet released."),
		backlogFlights: g("backlog_flights", "Released flights not yet absorbed."),
		backlogAge:     g("backlog_age_seconds", "Age of the oldest released flight not yet absorbed."),
		absorbPass:     h("absorb_pass_seconds", "Duration of an absorb pass.", lat),
		degraded:       g(MetricClassDegraded, "1 while the class commits nothing: no flight reached W within the recovery deadline of an epoch's halt (its buckets refuse or do not answer), so waiting appends were answered 503 and new ones are refused at once until a flight commits; else 0."),
		indexBytes:     g("flight_index_bundle_bytes", "Rendered bundles of released, unabsorbed flights the flight index holds in memory (at most the index cache bound)."),
	}
	quantiles := map[float64]float64{0.5: 0.01, 0.99: 0.001}
	ackq := prometheus.NewSummary(prometheus.SummaryOpts{Namespace: "starlog", Name: "ack_latency_summary_seconds",
		Help:        "ack_latency_seconds as a summary: p50 and p99 over the last minute (for CloudWatch, which takes no histograms).",
		ConstLabels: cl, Objectives: quantiles, MaxAge: time.Minute, AgeBuckets: 3})
	f(ackq)
	m.ackQuantiles = ackq
	m.putQuantiles = prometheus.NewSummaryVec(prometheus.SummaryOpts{Namespace: "starlog", Name: "put_latency_summary_seconds",
		Help:        "put_latency_seconds as a summary: p50 and p99 over the last minute, per bucket (for CloudWatch, which takes no histograms).",
		ConstLabels: cl, Objectives: quantiles, MaxAge: time.Minute, AgeBuckets: 3}, []string{"bucket"})
	m.putLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "starlog", Name: "put_latency_seconds", Help: "Slot PUT latency per bucket.", ConstLabels: cl, Buckets: lat}, []string{"bucket"})
	m.putErrors = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Name: "put_errors_total", Help: "Slot PUTs that did not create the copy, per bucket.", ConstLabels: cl}, []string{"bucket"})
	m.stalls = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Name: "backlog_stalls_total", Help: "Times publishing blocked at the backlog budget, by diagnosed cause.", ConstLabels: cl}, []string{"cause"})
	m.admitStalls = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Name: "admission_stalls_total", Help: "Times appends had to wait for pool budget, by diagnosed cause (why the flusher was not draining the pool).", ConstLabels: cl}, []string{"cause"})
	m.undecidable = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Name: "fence_undecidable_total", Help: "Own fences that stopped at a slot they could not decide (unreadable occupants, or a bucket they need unreachable); the log names the key.", ConstLabels: cl})
	m.recoveries = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Name: "epoch_recoveries_total", Help: "Halted epochs by how recovery ended: recovered (a new epoch), deposed, or late (appends answered unavailable before it ended).", ConstLabels: cl}, []string{"result"})
	m.recoveryRetry = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Name: "recovery_retries_total", Help: "Failed attempts of a halted epoch's recovery, by step (fence, mint); each is retried with backoff until it succeeds or the loglet is deposed or closed.", ConstLabels: cl}, []string{"step"})
	m.absorbErrors = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Name: "absorb_errors_total", Help: "Absorb passes that failed and were retried.", ConstLabels: cl})
	m.absorbWrites = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Name: "absorb_meta_writes_total", Help: "Metastore writes of absorb passes: span refs, markers and their stream shards, checkpoints.", ConstLabels: cl})
	m.absorbPressured = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Name: "absorb_pressured_passes_total", Help: "Absorb passes run before the metastore write budget allowed, because the backlog reached half its budget (the budget cannot keep up with the stream count) or a close or handoff waits for the absorb.", ConstLabels: cl})
	m.indexEvictions = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Name: "flight_index_evictions_total", Help: "Bundles of released flights the flight index let go of before their absorb (reads of them GET the slot object).", ConstLabels: cl})
	m.halts = prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Name: "epoch_halts_total", Help: "Epochs halted (foreign occupant or flight deadline).", ConstLabels: cl})
	// Every cause is exported from the start, at 0: the CloudWatch agent
	// turns a counter into the delta between two scrapes, so a series
	// that first appears at 1 would never show its first stall (the
	// stack's stalls alarm).
	for _, cause := range []string{CauseAbsorbLagging, CauseMetastoreSlow, CauseEpochSettling} {
		m.stalls.WithLabelValues(cause)
	}
	for _, cause := range []string{CauseAbsorbLagging, CauseMetastoreSlow, CauseEpochSettling, CauseStorageSlow, CauseIngestBurst} {
		m.admitStalls.WithLabelValues(cause)
	}
	for _, c := range []prometheus.Collector{m.putLatency, m.putQuantiles, m.putErrors, m.stalls, m.admitStalls, m.undecidable, m.recoveries, m.recoveryRetry, m.absorbErrors, m.absorbWrites, m.absorbPressured, m.halts, m.indexEvictions} {
		f(c)
	}
	return m
}

// knowBuckets exports the per-bucket PUT error counters at 0 (see the
// stall causes in NewMetrics).
func (m *Metrics) knowBuckets(buckets []string) {
	for _, b := range buckets {
		m.putErrors.WithLabelValues(b)
	}
}

func (m *Metrics) observePut(bucket string, took time.Duration, err error) {
	m.putLatency.WithLabelValues(bucket).Observe(took.Seconds())
	m.putQuantiles.WithLabelValues(bucket).Observe(took.Seconds())
	if err != nil {
		m.putErrors.WithLabelValues(bucket).Inc()
	}
}
