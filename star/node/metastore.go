package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/dynamo"
	"github.com/starlog/starlog/shared/meta/sqlite"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/fs"
	s3store "github.com/starlog/starlog/shared/objstore/s3"
)

// openMeta opens the metastore c selects.
func openMeta(ctx context.Context, c MetaConfig) (meta.Store, error) {
	switch {
	case c.SQLitePath != "" && c.DynamoTable != "":
		return nil, errors.New("metastore: choose one of a SQLite path and a DynamoDB table")
	case c.SQLitePath != "":
		s, err := sqlite.Open(ctx, c.SQLitePath)
		if err != nil {
			return nil, fmt.Errorf("metastore: %w", err)
		}
		return s, nil
	case c.DynamoTable != "":
		client, err := dynamo.NewClient(ctx, dynamo.Config{
			Endpoint: c.DynamoEndpoint, Region: c.DynamoRegion,
			AccessKey: c.AccessKey, SecretKey: c.SecretKey, APIOptions: c.APIOptions,
		})
		if err != nil {
			return nil, fmt.Errorf("metastore: %w", err)
		}
		if c.DynamoCreateTable {
			if err := dynamo.CreateTable(ctx, client, c.DynamoTable); err != nil {
				return nil, fmt.Errorf("metastore: create table %s: %w", c.DynamoTable, err)
			}
		}
		return dynamo.New(client, c.DynamoTable), nil
	}
	return nil, errors.New("metastore: no SQLite path and no DynamoDB table configured")
}

// openObjects opens the object store c selects. A directory store gets
// every bucket of both sets created (S3 buckets must already exist).
func openObjects(ctx context.Context, c ObjectsConfig, buckets []string) (objstore.Store, error) {
	switch {
	case c.FSRoot != "" && c.S3Region != "":
		return nil, errors.New("object store: choose one of a directory and S3")
	case c.FSRoot != "":
		s, err := fs.New(c.FSRoot)
		if err != nil {
			return nil, fmt.Errorf("object store: %w", err)
		}
		for _, b := range buckets {
			if err := s.CreateBucket(b); err != nil {
				return nil, fmt.Errorf("object store: %w", err)
			}
		}
		return s, nil
	case c.S3Region != "" || c.S3Endpoint != "":
		client, err := s3store.NewClient(ctx, s3store.Config{
			Endpoint: c.S3Endpoint, Region: c.S3Region, PathStyle: c.S3PathStyle,
			AccessKey: c.AccessKey, SecretKey: c.SecretKey, APIOptions: c.APIOptions,
		})
		if err != nil {
			return nil, fmt.Errorf("object store: %w", err)
		}
		return s3store.New(client), nil
	}
	return nil, errors.New("object store: no directory and no S3 region configured")
}

// metaMetrics counts metastore operations by kind and result and times
// them (docs/design.md §14: metastore ops by kind). The cost rule says these grow
// with streams and passes, never with bytes: this is where to check.
//
// TODO(lead): this belongs in a shared/meta/metrics wrapper beside the
// objstore one; it lives here until that package exists.
type metaMetrics struct {
	inner meta.Store
	ops   *prometheus.CounterVec
	dur   *prometheus.HistogramVec
}

func wrapMeta(inner meta.Store, reg prometheus.Registerer) (*metaMetrics, error) {
	m := &metaMetrics{
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

func (m *metaMetrics) observe(op string, start time.Time, err error) {
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

func (m *metaMetrics) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	t := time.Now()
	it, err := m.inner.Get(ctx, pk, sk)
	m.observe("get", t, err)
	return it, err
}

func (m *metaMetrics) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	t := time.Now()
	v, err := m.inner.Put(ctx, pk, sk, val, cond)
	m.observe("put", t, err)
	return v, err
}

func (m *metaMetrics) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	t := time.Now()
	err := m.inner.Delete(ctx, pk, sk, cond)
	m.observe("delete", t, err)
	return err
}

func (m *metaMetrics) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	t := time.Now()
	p, err := m.inner.Query(ctx, q)
	m.observe("query", t, err)
	return p, err
}

func (m *metaMetrics) BatchPut(ctx context.Context, items []meta.Item) error {
	t := time.Now()
	err := m.inner.BatchPut(ctx, items)
	m.observe("batch_put", t, err)
	return err
}

func (m *metaMetrics) BatchDelete(ctx context.Context, keys []meta.Key) error {
	t := time.Now()
	err := m.inner.BatchDelete(ctx, keys)
	m.observe("batch_delete", t, err)
	return err
}

func (m *metaMetrics) Close() error { return m.inner.Close() }
