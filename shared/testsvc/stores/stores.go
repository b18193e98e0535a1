// Package stores opens the production adapters (objstore/s3, meta/dynamo)
// against the real protocol servers testsvc starts, for tests that run the
// write path on the same code a production star runs.
package stores

import (
	"context"
	"testing"

	"github.com/starlog/starlog/shared/meta/dynamo"
	"github.com/starlog/starlog/shared/objstore/s3"
	"github.com/starlog/starlog/shared/testsvc"
)

// S3 starts versitygw with the given buckets and returns the s3 backend
// talking to it.
func S3(tb testing.TB, buckets ...string) *s3.Store {
	tb.Helper()
	v := testsvc.StartVersity(tb, buckets...)
	c, err := s3.NewClient(context.Background(), s3.Config{Endpoint: v.Endpoint, Region: v.Region, AccessKey: v.AccessKey, SecretKey: v.SecretKey, PathStyle: true})
	if err != nil {
		tb.Fatalf("stores: s3 client: %v", err)
	}
	return s3.New(c)
}

// S3Express starts versitygw with the given buckets and the S3 Express
// stand-in in front of it (testsvc.StartExpress), and returns the s3
// backend configured as a star configures it for AWS (session auth,
// virtual-hosted addressing), talking to the front with the ReadWrite
// principal's keys. Directory bucket names ("<base>--<zone id>--x-s3") get
// S3 Express treatment; other names pass through as general-purpose
// buckets.
func S3Express(tb testing.TB, buckets ...string) (*s3.Store, testsvc.ExpressServer) {
	tb.Helper()
	e := testsvc.StartExpress(tb, testsvc.StartVersity(tb, buckets...))
	return S3ExpressClient(tb, e, e.AccessKey, e.SecretKey), e
}

// S3ExpressClient is the s3 backend talking to the front e with the keys
// ak/sk (e.ReadOnlyAccessKey for the settle role's ReadOnly sessions).
func S3ExpressClient(tb testing.TB, e testsvc.ExpressServer, ak, sk string) *s3.Store {
	tb.Helper()
	c, err := s3.NewClient(context.Background(), s3.Config{Endpoint: e.Endpoint, Region: e.Region, AccessKey: ak, SecretKey: sk, HTTPClient: e.HTTPClient})
	if err != nil {
		tb.Fatalf("stores: s3 express client: %v", err)
	}
	return s3.New(c)
}

// Dynamo returns the dynamo backend on a fresh table of the DynamoDB Local
// server shared by the test package (started on first use; call
// shared.Stop in TestMain).
func Dynamo(tb testing.TB, shared *testsvc.SharedDynamo) *dynamo.Store {
	tb.Helper()
	srv := shared.Get(tb)
	c := testsvc.DynamoClient(srv.Endpoint)
	table := srv.TableName(tb)
	if err := dynamo.CreateTable(context.Background(), c, table); err != nil {
		tb.Fatalf("stores: create table %s: %v", table, err)
	}
	return dynamo.New(c, table)
}

// S3NoListBucket is S3 against versitygw behind testsvc.NoListBucket: the
// store as a caller without s3:ListBucket sees it (a missing key is 403).
func S3NoListBucket(tb testing.TB, buckets ...string) *s3.Store {
	tb.Helper()
	v := testsvc.StartVersity(tb, buckets...)
	c, err := s3.NewClient(context.Background(), s3.Config{Endpoint: testsvc.NoListBucket(tb, v.Endpoint), Region: v.Region, AccessKey: v.AccessKey, SecretKey: v.SecretKey, PathStyle: true})
	if err != nil {
		tb.Fatalf("stores: s3 client: %v", err)
	}
	return s3.New(c)
}
