package durable

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// rowKey is the metastore row of the Durable Streams stream name in basin:
// its own partition, beside starlog's rows (shared/meta/rows.go).
func rowKey(basin, name string) meta.Key { return meta.Key{PK: "ds#" + basin, SK: "s#" + name} }

// streamRow is a Durable Streams stream's static config. Closure and
// producer state are in the records, never here: they must change
// atomically with appends.
type streamRow struct {
	// Incarnation tells a re-created stream from the one it replaces
	// (ETags, the state cache).
	Incarnation string `json:"incarnation"`
	ContentType string `json:"content_type"`
	// TTLSecs is the sliding window (0 with HasTTL false: none).
	TTLSecs uint64 `json:"ttl_secs,omitempty"`
	HasTTL  bool   `json:"has_ttl,omitempty"`
	// ExpiresAt is the absolute expiry as the client sent it (RFC 3339).
	ExpiresAt string `json:"expires_at,omitempty"`
	// RetentionSecs is the retention age its PUT asked for
	// (Stream-Retention-Seconds; 0: none, the basin's default applies),
	// set as the starlog stream's retention_policy.age.
	RetentionSecs uint64 `json:"retention_secs,omitempty"`
	// ClosedAt is the closed stream's final offset (its closing marker's
	// seq + 1; 0: not closed, or not recorded yet), copied from the
	// records once a close is acknowledged or folded (recordClose): the
	// marker is a record, which retention may remove.
	ClosedAt uint64    `json:"closed_at,omitempty"`
	Created  time.Time `json:"created"`
	// Fork origin: the source's name, the divergence seq and sub-offset
	// as requested (idempotent PUTs compare them).
	ForkedFrom   string `json:"forked_from,omitempty"`
	ForkOffset   uint64 `json:"fork_offset,omitempty"`
	ForkSub      uint64 `json:"fork_sub,omitempty"`
	ForkOffsetIn string `json:"fork_offset_in,omitempty"`
	// Forks names the live forks of this stream; SoftDeleted is a DELETE
	// while it has some (410 until the last fork goes).
	Forks       []string `json:"forks,omitempty"`
	SoftDeleted bool     `json:"soft_deleted,omitempty"`
}

func (r *streamRow) expiresAt() (time.Time, bool) {
	if r.ExpiresAt == "" {
		return time.Time{}, false
	}
	t, err := time.Parse(time.RFC3339Nano, r.ExpiresAt)
	return t, err == nil
}

var errNoRow = errors.New("durable: no such stream")

func (h *Handler) getRow(ctx context.Context, name string) (streamRow, int64, error) {
	k := rowKey(h.basin, name)
	it, err := h.meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		h.rows.Delete(name)
		return streamRow{}, 0, errNoRow
	}
	if err != nil {
		// A metastore outage: serve the row this star last read, as the
		// S2 path keeps acknowledging appends through one (its records
		// need no metastore write). A change made meanwhile elsewhere (a
		// delete) is seen when the metastore answers again.
		if c, ok := h.rows.Load(name); ok {
			cr := c.(cachedRow)
			return cr.row, cr.ver, nil
		}
		return streamRow{}, 0, &metaError{err}
	}
	var row streamRow
	if err := json.Unmarshal(it.Val, &row); err != nil {
		return streamRow{}, 0, fmt.Errorf("durable: decode stream row %s: %w", name, err)
	}
	h.rows.Store(name, cachedRow{row: row, ver: it.Ver})
	return row, it.Ver, nil
}

type cachedRow struct {
	row streamRow
	ver int64
}

// metaError is a metastore failure: retryable (503).
type metaError struct{ err error }

func (e *metaError) Error() string { return "durable: read stream row: " + e.err.Error() }
func (e *metaError) Unwrap() error { return e.err }

// putRow writes the row under cond; meta.ErrConditionFailed passes through.
func (h *Handler) putRow(ctx context.Context, name string, row streamRow, cond meta.Cond) (int64, error) {
	k := rowKey(h.basin, name)
	val, err := json.Marshal(row)
	if err != nil {
		return 0, err
	}
	ver, err := h.meta.Put(ctx, k.PK, k.SK, val, cond)
	if err == nil {
		h.rows.Store(name, cachedRow{row: row, ver: ver})
	} else if !errors.Is(err, meta.ErrConditionFailed) {
		err = &metaError{err}
	}
	return ver, err
}

// recordClose copies a stream's closure into its row (ClosedAt = end, the
// final offset), by CAS, at most a few tries and best effort: the closing
// marker is in the records until retention removes it, and every fold
// that finds it closed without the row saying so tries again.
func (h *Handler) recordClose(ctx context.Context, name, incarnation string, end uint64) {
	for range 4 {
		row, ver, err := h.getRow(ctx, name)
		if err != nil || row.Incarnation != incarnation || row.ClosedAt != 0 {
			return
		}
		row.ClosedAt = end
		if _, err = h.putRow(ctx, name, row, meta.IfVer(ver)); !errors.Is(err, meta.ErrConditionFailed) {
			if err != nil {
				h.log.Debug("closure not recorded in the stream row", "stream", name, "err", err)
			}
			return
		}
	}
}

func (h *Handler) deleteRow(ctx context.Context, name string, ver int64) error {
	k := rowKey(h.basin, name)
	h.rows.Delete(name)
	return h.meta.Delete(ctx, k.PK, k.SK, meta.IfVer(ver))
}

// updateRow applies change to the current row until the conditional write
// holds (bounded); errNoRow when the row is gone.
func (h *Handler) updateRow(ctx context.Context, name string, change func(*streamRow) error) (streamRow, error) {
	for range 16 {
		row, ver, err := h.getRow(ctx, name)
		if err != nil {
			return streamRow{}, err
		}
		if err := change(&row); err != nil {
			return streamRow{}, err
		}
		if _, err := h.putRow(ctx, name, row, meta.IfVer(ver)); errors.Is(err, meta.ErrConditionFailed) {
			continue
		} else if err != nil {
			return streamRow{}, err
		}
		return row, nil
	}
	return streamRow{}, fmt.Errorf("durable: stream row %s kept changing", name)
}
