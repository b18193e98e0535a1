package node

import (
	"context"
	"errors"
	"fmt"

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
