package settle

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/meta"
)

// Metrics are the auditor's Prometheus instruments (docs/design.md §14),
// shared/reclaim's and shared/settle/plan's included. Gauges are set by
// the plan, which sees every chain; counters by the jobs.
type Metrics struct {
	// settleLag is how long the oldest ripe, unresolved marker has been
	// ripe, per class: the auditor's backlog in time.
	settleLag *prometheus.GaugeVec
	// unsettled sums the bytes of the passes whose markers are unresolved,
	// per class: the transit-resident bytes the express bill is about.
	unsettled *prometheus.GaugeVec
	// trimLag is how long the oldest rewritten-but-untrimmed slot range
	// has waited, per class (at least the read grace once slots wait).
	trimLag     *prometheus.GaugeVec
	erasPlanned *prometheus.CounterVec
	erasSettled *prometheus.CounterVec
	jobErrors   *prometheus.CounterVec
	// jobsSkipped counts jobs not run because another run of the same
	// job held its in-flight claim.
	jobsSkipped *prometheus.CounterVec
	// quarantined counts streams set aside after repeated failed settles;
	// quarantinedNow is how many are (set by PublishQuarantine).
	quarantined    *prometheus.CounterVec
	quarantinedNow prometheus.Gauge
	jobSeconds     *prometheus.HistogramVec
	// settledBytes counts settled-object bytes by how they got there:
	// "copied" server-side (UploadPartCopy) or "staged" (uploaded parts).
	settledBytes *prometheus.CounterVec
	objects      *prometheus.CounterVec
	bundles      *prometheus.CounterVec
	bundleBytes  *prometheus.CounterVec
	markers      *prometheus.CounterVec
	slotsTrimmed *prometheus.CounterVec
	// reclaimed and reclaimedBytes count settled objects deleted, by kind:
	// "superseded" revisions, "trimmed" rows' objects, or "orphaned"
	// revisions of a stale extension (no bytes counted).
	reclaimed      *prometheus.CounterVec
	reclaimedBytes *prometheus.CounterVec
	// rowsReclaimed counts ref rows deleted by kind: "trimmed" (retention
	// and trim points) or "deleted" (deleted streams).
	rowsReclaimed *prometheus.CounterVec
	// chainGarbage counts a decommissioned star's chain garbage deleted by
	// the trim-check, by kind: "epoch" records, "slot" keys (per bucket),
	// "directory" rows.
	chainGarbage *prometheus.CounterVec
	// emptied counts streams deleted under delete_on_empty.
	emptied prometheus.Counter
	// trimsDeferred counts retention passes that kept a trimmable row
	// for the storage bound (reclaim.TrimStream).
	trimsDeferred prometheus.Counter
	// badRows counts rows the plan could not decode and set aside, by
	// kind: "directory", "epoch" or "marker" (the plan logs each).
	badRows *prometheus.CounterVec
}

// nopMetrics records into unregistered instruments.
var nopMetrics = NewMetrics(nil)

// NewMetrics registers the auditor's instruments with reg (nil: none).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	gauge := func(name, help string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "starlog", Subsystem: "settle", Name: name, Help: help}, []string{"class"})
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "settle", Name: name, Help: help}, append([]string{"class"}, labels...))
	}
	m := &Metrics{
		settleLag:   gauge("lag_seconds", "Time the oldest ripe, unresolved batch marker has been ripe."),
		unsettled:   gauge("unsettled_bytes", "Block bytes of absorb passes whose batch markers are unresolved."),
		trimLag:     gauge("trim_lag_seconds", "Time the oldest rewritten but untrimmed slot range has waited."),
		erasPlanned: counter("eras_planned_total", "Settle jobs planned."),
		erasSettled: counter("eras_settled_total", "Settle jobs completed."),
		jobErrors:   counter("job_errors_total", "Jobs that returned an error.", "kind"),
		quarantined: counter("streams_quarantined_total", "Streams quarantined after failing QuarantineAfter consecutive settle jobs."),
		quarantinedNow: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "starlog", Subsystem: "settle", Name: "quarantined_streams",
			Help: "Streams quarantined now (their settle kept failing): see star settle quarantine list."}),
		jobsSkipped:  counter("jobs_skipped_total", "Jobs not run because another run of the same job held its in-flight claim.", "kind"),
		settledBytes: counter("object_bytes_total", "Settled-object bytes written, by how: copied server-side or staged.", "how"),
		objects:      counter("objects_total", "Settled objects committed, by outcome: published or adopted from a concurrent settler.", "outcome"),
		bundles:      counter("bundles_warmed_total", "Transit bundles read into the fetch cache."),
		bundleBytes:  counter("bundle_bytes_total", "Bytes of transit bundles read into the fetch cache."),
		markers:      counter("markers_total", "Batch markers judged, by outcome: resolved or rescheduled.", "outcome"),
		slotsTrimmed: counter("slots_trimmed_total", "Chain slots deleted by the trim-check."),
		reclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "settle", Name: "objects_reclaimed_total",
			Help: "Settled objects deleted by the reclaim pass, by kind."}, []string{"kind"}),
		reclaimedBytes: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "settle", Name: "reclaimed_bytes_total",
			Help: "Bytes of settled objects deleted by the reclaim pass, by kind."}, []string{"kind"}),
		rowsReclaimed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "settle", Name: "rows_reclaimed_total",
			Help: "Stream ref rows deleted by retention, trims and deleted-stream reclamation, by kind."}, []string{"kind"}),
		chainGarbage: counter("chain_garbage_reclaimed_total", "Chain garbage of decommissioned stars deleted by the trim-check, by kind: epoch records, slot keys, directory rows.", "kind"),
		badRows:      counter("plan_bad_rows_total", "Rows Plan could not decode and set aside (quarantined), by kind: directory, epoch or marker.", "kind"),
		emptied: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "settle", Name: "streams_emptied_total",
			Help: "Streams the janitor deleted under delete_on_empty."}),
		trimsDeferred: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "settle", Name: "trims_deferred_total",
			Help: "Stream trims that kept a trimmable row until the reclaim deletes what the stream already has waiting (the storage bound)."}),
		jobSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "starlog", Subsystem: "settle", Name: "job_seconds",
			Help: "Duration of auditor jobs.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}, []string{"class", "kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.settleLag, m.unsettled, m.trimLag, m.erasPlanned, m.erasSettled, m.jobErrors, m.jobsSkipped, m.quarantined, m.quarantinedNow, m.jobSeconds,
			m.settledBytes, m.objects, m.bundles, m.bundleBytes, m.markers, m.slotsTrimmed, m.reclaimed, m.reclaimedBytes, m.rowsReclaimed, m.chainGarbage, m.emptied, m.trimsDeferred, m.badRows)
	}
	return m
}

