package auditjob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
)

// deleteOnEmpty applies a live stream's delete_on_empty (S2: a stream
// with no retained records for min_age is deleted), after the retention
// pass trimmed it (tr). It reports whether it deleted the stream.
//
// Safety rests on the stream's lease, never on a clock or a guess about
// in-flight appends: a stream is deleted only once the auditor holds its
// lease as Emptied (meta.Lease.Emptied), which no star takes, so no star
// can acknowledge an append to it afterwards. The auditor takes it by CAS
// only from a lease released cleanly with rows covering every record
// (Released, no Pending, Frontier = the tail the rows show), or from no
// lease at all for a stream with no rows; a leader holding the lease (a
// stream it still leads, idle or not) is left alone until it releases.
// So every acknowledged record is in the rows the emptiness was judged
// on, and none can follow.
//
// Then the stream is deleted as star/catalog deletes one (deleted_at on its
// name row), registered for the deleted-stream reclamation and
// tombstoned (reclaim.ForgetStream). A lease found Emptied (a pass that
// crashed after taking it) is finished whatever the config says now: the
// decision was made and nobody can write to the stream. Every step is
// conditional or idempotent.
func deleteOnEmpty(ctx context.Context, st *settle.Stores, basin, name string, s meta.StreamRow, tr reclaim.StreamTrimReport, minAge, age time.Duration, now time.Time) (bool, error) {
	l, ver, leased, err := leader.ReadLease(ctx, st.Meta, s.ID)
	if err != nil {
		return false, err
	}
	if !leased || !l.Emptied {
		if minAge <= 0 || age <= 0 {
			return false, nil // off, or infinite retention (S2 applies it only with an age)
		}
		since, empty := tr.Empty(uint64(max(s.CreatedAt.UnixMilli(), 0)), age)
		// Saturating: since (a client's timestamp plus the age) and the
		// min age may each be near 2^64; a wrap would delete it early.
		if !empty || api.AddSat(since, api.DurationMillis(minAge)) > uint64(max(now.UnixMilli(), 0)) {
			return false, nil
		}
		if !emptiable(l, leased, tr) {
			return false, nil
		}
		next := meta.Lease{LeaseHolder: meta.LeaseHolder{Star: meta.EmptiedBy}, Version: l.Version + 1, AcquiredAt: now.UnixMilli(), Emptied: true}
		if _, err := leader.Acquire(ctx, st.Meta, s.ID, next, ver); errors.Is(err, leader.ErrLost) {
			return false, nil // a star took the lease: judged again next pass
		} else if err != nil {
			return false, err
		}
		st.Log().Info("deleting an empty stream (delete_on_empty)", "basin", basin, "stream", name, "id", s.ID,
			"empty_since", time.UnixMilli(int64(min(since, math.MaxInt64))), "min_age", minAge)
	}
	if err := markDeleted(ctx, st.Meta, basin, name, s.ID, now); err != nil {
		return false, err
	}
	k := meta.ReclaimStreamKey(s.ID)
	if _, err := st.Meta.Put(ctx, k.PK, k.SK, meta.Encode(meta.ReclaimStream{Basin: basin, Stream: s.ID}), meta.IfAbsent()); err != nil && !errors.Is(err, meta.ErrConditionFailed) {
		return false, fmt.Errorf("register emptied stream %s: %w", s.ID, err)
	}
	return true, reclaim.ForgetStream(ctx, st, basin, name, s.ID, now)
}

// emptiable reports whether the auditor may take a stream's lease to
// delete it: no lease and no rows (never led, so nothing acknowledged),
// or a lease released cleanly at the rows' tail. Pure.
func emptiable(l meta.Lease, leased bool, tr reclaim.StreamTrimReport) bool {
	if !leased {
		return !tr.Written
	}
	return l.Released && len(l.Pending) == 0 && l.Frontier == tr.Tail
}

// markDeleted sets deleted_at on stream id's name row, as star/node's
// DeleteStream does, unless the row is another stream's now or already
// deleted. The row is patched as raw JSON so fields this package does not
// decode survive.
func markDeleted(ctx context.Context, ms meta.Store, basin, name, id string, now time.Time) error {
	k := meta.StreamNameKey(basin, name)
	for range 4 {
		it, err := ms.Get(ctx, k.PK, k.SK)
		if errors.Is(err, meta.ErrNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read name row of %s: %w", id, err)
		}
		var row map[string]json.RawMessage
		if err := json.Unmarshal(it.Val, &row); err != nil {
			return fmt.Errorf("name row %s/%s: %w", k.PK, k.SK, err)
		}
		s, err := meta.DecodeStreamRowLenient(it)
		if err != nil {
			return fmt.Errorf("name row %s/%s: %w", k.PK, k.SK, err)
		}
		if s.ID != id || s.DeletedAt != nil {
			return nil
		}
		at, err := json.Marshal(now.UTC())
		if err != nil {
			return err
		}
		row["deleted_at"] = at
		val, err := json.Marshal(row)
		if err != nil {
			return err
		}
		_, err = ms.Put(ctx, k.PK, k.SK, val, meta.IfVer(it.Ver))
		if errors.Is(err, meta.ErrConditionFailed) {
			continue // reconfigured meanwhile: read it again
		}
		if err != nil {
			return fmt.Errorf("mark stream %s deleted: %w", id, err)
		}
		return nil
	}
	return fmt.Errorf("name row of stream %s kept changing", id)
}
