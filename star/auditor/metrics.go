package auditor

import "github.com/prometheus/client_golang/prometheus"

// metrics are the runner's own instruments; the jobs' are shared/settle's.
type metrics struct {
	jobs    *prometheus.CounterVec
	seconds *prometheus.HistogramVec
	pending prometheus.Gauge
	ticks   *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		jobs: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "auditor", Name: "jobs_total",
			Help: "In-process auditor job runs by kind and outcome: done, retried (failed, will run again) or dropped (failed its last attempt)."},
			[]string{"kind", "outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: "starlog", Subsystem: "auditor", Name: "job_seconds",
			Help: "Duration of in-process auditor job runs.", Buckets: prometheus.ExponentialBuckets(0.005, 2, 16)}, []string{"kind"}),
		pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "starlog", Subsystem: "auditor", Name: "jobs_pending",
			Help: "Jobs queued, waiting to retry, or running."}),
		ticks: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "starlog", Subsystem: "auditor", Name: "ticks_total",
			Help: "Plan and janitor passes by outcome."}, []string{"outcome"}),
	}
	if reg != nil {
		reg.MustRegister(m.jobs, m.seconds, m.pending, m.ticks)
	}
	return m
}

func (m *metrics) tick(err error) {
	if err != nil {
		m.ticks.WithLabelValues("error").Inc()
		return
	}
	m.ticks.WithLabelValues("ok").Inc()
}
