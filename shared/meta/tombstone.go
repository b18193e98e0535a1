package meta

import "time"

// StreamTombstoneKey marks a deleted stream id, so the janitor and the
// settle job (settle.MetaStreams) can tell a deleted stream's records from
// a live one's. Every stream id also has its identity row, StreamMetaKey,
// written before the name row that makes it usable.
func StreamTombstoneKey(streamID string) Key {
	return Key{PK: "stream#" + streamID, SK: "deleted"}
}

// Tombstone is the value of stream#<id>/deleted (settle.MetaStreams reads
// its basin).
type Tombstone struct {
	Basin     string    `json:"basin"`
	Name      string    `json:"name"`
	DeletedAt time.Time `json:"deleted_at"`
}

// DecodeTombstone decodes a stream tombstone.
func DecodeTombstone(it Item) (Tombstone, error) {
	return decodeRow[Tombstone](it)
}
