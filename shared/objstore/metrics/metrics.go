// Package metrics wraps an objstore.Store to export, per bucket and
// request kind, request counts by result, latency histograms and payload
// bytes through a prometheus.Registerer (docs/design.md §14: PUT latency per
// bucket). It injects nothing; see package faults for that.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/objstore"
)

// Result label values.
const (
	ResultOK         = "ok"
	ResultExists     = "exists"
	ResultNotFound   = "not_found"
	ResultConflict   = "key_conflict"
	ResultIndefinite = "indefinite"
	ResultError      = "error"
)

// Result names the outcome of one request for the result label.
func Result(err error) string {
	switch {
	case err == nil:
		return ResultOK
	case objstore.IsIndefinite(err):
		return ResultIndefinite
	case errors.Is(err, objstore.ErrExists):
		return ResultExists
	case errors.Is(err, objstore.ErrNotFound):
		return ResultNotFound
	case errors.Is(err, objstore.ErrKeyConflict):
		return ResultConflict
	}
	return ResultError
}

type collectors struct {
	requests *prometheus.CounterVec   // bucket, op, result
	duration *prometheus.HistogramVec // bucket, op
	bytes    *prometheus.CounterVec   // bucket, op
}

// Store is the instrumented store.
type Store struct {
	inner objstore.Store
	c     collectors
}

// Wrap instruments inner and registers its collectors with reg.
func Wrap(inner objstore.Store, reg prometheus.Registerer) (*Store, error) {
	c := collectors{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "objstore", Name: "requests_total",
			Help: "Object store requests by bucket, kind and result.",
		}, []string{"bucket", "op", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "starlog", Subsystem: "objstore", Name: "request_duration_seconds",
			Help: "Object store request latency by bucket and kind.",
			// 1 ms to about 16 s: S3 Express first bytes to stalled Standard PUTs.
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"bucket", "op"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "objstore", Name: "bytes_total",
			Help: "Payload bytes moved by bucket and kind (put and part bodies, get results, copy ranges).",
		}, []string{"bucket", "op"}),
	}
	for _, col := range []prometheus.Collector{c.requests, c.duration, c.bytes} {
		if err := reg.Register(col); err != nil {
			return nil, fmt.Errorf("objstore metrics: register: %w", err)
		}
	}
	return &Store{inner: inner, c: c}, nil
}

// Bucket implements objstore.Store.
func (s *Store) Bucket(name string) objstore.Bucket {
	return &bucket{inner: s.inner.Bucket(name), name: name, c: &s.c}
}

type bucket struct {
	inner objstore.Bucket
	name  string
	c     *collectors
}

var _ objstore.Bucket = (*bucket)(nil)

func (b *bucket) Name() string { return b.name }

func (b *bucket) observe(op objstore.Op, start time.Time, n int64, err error) {
	o := op.String()
	b.c.requests.WithLabelValues(b.name, o, Result(err)).Inc()
	b.c.duration.WithLabelValues(b.name, o).Observe(time.Since(start).Seconds())
	if n > 0 {
		b.c.bytes.WithLabelValues(b.name, o).Add(float64(n))
	}
}

func (b *bucket) PutIfAbsent(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	start := time.Now()
	info, err := b.inner.PutIfAbsent(ctx, key, body)
	b.observe(objstore.OpPut, start, int64(len(body)), err)
	return info, err
}

func (b *bucket) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	start := time.Now()
	data, err := b.inner.Get(ctx, key, off, n)
	b.observe(objstore.OpGet, start, int64(len(data)), err)
	return data, err
}

func (b *bucket) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	start := time.Now()
	info, err := b.inner.Head(ctx, key)
	b.observe(objstore.OpHead, start, 0, err)
	return info, err
}

func (b *bucket) Delete(ctx context.Context, key string) error {
	start := time.Now()
	err := b.inner.Delete(ctx, key)
	b.observe(objstore.OpDelete, start, 0, err)
	return err
}

func (b *bucket) DeleteMany(ctx context.Context, keys []string) error {
	start := time.Now()
	err := b.inner.DeleteMany(ctx, keys)
	b.observe(objstore.OpDeleteMany, start, 0, err)
	return err
}

// List observes one request per listing, timed until the caller stops.
func (b *bucket) List(ctx context.Context, prefix string) iter.Seq2[objstore.ObjectInfo, error] {
	return func(yield func(objstore.ObjectInfo, error) bool) {
		start := time.Now()
		var lerr error
		defer func() { b.observe(objstore.OpList, start, 0, lerr) }()
		for info, err := range b.inner.List(ctx, prefix) {
			if err != nil {
				lerr = err
			}
			if !yield(info, err) {
				return
			}
		}
	}
}

func (b *bucket) NewMultipart(ctx context.Context, key string) (objstore.Multipart, error) {
	start := time.Now()
	mp, err := b.inner.NewMultipart(ctx, key)
	b.observe(objstore.OpMultipartCreate, start, 0, err)
	if err != nil {
		return nil, err
	}
	return &multipart{b: b, inner: mp}, nil
}

type multipart struct {
	b     *bucket
	inner objstore.Multipart
}

func (m *multipart) AddCopyPart(ctx context.Context, srcBucket, srcKey string, off, n int64) error {
	start := time.Now()
	err := m.inner.AddCopyPart(ctx, srcBucket, srcKey, off, n)
	m.b.observe(objstore.OpMultipartCopy, start, n, err)
	return err
}

func (m *multipart) AddPart(ctx context.Context, body []byte) error {
	start := time.Now()
	err := m.inner.AddPart(ctx, body)
	m.b.observe(objstore.OpMultipartPart, start, int64(len(body)), err)
	return err
}

func (m *multipart) Complete(ctx context.Context) (objstore.ObjectInfo, error) {
	start := time.Now()
	info, err := m.inner.Complete(ctx)
	m.b.observe(objstore.OpMultipartComplete, start, 0, err)
	return info, err
}

func (m *multipart) Abort(ctx context.Context) error {
	start := time.Now()
	err := m.inner.Abort(ctx)
	m.b.observe(objstore.OpMultipartAbort, start, 0, err)
	return err
}
