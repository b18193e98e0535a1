package node

import (
	"time"

	"github.com/starlog/starlog/shared/meta"
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

const streamNamePrefix = meta.StreamNamePrefix

// lifecycle is where a deleted resource stands at time now.
type lifecycle uint8

const (
	alive lifecycle = iota
	deleting
	gone
)

func lifecycleOf(deletedAt *time.Time, pending time.Duration, now time.Time) lifecycle {
	switch {
	case deletedAt == nil:
		return alive
	case now.Sub(*deletedAt) < pending:
		return deleting
	default:
		return gone
	}
}
