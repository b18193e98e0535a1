package meta

import (
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// StreamNamePrefix is the sort-key prefix of a basin's stream name rows
// (StreamNameKey); "s$" sorts right after every "s#…" key and is never a
// key itself, so it bounds a scan of them.
const StreamNamePrefix = "s#"

// StreamNameEnd bounds a scan of a basin's stream name rows from above.
const StreamNameEnd = "s$"

// StreamRow is the value of basin#<b>/s#<name> (StreamNameKey).
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

// DecodeStreamRow decodes a stream name row strictly: a row without an
// id or a basin id is an error. The stars decode this way.
func DecodeStreamRow(it Item) (StreamRow, error) {
	r, err := DecodeStreamRowLenient(it)
	if err == nil && (r.ID == "" || r.BasinID == "") {
		err = fmt.Errorf("row %s/%s: stream row without id or basin id", it.PK, it.SK)
	}
	return r, err
}

// DecodeStreamRowLenient decodes a stream name row as the auditor reads
// it: a row without an id is no error (the caller skips it).
func DecodeStreamRowLenient(it Item) (StreamRow, error) {
	return decodeRow[StreamRow](it)
}
