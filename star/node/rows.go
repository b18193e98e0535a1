package node

import (
	"context"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/catalog"
)

// The catalog's rows are defined once, in shared/meta (basinrow.go,
// streamrow.go, tombstone.go), for the stars and the auditor alike; these
// names stay for the callers that know them from here.

// BasinDirPK is meta.BasinDirPK.
const BasinDirPK = meta.BasinDirPK

// BasinDirKey is meta.BasinDirKey.
func BasinDirKey(basin string) meta.Key { return meta.BasinDirKey(basin) }

// StreamTombstoneKey is meta.StreamTombstoneKey.
func StreamTombstoneKey(streamID string) meta.Key { return meta.StreamTombstoneKey(streamID) }

// The row types (see shared/meta).
type (
	BasinRow    = meta.BasinRow
	BasinDirRow = meta.BasinDirRow
	StreamRow   = meta.StreamRow
	Tombstone   = meta.Tombstone
)

// DefaultBasinCacheTTL is catalog.DefaultBasinCacheTTL.
const DefaultBasinCacheTTL = catalog.DefaultBasinCacheTTL

// ReplaceDeleting is catalog.ReplaceDeleting: a stream created through ctx
// replaces one of its name whose deletion is pending (star/durable).
func ReplaceDeleting(ctx context.Context) context.Context { return catalog.ReplaceDeleting(ctx) }

// storageErr wraps a metastore failure as the API's 500 storage
// (catalog.StorageErr).
func (n *Node) storageErr(what string, err error) error { return catalog.StorageErr(n.log, what, err) }
