package node

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
)

// Rows this package adds to docs/design.md §5's schema. The basin config row and
// the stream name row use meta.BasinKey and meta.StreamNameKey; their
// values are defined here.
//
// TODO(lead): move these key builders and value types into
// shared/meta/rows.go when the janitor needs them.

// BasinDirPK is the partition of the basin directory: one row per basin
// (sk = name), so listing basins is one range query, like the chain
// directory.
const BasinDirPK = "basins"

// BasinDirKey is a basin's directory row.
func BasinDirKey(basin string) meta.Key { return meta.Key{PK: BasinDirPK, SK: basin} }

// StreamTombstoneKey marks a deleted stream id, so the janitor and the
// settle job (settle.MetaStreams) can tell a deleted stream's records from
// a live one's. Every stream id also has its identity row,
// meta.StreamMetaKey, written before the name row that makes it usable.
func StreamTombstoneKey(streamID string) meta.Key {
	return meta.Key{PK: "stream#" + streamID, SK: "deleted"}
}

// streamNamePrefix is the sort-key prefix of stream name rows.
const streamNamePrefix = "s#"

// BasinRow is the value of basin#<b>/cfg.
type BasinRow struct {
	// ID distinguishes incarnations of one basin name: a stream row
	// belongs to the basin only if it carries the same ID, so a basin
	// deleted and created again starts empty without visiting its streams.
	ID        string          `json:"id"`
	Config    api.BasinConfig `json:"config"`
	CreatedAt time.Time       `json:"created_at"`
	DeletedAt *time.Time      `json:"deleted_at,omitempty"`
	// RequestToken is the s2-request-token of the create, so a retried
	// create is answered as the first was instead of 409. Rows written
	// before CreateKey existed have only this.
	RequestToken string `json:"request_token,omitempty"`
	// CreateKey keys the create's idempotency on the token and the config
	// requested (createKey), as S2 does: the same token with another
	// config is a different request, answered 409.
	CreateKey string `json:"create_key,omitempty"`
}

// BasinDirRow is the value of a basin's directory row: what a listing shows.
// It is written after the config row, which stays the authority.
type BasinDirRow struct {
	ID        string     `json:"id"`
	CreatedAt time.Time  `json:"created_at"`
	DeletedAt *time.Time `json:"deleted_at,omitempty"`
}

// StreamRow is the value of basin#<b>/s#<name>.
type StreamRow struct {
	// ID is the stream id: random, minted at creation; keys and rows use
	// it, never the name.
	ID      string `json:"id"`
	BasinID string `json:"basin_id"`
	// Config is the stream's whole config: since S2 fidelity (issue 16) a
	// create or reconfiguration stores it resolved over the basin's
	// default stream config and the built-in defaults, every field set, so
	// a later change of the basin default leaves the stream as it is. (A
	// row written before has unset fields, which still fall back to the
	// basin default at use.)
	Config    api.StreamConfig `json:"config"`
	CreatedAt time.Time        `json:"created_at"`
	DeletedAt *time.Time       `json:"deleted_at,omitempty"`
	// RequestToken and CreateKey: see BasinRow.
	RequestToken string `json:"request_token,omitempty"`
	CreateKey    string `json:"create_key,omitempty"`
	// Cipher is the stream's cipher, the basin's stream_cipher at its
	// creation ("" for none); never the key, which each request brings.
	Cipher string `json:"cipher,omitempty"`
}

// Tombstone is the value of stream#<id>/deleted (settle.MetaStreams reads
// its basin).
type Tombstone struct {
	Basin     string    `json:"basin"`
	Name      string    `json:"name"`
	DeletedAt time.Time `json:"deleted_at"`
}

// decodeRow decodes a row value strictly enough that a corrupt row is an
// error, never a zero value silently used.
func decodeRow[T any](it meta.Item) (T, error) {
	var v T
	if err := json.Unmarshal(it.Val, &v); err != nil {
		return v, fmt.Errorf("row %s/%s: decode %T: %w", it.PK, it.SK, v, err)
	}
	return v, nil
}

func decodeBasinRow(it meta.Item) (BasinRow, error) {
	r, err := decodeRow[BasinRow](it)
	if err == nil && r.ID == "" {
		err = fmt.Errorf("row %s/%s: basin row without id", it.PK, it.SK)
	}
	return r, err
}

func decodeStreamRow(it meta.Item) (StreamRow, error) {
	r, err := decodeRow[StreamRow](it)
	if err == nil && (r.ID == "" || r.BasinID == "") {
		err = fmt.Errorf("row %s/%s: stream row without id or basin id", it.PK, it.SK)
	}
	return r, err
}

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
