package quota

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxLabeledBasins caps the basins the usage metrics name: the first
// this many with a quota, by name; the rest are summed under the basin
// label OtherBasins, so the series stay bounded whatever the tenants do.
const MaxLabeledBasins = 50

// OtherBasins is the basin label of the basins past MaxLabeledBasins.
const OtherBasins = "_other"

var (
	usageDesc = prometheus.NewDesc("starlog_quota_usage",
		"A basin's use of each quota it sets, as this star knows it: stored bytes (the newest reading), append bytes per second (summed over the stars), streams (at the last create's count). Only basins with a quota, at most MaxLabeledBasins by name; the rest summed under basin=\"_other\".",
		[]string{"basin", "dimension"}, nil)
	limitDesc = prometheus.NewDesc("starlog_quota_limit",
		"A basin's quota on each dimension it sets (the same basins as starlog_quota_usage).",
		[]string{"basin", "dimension"}, nil)
)

// collector reports the usage against the quotas at each scrape.
type collector struct{ m *Manager }

func (c collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- usageDesc
	ch <- limitDesc
}

type point struct{ usage, limit float64 }

func (c collector) Collect(ch chan<- prometheus.Metric) {
	m := c.m
	now := m.d.Now()
	type row struct {
		basin string
		dims  map[string]point
	}
	m.mu.Lock()
	rows := make([]row, 0, len(m.basins))
	for b, st := range m.basins {
		dims := map[string]point{}
		if v := st.q.StoredBytes; v != nil {
			dims[DimStoredBytes] = point{float64(st.others.StoredBytes), float64(*v)}
		}
		if v := st.q.AppendBytesPerSec; v != nil {
			dims[DimAppendRate] = point{float64(satAdd(st.others.AppendBytesPerSec, st.win.rate(now))), float64(*v)}
		}
		if v := st.q.Streams; v != nil {
			dims[DimStreams] = point{float64(st.streams), float64(*v)}
		}
		rows = append(rows, row{b, dims})
	}
	m.mu.Unlock()
	slices.SortFunc(rows, func(a, b row) int { return strings.Compare(a.basin, b.basin) })
	other := map[string]point{}
	for i, r := range rows {
		for dim, p := range r.dims {
			if i >= MaxLabeledBasins {
				o := other[dim]
				other[dim] = point{o.usage + p.usage, o.limit + p.limit}
				continue
			}
			ch <- prometheus.MustNewConstMetric(usageDesc, prometheus.GaugeValue, p.usage, r.basin, dim)
			ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, p.limit, r.basin, dim)
		}
	}
	for dim, p := range other {
		ch <- prometheus.MustNewConstMetric(usageDesc, prometheus.GaugeValue, p.usage, OtherBasins, dim)
		ch <- prometheus.MustNewConstMetric(limitDesc, prometheus.GaugeValue, p.limit, OtherBasins, dim)
	}
}
