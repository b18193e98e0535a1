package catalog

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
)

// Basins and streams live in the metastore (docs/design.md §5): basin#<b>/cfg and
// basin#<b>/s#<name>, plus the basin directory and stream tombstones of
// rows.go. This star caches what it read or wrote; with one star that is
// coherent. (Multi-star leases will make the stream row's version part of
// the lease check.)
//
// Deletion: DELETE stamps deleted_at. For Config.DeletionPending after
// that, the resource lists with deleted_at and every call on it answers 409
// *_deletion_pending (a create of the name too, as S2 answers); afterwards
// it answers 404, is no longer listed, and its name can be created again
// (a new id).

// BasinEntry is an immutable snapshot of a basin's config row; writes
// replace it.
type BasinEntry struct {
	Row meta.BasinRow
	Ver int64
	// ReadAt is when the row was read or written (Deps.Now): the entry is
	// trusted for Config.BasinCacheTTL from then.
	ReadAt time.Time
}

// StreamKey names a stream: its basin and its name.
type StreamKey struct{ Basin, Name string }

// StreamEntry is an immutable snapshot of a stream row; writes replace it.
type StreamEntry struct {
	Key StreamKey
	Row meta.StreamRow
	Ver int64
}

// NewID draws a random 128-bit id in hex.
func NewID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic("catalog: crypto/rand: " + err.Error())
	}
	return hex.EncodeToString(b[:])
}

// createKey is what a create's idempotency keys on: its request token and
// the config it asked for (S2's creation idempotency key). Empty without a
// token: such a create is never a retry.
func createKey(token string, cfg any) string {
	if token == "" {
		return ""
	}
	h := sha256.New()
	h.Write([]byte(token))
	h.Write([]byte{0})
	h.Write(meta.Encode(cfg))
	return hex.EncodeToString(h.Sum(nil))
}

// sameCreate reports whether a create with key (token) repeats the one
// that made a row holding rowKey and rowToken. A row from before create
// keys has only the token to go by.
func sameCreate(key, token, rowKey, rowToken string) bool {
	if key == "" {
		return false
	}
	if rowKey != "" {
		return rowKey == key
	}
	return rowToken == token
}

func (c *Catalog) storageErr(what string, err error) error { return StorageErr(c.log, what, err) }

// StorageErr wraps a metastore failure as the API's 500 storage; the
// detail goes to log, not to the client.
func StorageErr(log *slog.Logger, what string, err error) error {
	if ctxErr := ContextError(err); ctxErr != nil {
		return ctxErr
	}
	log.Error("metastore failure", "op", what, "err", err)
	return api.Storage("metastore: %s failed", what)
}

// ContextError maps a cancelled or timed-out context to an API error (the
// client is usually gone; if not, it may retry).
func ContextError(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return api.Unavailable("request cancelled")
	case errors.Is(err, context.DeadlineExceeded):
		return api.Unavailable("request timed out")
	}
	return nil
}

// scanRows lists the rows of partition pk whose sort key is skPrefix+name
// (skEnd bounds the sort keys from above), in name order, from the list
// request's prefix and start_after. keep decodes a row and says whether it
// is listed. It returns at most req.Limit rows, and whether another would
// have been listed.
func scanRows[T any](ctx context.Context, c *Catalog, pk, skPrefix, skEnd string, req api.ListRequest, keep func(name string, it meta.Item) (T, bool, error)) ([]T, bool, error) {
	from := req.Prefix
	if req.StartAfter != "" && req.StartAfter >= from {
		from = req.StartAfter
	}
	q := meta.Query{PK: pk, From: skPrefix + from, To: skEnd, Limit: min(req.Limit+1, 1000)}
	var out []T
	for {
		pg, err := c.meta.Query(ctx, q)
		if err != nil {
			return nil, false, c.storageErr("list", err)
		}
		for _, it := range pg.Items {
			name, ok := strings.CutPrefix(it.SK, skPrefix)
			if !ok || req.StartAfter != "" && name <= req.StartAfter {
				continue
			}
			if !strings.HasPrefix(name, req.Prefix) {
				return out, false, nil // past the prefix: rows come in name order
			}
			v, ok, err := keep(name, it)
			if err != nil {
				return nil, false, c.storageErr("list", err)
			}
			if !ok {
				continue
			}
			if len(out) == req.Limit {
				return out, true, nil
			}
			out = append(out, v)
		}
		if pg.Next == "" {
			return out, false, nil
		}
		q.PageToken = pg.Next
	}
}
