package metrics_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/objstore/metrics"
	"github.com/starlog/starlog/shared/objstore/objstoretest"
)

func TestConformanceTransparent(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) (objstore.Store, []string) {
		inner, err := mem.New("bucket-a", "bucket-b")
		if err != nil {
			t.Fatal(err)
		}
		s, err := metrics.Wrap(inner, prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		return s, []string{"bucket-a", "bucket-b"}
	})
}

// find returns the metric of family name whose labels include want.
func find(t *testing.T, reg *prometheus.Registry, name string, want map[string]string) *dto.Metric {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for k, v := range want {
				found := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == k && lp.GetValue() == v {
						found = true
					}
				}
				if !found {
					continue next
				}
			}
			return m
		}
	}
	return nil
}

func TestCountsByResult(t *testing.T) {
	ctx := context.Background()
	inner, err := mem.New("bucket-a")
	if err != nil {
		t.Fatal(err)
	}
	fs := faults.Wrap(inner, faults.WithSeed(1))
	reg := prometheus.NewRegistry()
	s, err := metrics.Wrap(fs, reg)
	if err != nil {
		t.Fatal(err)
	}
	b := s.Bucket("bucket-a")
	if _, err := b.PutIfAbsent(ctx, "k", make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutIfAbsent(ctx, "k", make([]byte, 10)); !errors.Is(err, objstore.ErrExists) {
		t.Fatal(err)
	}
	fs.FailNext("bucket-a", 1, faults.NotDone)
	if _, err := b.PutIfAbsent(ctx, "k2", make([]byte, 10)); !objstore.IsIndefinite(err) {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "missing", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "k", 0, 4); err != nil {
		t.Fatal(err)
	}

	for _, c := range []struct {
		op, result string
		want       float64
	}{
		{"put", metrics.ResultOK, 1},
		{"put", metrics.ResultExists, 1},
		{"put", metrics.ResultIndefinite, 1},
		{"get", metrics.ResultNotFound, 1},
		{"get", metrics.ResultOK, 1},
	} {
		m := find(t, reg, "starlog_objstore_requests_total", map[string]string{"bucket": "bucket-a", "op": c.op, "result": c.result})
		if m == nil || m.GetCounter().GetValue() != c.want {
			t.Errorf("requests{op=%s,result=%s} = %v, want %v", c.op, c.result, m, c.want)
		}
	}
	h := find(t, reg, "starlog_objstore_request_duration_seconds", map[string]string{"bucket": "bucket-a", "op": "put"})
	if h == nil || h.GetHistogram().GetSampleCount() != 3 {
		t.Errorf("put latency histogram = %v, want 3 samples", h)
	}
	by := find(t, reg, "starlog_objstore_bytes_total", map[string]string{"bucket": "bucket-a", "op": "put"})
	if by == nil || by.GetCounter().GetValue() != 30 {
		t.Errorf("put bytes = %v, want 30 (every attempt's body)", by)
	}
	if g := find(t, reg, "starlog_objstore_bytes_total", map[string]string{"op": "get"}); g == nil || g.GetCounter().GetValue() != 4 {
		t.Errorf("get bytes = %v, want 4", g)
	}
	if _, err := metrics.Wrap(inner, reg); err == nil {
		t.Fatal("registering twice on one registry succeeded")
	}
}
