package server

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/api"
)

// usage counts what this star served, per basin and for the account, for
// the timeseries sets of S2's metrics API: append and read operations and
// metered bytes, basin and account operations. It is this star's own
// count, kept in memory: a restart forgets it, and in a cluster each star
// answers for the requests it served (docs/api.md says so).
//
// Each series keeps the last 60 minutes by the minute and the last 168
// hours by the hour (days sum hours): 228 buckets, so a basin costs
// 5 series × 228 buckets × 16 bytes ≈ 18 KiB, and at most
// maxUsageBasins basins are kept (the least recently active is dropped).
type usage struct {
	mu      sync.Mutex
	now     func() time.Time
	account series // account-ops
	basins  map[string]*basinUsage

	// The same counts as Prometheus counters, for dashboards: by op
	// (append, read) only, so the labels stay bounded whatever the basins.
	ops   *prometheus.CounterVec
	bytes *prometheus.CounterVec
}

// maxUsageBasins bounds the basins usage tracks.
const maxUsageBasins = 1024

type usageKind uint8

const (
	useAppendOps usageKind = iota
	useAppendBytes
	useReadOps
	useReadBytes
	useBasinOps
	numUsageKinds
)

type basinUsage struct {
	series [numUsageKinds]series
	last   time.Time
}

type bucket struct {
	start int64 // unix seconds, aligned to the ring's step
	v     float64
}

type series struct {
	minutes [60]bucket
	hours   [168]bucket
}

func (s *series) add(t time.Time, v float64) {
	u := t.Unix()
	addTo(s.minutes[:], u, 60, v)
	addTo(s.hours[:], u, 3600, v)
}

func addTo(ring []bucket, u, step int64, v float64) {
	start := u - u%step
	b := &ring[(start/step)%int64(len(ring))]
	if b.start != start {
		*b = bucket{start: start}
	}
	b.v += v
}

// points returns the series by interval over [from, to) unix seconds,
// zero-filled, within what the ring keeps.
func (s *series) points(interval string, from, to int64) []api.Point {
	ring, step := s.minutes[:], int64(60)
	span := int64(1)
	switch interval {
	case api.IntervalHour:
		ring, step = s.hours[:], 3600
	case api.IntervalDay:
		ring, step, span = s.hours[:], 3600, 24
	}
	width := step * span
	out := []api.Point{}
	for t := from - from%width; t < to; t += width {
		var v float64
		for h := t; h < t+width; h += step {
			if b := ring[(h/step)%int64(len(ring))]; b.start == h {
				v += b.v
			}
		}
		out = append(out, api.Point{float64(t), v})
	}
	return out
}

func newUsage(now func() time.Time) *usage {
	u := &usage{now: now, basins: map[string]*basinUsage{}}
	u.ops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Name: "served_operations_total",
		Help: "Acknowledged appends and served reads of S2's API on this star, by op (append, read): the metrics API's append-ops and read-ops.",
	}, []string{"op"})
	u.bytes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Name: "served_metered_bytes_total",
		Help: "Metered bytes of acknowledged appends and served reads of S2's API on this star, by op (append, read): the metrics API's append-throughput and read-throughput.",
	}, []string{"op"})
	for _, op := range []string{"append", "read"} {
		u.ops.WithLabelValues(op)
		u.bytes.WithLabelValues(op)
	}
	return u
}

// collectors are the usage's Prometheus counters, for registration.
func (u *usage) collectors() []prometheus.Collector { return []prometheus.Collector{u.ops, u.bytes} }

// export adds v to the Prometheus counter of kind, if it has one.
func (u *usage) export(k usageKind, v float64) {
	switch k {
	case useAppendOps:
		u.ops.WithLabelValues("append").Add(v)
	case useAppendBytes:
		u.bytes.WithLabelValues("append").Add(v)
	case useReadOps:
		u.ops.WithLabelValues("read").Add(v)
	case useReadBytes:
		u.bytes.WithLabelValues("read").Add(v)
	}
}

// record adds v to a basin's series of kind.
func (u *usage) record(basin string, k usageKind, v float64) {
	u.export(k, v)
	if basin == "" {
		return
	}
	t := u.now()
	u.mu.Lock()
	defer u.mu.Unlock()
	b := u.basins[basin]
	if b == nil {
		if len(u.basins) >= maxUsageBasins {
			var oldest string
			for name, x := range u.basins {
				if oldest == "" || x.last.Before(u.basins[oldest].last) {
					oldest = name
				}
			}
			delete(u.basins, oldest)
		}
		b = &basinUsage{}
		u.basins[basin] = b
	}
	b.last = t
	b.series[k].add(t, v)
}

func (u *usage) recordAccount() {
	t := u.now()
	u.mu.Lock()
	u.account.add(t, 1)
	u.mu.Unlock()
}

// basinPoints is a basin's series of kind (zero-filled when untracked).
func (u *usage) basinPoints(basin string, k usageKind, interval string, from, to int64) []api.Point {
	u.mu.Lock()
	defer u.mu.Unlock()
	if b := u.basins[basin]; b != nil {
		return b.series[k].points(interval, from, to)
	}
	var empty series
	return empty.points(interval, from, to)
}

func (u *usage) accountPoints(interval string, from, to int64) []api.Point {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.account.points(interval, from, to)
}

// usageWindow is a query's [from, to) in unix seconds: the request's
// start and end, defaulting to the interval's kept history (the last
// hour by the minute, day by the hour, week by the day) and clamped to it.
func usageWindow(now time.Time, interval string, start, end *uint32) (int64, int64) {
	keep := int64(3600)
	switch interval {
	case api.IntervalHour:
		keep = 24 * 3600
	case api.IntervalDay:
		keep = 7 * 24 * 3600
	}
	to := now.Unix() + 1
	if end != nil && int64(*end) < to {
		to = int64(*end)
	}
	from := to - keep
	if start != nil && int64(*start) > from {
		from = int64(*start)
	}
	if min := now.Unix() - keep; from < min {
		from = min
	}
	return from, to
}
