package node

import (
	"context"
	"errors"
	"fmt"

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

// sessionStats is an S3 store's count of S3 Express sessions refused and
// replaced (s3store.Store; a test's router of several stores sums them).
type sessionStats interface {
	SessionStats() s3store.SessionStats
}

// registerSessionMetrics exports objs's S3 Express session counts when it
// keeps them: a refused session (InvalidToken, ExpiredToken) fails the
// request it signed, and the store opens a new one for the bucket's next
// request, so a rate of these says the service and the star disagree on
// sessions (a clock skew, a service that forgot them).
func registerSessionMetrics(reg prometheus.Registerer, objs objstore.Store) error {
	ss, ok := objs.(sessionStats)
	if !ok {
		return nil
	}
	for _, m := range []struct {
		name, help string
		pick       func(s3store.SessionStats) uint64
	}{
		{"starlog_s3_express_sessions_refused_total", "S3 Express sessions the service refused (InvalidToken, ExpiredToken); the request they signed failed.", func(s s3store.SessionStats) uint64 { return s.Refused }},
		{"starlog_s3_express_sessions_reopened_total", "S3 Express sessions the star opened (CreateSession) to replace refused ones.", func(s s3store.SessionStats) uint64 { return s.Reopened }},
	} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help}, func() float64 {
			return float64(m.pick(ss.SessionStats()))
		})
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("session metrics: %w", err)
		}
	}
	return nil
}
