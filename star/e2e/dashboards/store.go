package dashboards

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Store holds scraped series, each sample at its scrape's time.
type Store struct {
	series map[string]*series
	byName map[string][]*series
	// Types is each family's type as exposed (counter, gauge, histogram…).
	Types map[string]string
	// Times are the scrapes' times, in order.
	Times []time.Time
}

type series struct {
	Labels map[string]string // with __name__
	ts     []time.Time
	vs     []float64
}

// NewStore is an empty store.
func NewStore() *Store {
	return &Store{series: map[string]*series{}, byName: map[string][]*series{}, Types: map[string]string{}}
}

// AddScrape parses one /metrics exposition (text format) taken at t:
// histograms become their _bucket (with le), _sum and _count series,
// summaries their quantile, _sum and _count series, as Prometheus stores
// them.
func (st *Store) AddScrape(t time.Time, r io.Reader) error {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return fmt.Errorf("parse /metrics: %w", err)
	}
	if n := len(st.Times); n > 0 && !t.After(st.Times[n-1]) {
		return fmt.Errorf("scrape at %v is not after the last (%v)", t, st.Times[n-1])
	}
	st.Times = append(st.Times, t)
	for name, f := range fams {
		st.Types[name] = f.GetType().String()
		for _, m := range f.GetMetric() {
			base := map[string]string{}
			for _, lp := range m.GetLabel() {
				base[lp.GetName()] = lp.GetValue()
			}
			switch f.GetType() {
			case dto.MetricType_COUNTER:
				st.add(t, name, base, m.GetCounter().GetValue())
			case dto.MetricType_GAUGE:
				st.add(t, name, base, m.GetGauge().GetValue())
			case dto.MetricType_UNTYPED:
				st.add(t, name, base, m.GetUntyped().GetValue())
			case dto.MetricType_HISTOGRAM:
				h := m.GetHistogram()
				inf := false
				for _, b := range h.GetBucket() {
					le := b.GetUpperBound()
					inf = inf || math.IsInf(le, 1)
					st.add(t, name+"_bucket", with(base, "le", formatLe(le)), float64(b.GetCumulativeCount()))
				}
				if !inf {
					st.add(t, name+"_bucket", with(base, "le", "+Inf"), float64(h.GetSampleCount()))
				}
				st.add(t, name+"_sum", base, h.GetSampleSum())
				st.add(t, name+"_count", base, float64(h.GetSampleCount()))
			case dto.MetricType_SUMMARY:
				s := m.GetSummary()
				for _, q := range s.GetQuantile() {
					st.add(t, name, with(base, "quantile", strconv.FormatFloat(q.GetQuantile(), 'g', -1, 64)), q.GetValue())
				}
				st.add(t, name+"_sum", base, s.GetSampleSum())
				st.add(t, name+"_count", base, float64(s.GetSampleCount()))
			}
		}
	}
	return nil
}

func formatLe(le float64) string {
	if math.IsInf(le, 1) {
		return "+Inf"
	}
	return strconv.FormatFloat(le, 'g', -1, 64)
}

func with(ls map[string]string, k, v string) map[string]string {
	out := make(map[string]string, len(ls)+1)
	for a, b := range ls {
		out[a] = b
	}
	out[k] = v
	return out
}

func (st *Store) add(t time.Time, name string, ls map[string]string, v float64) {
	ls = with(ls, "__name__", name)
	k := key(ls)
	s, ok := st.series[k]
	if !ok {
		s = &series{Labels: ls}
		st.series[k] = s
		st.byName[name] = append(st.byName[name], s)
	}
	s.ts = append(s.ts, t)
	s.vs = append(s.vs, v)
}

// Has reports whether a series of the name was scraped.
func (st *Store) Has(name string) bool { return len(st.byName[name]) > 0 }

func (st *Store) match(sel *selector) []*series {
	var out []*series
next:
	for _, s := range st.byName[sel.name] {
		for _, m := range sel.matchers {
			if !m.matches(s.Labels[m.label]) {
				continue next
			}
		}
		out = append(out, s)
	}
	return out
}

// at is the latest sample at or before t, within lb.
func (s *series) at(t time.Time, lb time.Duration) (float64, bool) {
	i := sort.Search(len(s.ts), func(i int) bool { return s.ts[i].After(t) }) - 1
	if i < 0 || t.Sub(s.ts[i]) > lb {
		return 0, false
	}
	return s.vs[i], true
}

// rate is Prometheus's rate of a counter over the samples in (t-w, t]: the
// increase between the first and last (a reset counted as a restart from
// 0), extrapolated towards the window's edges as Prometheus does (to an
// edge within 1.1 average sample intervals, else half an interval; not
// below the counter's zero), over the window; false with fewer than two
// samples.
func (s *series) rate(t time.Time, w time.Duration) (float64, bool) {
	hi := sort.Search(len(s.ts), func(i int) bool { return s.ts[i].After(t) })
	lo := sort.Search(len(s.ts), func(i int) bool { return s.ts[i].After(t.Add(-w)) })
	if hi-lo < 2 {
		return 0, false
	}
	inc := 0.0
	for i := lo + 1; i < hi; i++ {
		if d := s.vs[i] - s.vs[i-1]; d >= 0 {
			inc += d
		} else {
			inc += s.vs[i]
		}
	}
	sampled := s.ts[hi-1].Sub(s.ts[lo]).Seconds()
	avg := sampled / float64(hi-lo-1)
	toStart := s.ts[lo].Sub(t.Add(-w)).Seconds()
	toEnd := t.Sub(s.ts[hi-1]).Seconds()
	if inc > 0 && s.vs[lo] >= 0 {
		if toZero := sampled * s.vs[lo] / inc; toZero < toStart {
			toStart = toZero
		}
	}
	if toStart >= avg*1.1 {
		toStart = avg / 2
	}
	if toEnd >= avg*1.1 {
		toEnd = avg / 2
	}
	return inc * (sampled + toStart + toEnd) / sampled / w.Seconds(), true
}