// CountEmptied counts a stream the janitor deleted under delete_on_empty.
func (st *Stores) CountEmptied() { st.metrics().emptied.Inc() }

// Instruments are the jobs' metrics: Metrics, or instruments registered
// nowhere. The reclamation passes (shared/reclaim) count through the
// methods below.
func (st *Stores) Instruments() *Metrics { return st.metrics() }

// JobDone records a job's duration, and its error if it failed.
func (m *Metrics) JobDone(class meta.Class, kind Kind, took time.Duration, err error) {
	m.jobSeconds.WithLabelValues(string(class), string(kind)).Observe(took.Seconds())
	if err != nil {
		m.jobErrors.WithLabelValues(string(class), string(kind)).Inc()
	}
}

// SlotsTrimmed counts chain slots the trim-check deleted.
func (m *Metrics) SlotsTrimmed(class meta.Class, n uint64) {
	m.slotsTrimmed.WithLabelValues(string(class)).Add(float64(n))
}

// ChainGarbage counts a decommissioned star's chain garbage deleted, by
// kind: "epoch" records, "slot" keys, "directory" rows.
func (m *Metrics) ChainGarbage(class meta.Class, kind string, n int) {
	m.chainGarbage.WithLabelValues(string(class), kind).Add(float64(n))
}

// RowsReclaimed counts ref rows deleted, by kind: "trimmed" or "deleted".
func (m *Metrics) RowsReclaimed(kind string, n int) {
	m.rowsReclaimed.WithLabelValues(kind).Add(float64(n))
}

// ObjectsReclaimed counts settled objects deleted, by kind: "superseded",
// "trimmed", "orphaned" or "deleted".
func (m *Metrics) ObjectsReclaimed(kind string, n int) {
	m.reclaimed.WithLabelValues(kind).Add(float64(n))
}

// BytesReclaimed counts the bytes of settled objects deleted, by kind.
func (m *Metrics) BytesReclaimed(kind string, n uint64) {
	m.reclaimedBytes.WithLabelValues(kind).Add(float64(n))
}

// TrimDeferred counts a stream trim that kept a trimmable row for the
// storage bound.
func (m *Metrics) TrimDeferred() { m.trimsDeferred.Inc() }

// Planned sets the plan's gauges of class: how long the oldest ripe
// marker has been ripe, how long the oldest rewrite not yet trimmed has
// waited, and the bytes of the markers read.
func (m *Metrics) Planned(class meta.Class, lag, trimLag time.Duration, unsettled uint64) {
	l := string(class)
	m.settleLag.WithLabelValues(l).Set(lag.Seconds())
	m.unsettled.WithLabelValues(l).Set(float64(unsettled))
	m.trimLag.WithLabelValues(l).Set(trimLag.Seconds())
}

// EraPlanned counts a settle job the plan made.
func (m *Metrics) EraPlanned(class meta.Class) { m.erasPlanned.WithLabelValues(string(class)).Inc() }

// PlanFailed counts a chain the plan skipped for an error.
func (m *Metrics) PlanFailed(class meta.Class) {
	m.jobErrors.WithLabelValues(string(class), "plan").Inc()
}

// BadRow counts a row the plan set aside, by kind.
func (m *Metrics) BadRow(class meta.Class, kind string) {
	m.badRows.WithLabelValues(string(class), kind).Inc()
}
