package kafka

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// The metrics of group requests forwarded to their coordinator
// (groupforward.go, docs/kafka.md "Many stars"). Labels are bounded: api
// is one of the forwardable group requests' names, outcome and result
// the constants below.

// Outcomes of one forwarded request (all its attempts).
const (
	forwardAnswered = "answered" // a coordinator's answer went to the client
	forwardHere     = "here"     // the group came to this star, or its leader could not be told: answered here
	forwardExpired  = "expired"  // the request's deadline came first: NOT_COORDINATOR from this star
	forwardCanceled = "canceled" // the face closed: answered here
)

// Results of one attempt.
const (
	attemptAnswered = "answered" // the coordinator answered
	attemptMoving   = "moving"   // it answered that the group is moving: retried
	attemptError    = "error"    // no answer in time, unreachable, or refused: retried
)

type forwardMetrics struct {
	forwards *prometheus.CounterVec
	attempts *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	inFlight prometheus.Gauge
}

func newForwardMetrics() *forwardMetrics {
	return &forwardMetrics{
		forwards: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "kafka", Name: "group_forwards_total",
			Help: "Group requests this star sent on to their coordinator, by API and outcome (answered; here: the group came here meanwhile; expired: the request's deadline came first, answered NOT_COORDINATOR; canceled: the face closed).",
		}, []string{"api", "outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "kafka", Name: "group_forward_attempts_total",
			Help: "Attempts of forwarded group requests, by API and result (answered; moving: NOT_COORDINATOR or COORDINATOR_LOAD_IN_PROGRESS, retried; error: no answer in time, unreachable or refused, retried).",
		}, []string{"api", "result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "starlog", Subsystem: "kafka", Name: "group_forward_seconds",
			Help: "Time from a group request's first forward to its answer, by API and outcome (a JoinGroup waits out the rebalance at the coordinator).",
			// 1 ms … about 2 min: a JoinGroup is held for its rebalance.
			Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
		}, []string{"api", "outcome"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "starlog", Subsystem: "kafka", Name: "group_forwards_in_flight",
			Help: "Group requests being forwarded to their coordinator now.",
		}),
	}
}

func (m *forwardMetrics) collectors() []prometheus.Collector {
	return []prometheus.Collector{m.forwards, m.attempts, m.seconds, m.inFlight}
}

// start counts a forward of api beginning; the func it returns ends it
// with its outcome.
func (m *forwardMetrics) start(api string) func(outcome string) {
	m.inFlight.Inc()
	began := time.Now()
	return func(outcome string) {
		m.inFlight.Dec()
		m.forwards.WithLabelValues(api, outcome).Inc()
		m.seconds.WithLabelValues(api, outcome).Observe(time.Since(began).Seconds())
	}
}
