package meta

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// The basin's rows (docs/design.md §5): its config row basin#<b>/cfg
// (BasinKey), the authority, and its directory row basins/<b>, which a
// listing reads. The stars write them (star/catalog); the auditor reads
// them leniently (shared/auditjob).

// BasinDirPK is the partition of the basin directory: one row per basin
// (sk = name), so listing basins is one range query, like the chain
// directory.
const BasinDirPK = "basins"

// BasinDirKey is a basin's directory row.
func BasinDirKey(basin string) Key { return Key{PK: BasinDirPK, SK: basin} }

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
	// requested (the catalog's createKey), as S2 does: the same token with
	// another config is a different request, answered 409.
	CreateKey string `json:"create_key,omitempty"`
}

// DecodeBasinRow decodes a basin config row strictly enough that a
// corrupt row is an error, never a zero value silently used: a row
// without an id is an error. The stars decode this way.
func DecodeBasinRow(it Item) (BasinRow, error) {
	r, err := DecodeBasinRowLenient(it)
	if err == nil && r.ID == "" {
		err = fmt.Errorf("row %s/%s: basin row without id", it.PK, it.SK)
	}
	return r, err
}

// DecodeBasinRowLenient decodes a basin config row as the auditor reads
// it: unknown fields are ignored (as by every decoder here) and a row
// without an id is no error (its ID is empty: a basin being created has
// none yet, and the caller skips it).
func DecodeBasinRowLenient(it Item) (BasinRow, error) {
	return decodeRow[BasinRow](it)
}

// BasinDirRow is the value of a basin's directory row: what a listing
// shows. It is written after the config row, which stays the authority.
type BasinDirRow struct {
	ID        string     `json:"id"`
	CreatedAt time.Time  `json:"created_at"`
	DeletedAt *time.Time `json:"deleted_at,omitempty"`
}

// DecodeBasinDirRow decodes a basin directory row.
func DecodeBasinDirRow(it Item) (BasinDirRow, error) {
	return decodeRow[BasinDirRow](it)
}

// decodeRow decodes a row value, naming the row in the error.
func decodeRow[T any](it Item) (T, error) {
	var v T
	if err := json.Unmarshal(it.Val, &v); err != nil {
		return v, fmt.Errorf("row %s/%s: decode %T: %w", it.PK, it.SK, v, err)
	}
	return v, nil
}
