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
	ops   *prometheus.CounterVec // nil: writes only (WrapWrites)
	dur   *prometheus.HistogramVec
	// writes counts write items (a batch's each) by writer and row kind:
	// what DynamoDB bills, whatever the result. def is the writer a
	// context without meta.WithWriter names.
	writes *prometheus.CounterVec
	def    string
}

// Wrap returns inner with its operations counted and timed in reg, and its
// writes counted by writer (meta.WriterStar unless the context names one)
// and row kind.
func Wrap(inner meta.Store, reg prometheus.Registerer) (meta.Store, error) {
	w, err := writesCounter(reg)
	if err != nil {
		return nil, err
	}
	m := &store{
		inner: inner, writes: w, def: meta.WriterStar,
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

// WrapWrites returns inner with only its writes counted, by writer (def
// unless the context names one) and row kind, in the counter Wrap
// registers in reg (shared: `star dev`'s auditor writes through its own
// handle to the star's metastore, beside the star's wrapper).
func WrapWrites(inner meta.Store, reg prometheus.Registerer, def string) (meta.Store, error) {
	w, err := writesCounter(reg)
	if err != nil {
		return nil, err
	}
	return &store{inner: inner, writes: w, def: def}, nil
}

// writesCounter registers the writes counter in reg, or finds the one
// registered there already.
func writesCounter(reg prometheus.Registerer) (*prometheus.CounterVec, error) {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "meta", Name: "writes_total",
		Help: "Metastore write items (each of a batch; every result, as DynamoDB bills them) by writer (the star, or the auditor's pass or job) and row kind.",
	}, []string{"writer", "row"})
	err := reg.Register(c)
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if prev, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
			return prev, nil
		}
	}
	if err != nil {
		return nil, fmt.Errorf("metastore metrics: register: %w", err)
	}
	return c, nil
}

// wrote counts one write item of ctx's writer on pk/sk.
func (m *store) wrote(ctx context.Context, pk, sk string) {
	m.writes.WithLabelValues(meta.Writer(ctx, m.def), meta.RowKind(pk, sk)).Inc()
}

func (m *store) observe(op string, start time.Time, err error) {
	if m.ops == nil {
		return
	}
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
	m.wrote(ctx, pk, sk)
	return v, err
}

func (m *store) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	t := time.Now()
	err := m.inner.Delete(ctx, pk, sk, cond)
	m.observe("delete", t, err)
	m.wrote(ctx, pk, sk)
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
	for _, it := range items {
		m.wrote(ctx, it.PK, it.SK)
	}
	return err
}

func (m *store) BatchDelete(ctx context.Context, keys []meta.Key) error {
	t := time.Now()
	err := m.inner.BatchDelete(ctx, keys)
	m.observe("batch_delete", t, err)
	for _, k := range keys {
		m.wrote(ctx, k.PK, k.SK)
	}
	return err
}

func (m *store) Close() error { return m.inner.Close() }
