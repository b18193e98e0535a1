package api

import (
	"net/url"
	"strconv"
)

// The metrics API (/v1/metrics, /v1/metrics/{basin},
// /v1/metrics/{basin}/{stream}): S2's metric sets and shapes.

// Metric units.
const (
	UnitBytes      = "bytes"
	UnitOperations = "operations"
)

// Timeseries intervals.
const (
	IntervalMinute = "minute"
	IntervalHour   = "hour"
	IntervalDay    = "day"
)

// Metric sets, by level.
const (
	SetActiveBasins     = "active-basins"
	SetAccountOps       = "account-ops"
	SetStorage          = "storage"
	SetAppendOps        = "append-ops"
	SetReadOps          = "read-ops"
	SetReadThroughput   = "read-throughput"
	SetAppendThroughput = "append-throughput"
	SetBasinOps         = "basin-ops"
)

// Metric is one metric of a set: exactly one field is set (S2's
// externally tagged enum).
type Metric struct {
	Scalar       *ScalarMetric       `json:"scalar,omitempty"`
	Accumulation *AccumulationMetric `json:"accumulation,omitempty"`
	Gauge        *GaugeMetric        `json:"gauge,omitempty"`
	Label        *LabelMetric        `json:"label,omitempty"`
}

// ScalarMetric is a single named value.
type ScalarMetric struct {
	Name  string  `json:"name"`
	Unit  string  `json:"unit"`
	Value float64 `json:"value"`
}

// Point is a timeseries point: [unix seconds, value].
type Point [2]float64

// AccumulationMetric sums a quantity over each interval starting at its
// points' timestamps.
type AccumulationMetric struct {
	Name     string  `json:"name"`
	Unit     string  `json:"unit"`
	Interval string  `json:"interval"`
	Values   []Point `json:"values"`
}

// GaugeMetric is a quantity at its points' instants.
type GaugeMetric struct {
	Name   string  `json:"name"`
	Unit   string  `json:"unit"`
	Values []Point `json:"values"`
}

// LabelMetric is a set of labels.
type LabelMetric struct {
	Name   string   `json:"name"`
	Values []string `json:"values"`
}

// MetricSetResponse is the body of every metrics endpoint.
type MetricSetResponse struct {
	Values []Metric `json:"values"`
}

// MetricSetRequest is a metrics query: the set, an optional [start, end)
// window in unix seconds and the interval of timeseries sets.
type MetricSetRequest struct {
	Set        string
	Start, End *uint32
	Interval   string // "" when not given
}

// ParseMetricSetRequest reads a metrics query; sets names the sets the
// level offers. Failures are 400 bad_query, as S2's query rejection.
func ParseMetricSetRequest(q url.Values, sets ...string) (MetricSetRequest, *Error) {
	for k, v := range q {
		if len(v) > 1 {
			return MetricSetRequest{}, BadQuery("%s given %d times", k, len(v))
		}
		switch k {
		case "set", "start", "end", "interval":
		default:
			return MetricSetRequest{}, BadQuery("unknown query parameter %q", truncateQ(k))
		}
	}
	var r MetricSetRequest
	r.Set = q.Get("set")
	ok := false
	for _, s := range sets {
		ok = ok || s == r.Set
	}
	if !ok {
		return MetricSetRequest{}, BadQuery("set must be one of %v, got %q", sets, truncateQ(r.Set))
	}
	for _, f := range []struct {
		name string
		dst  **uint32
	}{{"start", &r.Start}, {"end", &r.End}} {
		v := q.Get(f.name)
		if v == "" {
			continue
		}
		n, err := strconv.ParseUint(v, 10, 32)
		if err != nil {
			return MetricSetRequest{}, BadQuery("%s must be unix seconds (u32), got %q", f.name, truncateQ(v))
		}
		u := uint32(n)
		*f.dst = &u
	}
	if r.Start != nil && r.End != nil && *r.Start > *r.End {
		return MetricSetRequest{}, BadQuery("start (%d) must not be after end (%d)", *r.Start, *r.End)
	}
	switch r.Interval = q.Get("interval"); r.Interval {
	case "", IntervalMinute, IntervalHour, IntervalDay:
	default:
		return MetricSetRequest{}, BadQuery("interval must be minute, hour or day, got %q", truncateQ(r.Interval))
	}
	return r, nil
}

func truncateQ(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}
