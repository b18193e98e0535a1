// Package metrics wraps a meta.Store to count its operations by kind and
// result and time them through a prometheus.Registerer (docs/design.md
// §14: metastore ops by kind), beside the object store's wrapper
// (shared/objstore/metrics). The cost rule says these grow with streams
// and passes, never with bytes: this is where to check.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/meta"
)

// store counts the operations of the store it wraps.
type store struct {
	inner meta.Store
	ops   *prometheus.CounterVec
	dur   *prometheus.HistogramVec
}

// Wrap returns inner with its operations counted and timed in reg.
func Wrap(inner meta.Store, reg prometheus.Registerer) (meta.Store, error) {
	m := &store{
		inner: inner,
		ops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "meta", Name: "requests_total",
			Help: "Metastore operations by kind and result.",
		}, []string{"op", "result"}),
		dur: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "starlog", Subsystem: "meta", Name: "request_duration_seconds",
			Help:    "Metastore operation latency by kind.",
			Buckets: prometheus.ExponentialBuckets(0.0002, 2, 16), // 0.2 ms … 6.5 s
		}, []string{"op"}),
	}
	for _, c := range []prometheus.Collector{m.ops, m.dur} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("metastore metrics: register: %w", err)
		}
	}
	return m, nil
}

func (m *store) observe(op string, start time.Time, err error) {
	res := "ok"
	switch {
	case err == nil:
	case errors.Is(err, meta.ErrNotFound):
		res = "not_found"
	case errors.Is(err, meta.ErrConditionFailed):
		res = "condition_failed"
	default:
		res = "error"
	}
	m.ops.WithLabelValues(op, res).Inc()
	m.dur.WithLabelValues(op).Observe(time.Since(start).Seconds())
}

func (m *store) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	t := time.Now()
	it, err := m.inner.Get(ctx, pk, sk)
	m.observe("get", t, err)
	return it, err
}

func (m *store) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	t := time.Now()
	v, err := m.inner.Put(ctx, pk, sk, val, cond)
	m.observe("put", t, err)
	return v, err
}

func (m *store) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	t := time.Now()
	err := m.inner.Delete(ctx, pk, sk, cond)
	m.observe("delete", t, err)
	return err
}

func (m *store) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	t := time.Now()
	p, err := m.inner.Query(ctx, q)
	m.observe("query", t, err)
	return p, err
}

func (m *store) BatchPut(ctx context.Context, items []meta.Item) error {
	t := time.Now()
	err := m.inner.BatchPut(ctx, items)
	m.observe("batch_put", t, err)
	return err
}

func (m *store) BatchDelete(ctx context.Context, keys []meta.Key) error {
	t := time.Now()
	err := m.inner.BatchDelete(ctx, keys)
	m.observe("batch_delete", t, err)
	return err
}

func (m *store) Close() error { return m.inner.Close() }
