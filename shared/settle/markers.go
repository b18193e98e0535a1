package settle

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// ListEpochs reads every epoch record of a chain, ascending.
func ListEpochs(ctx context.Context, ms meta.Store, ch ChainRef) ([]meta.Epoch, error) {
	return ReadEpochRecords(ctx, ms, ch, nil)
}

// ReadEpochRecords reads a chain's epoch records, ascending; a row that
// does not decode goes to bad, or fails the read when bad is nil.
func ReadEpochRecords(ctx context.Context, ms meta.Store, ch ChainRef, bad func(meta.Item, error)) ([]meta.Epoch, error) {
	pk := meta.ChainPK(ch.Star, ch.Class)
	q := meta.Query{PK: pk, From: "e#", To: "e#~"}
	var out []meta.Epoch
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("settle: list epochs of %s: %w", ch, err)
		}
		for _, it := range pg.Items {
			var e meta.Epoch
			if err := meta.Decode(it.Val, &e); err != nil {
				err = fmt.Errorf("settle: epoch row %s/%s: %w", it.PK, it.SK, err)
				if bad == nil {
					return nil, err
				}
				bad(it, err)
				continue
			}
			out = append(out, e)
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
}

// liveMarker is a marker row with its version, for CAS.
type liveMarker struct {
	M   meta.Marker
	Ver int64
	// Streams is the marker's stream set, inline or from its shards (set
	// by loadStreams).
	Streams []string
}

// markerStart is where an epoch's live markers begin: nothing below the
// settle frontier or the rewritten cursor is live.
func markerStart(ch ChainRef, e meta.Epoch) string {
	from := meta.MarkerKey(ch.Star, ch.Class, e.Epoch, e.Rewritten).SK
	return max(from, e.Frontier)
}

// liveMarkers reads the epoch's markers whose passes start below its
// checkpoint, from the frontier up, ascending; at most limit (0: all).
// Callers read the epoch record (its checkpoint) first: a marker is written
// before the checkpoint passes it, so none below that checkpoint is missed.
func liveMarkers(ctx context.Context, ms meta.Store, ch ChainRef, e meta.Epoch, limit int) ([]liveMarker, error) {
	return scanMarkers(ctx, ms, ch, e, limit, nil)
}

// scanMarkers is liveMarkers. A row that does not decode as its key's
// marker goes to bad and stands in the result as a marker that never
// ripens, one slot long from its key's slot (or is left out when its key
// is not a marker's), so no era spans it; with bad nil it fails the scan.
func scanMarkers(ctx context.Context, ms meta.Store, ch ChainRef, e meta.Epoch, limit int, bad func(meta.Item, error)) ([]liveMarker, error) {
	if e.Checkpoint == 0 {
		return nil, nil
	}
	q := meta.Query{PK: meta.ChainPK(ch.Star, ch.Class), From: markerStart(ch, e),
		To: meta.MarkerKey(ch.Star, ch.Class, e.Epoch, e.Checkpoint-1).SK, Limit: limit}
	var out []liveMarker
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("settle: markers of %s epoch %d: %w", ch, e.Epoch, err)
		}
		for _, it := range pg.Items {
			var m meta.Marker
			err := meta.Decode(it.Val, &m)
			if err == nil && (m.Epoch != e.Epoch || m.EndSlot <= m.FromSlot || it.SK != meta.MarkerKey(ch.Star, ch.Class, e.Epoch, m.FromSlot).SK) {
				err = fmt.Errorf("settle: marker %s/%s does not match its key (epoch %d slots [%d,%d))", it.PK, it.SK, m.Epoch, m.FromSlot, m.EndSlot)
			}
			if err != nil {
				if bad == nil {
					return nil, fmt.Errorf("settle: marker %s/%s: %w", it.PK, it.SK, err)
				}
				bad(it, err)
				slot, ok := markerSlot(ch, e.Epoch, it.SK)
				if !ok {
					continue
				}
				m = meta.Marker{Epoch: e.Epoch, FromSlot: slot, EndSlot: slot + 1, Ripen: math.MaxInt64, Cause: "quarantined"}
			}
			out = append(out, liveMarker{M: m, Ver: it.Ver})
			if limit > 0 && len(out) >= limit {
				return out, nil
			}
		}
		if pg.Next == "" {
			return out, nil // ascending: keys order markers by first slot
		}
		q.PageToken = pg.Next
	}
}

// ScanMarkers reads the epoch's live markers for the plan
// (shared/settle/plan): scanMarkers, without versions or stream sets.
func ScanMarkers(ctx context.Context, ms meta.Store, ch ChainRef, e meta.Epoch, limit int, bad func(meta.Item, error)) ([]meta.Marker, error) {
	lms, err := scanMarkers(ctx, ms, ch, e, limit, bad)
	var out []meta.Marker
	for _, lm := range lms {
		out = append(out, lm.M)
	}
	return out, err
}

// markerSlot parses the first slot out of a marker key of epoch.
func markerSlot(ch ChainRef, epoch uint64, sk string) (uint64, bool) {
	prefix := meta.MarkerKey(ch.Star, ch.Class, epoch, 0).SK
	prefix = prefix[:len(prefix)-20]
	rest, ok := strings.CutPrefix(sk, prefix)
	if !ok || len(rest) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

// loadStreams sets each marker's Streams: inline, or read from its shard
// rows. A missing shard is an error: every marker below the checkpoint
// has all of its shards (meta.Marker).
func loadStreams(ctx context.Context, ms meta.Store, ch ChainRef, markers []liveMarker) error {
	for i := range markers {
		lm := &markers[i]
		if lm.M.Shards == 0 {
			lm.Streams = lm.M.Streams
			continue
		}
		pk := meta.ChainPK(ch.Star, ch.Class)
		q := meta.Query{PK: pk, From: meta.MarkerShardKey(ch.Star, ch.Class, lm.M.Epoch, lm.M.FromSlot, 0).SK,
			To: meta.MarkerShardKey(ch.Star, ch.Class, lm.M.Epoch, lm.M.FromSlot, lm.M.Shards-1).SK}
		var ids []string
		n := 0
		for {
			pg, err := ms.Query(ctx, q)
			if err != nil {
				return fmt.Errorf("settle: stream shards of marker %d/%d: %w", lm.M.Epoch, lm.M.FromSlot, err)
			}
			for _, it := range pg.Items {
				var sh meta.MarkerShard
				if err := meta.Decode(it.Val, &sh); err != nil {
					return fmt.Errorf("settle: stream shard %s/%s: %w", it.PK, it.SK, err)
				}
				ids = append(ids, sh.Streams...)
				n++
			}
			if pg.Next == "" {
				break
			}
			q.PageToken = pg.Next
		}
		if n != lm.M.Shards {
			return fmt.Errorf("settle: marker %d/%d has %d of its %d stream shards", lm.M.Epoch, lm.M.FromSlot, n, lm.M.Shards)
		}
		lm.Streams = ids
	}
	return nil
}

// deleteShards deletes a resolved marker's shard rows.
func deleteShards(ctx context.Context, ms meta.Store, ch ChainRef, m meta.Marker) error {
	if m.Shards == 0 {
		return nil
	}
	keys := make([]meta.Key, m.Shards)
	for i := range keys {
		keys[i] = meta.MarkerShardKey(ch.Star, ch.Class, m.Epoch, m.FromSlot, i)
	}
	if err := ms.BatchDelete(ctx, keys); err != nil {
		return fmt.Errorf("settle: delete stream shards of marker %d/%d: %w", m.Epoch, m.FromSlot, err)
	}
	return nil
}

// FirstLive is how far the cursors that stop at the epoch's first live
// marker (the settle frontier, the rewritten cursor) may go: that
// marker's first slot, or the checkpoint when no marker is left below it
// (every live marker starts below the checkpoint). A marker that does not
// decode stands there as a never-ripe marker of its key's slot, so the
// cursors stop at it rather than fail the job.
func FirstLive(ctx context.Context, st *Stores, ch ChainRef, e meta.Epoch) (uint64, error) {
	first, err := scanMarkers(ctx, st.Meta, ch, e, 1, func(it meta.Item, err error) {
		st.Log().Warn("settle: a marker that cannot be decoded holds the epoch's cursors", "pk", it.PK, "sk", it.SK, "err", err)
	})
	if err != nil || len(first) == 0 {
		return e.Checkpoint, err
	}
	return first[0].M.FromSlot, nil
}

// SweepShards deletes the stream shards left of markers in [from, to) of
// epoch, which the rewritten cursor just passed: every such marker is
// resolved, so a shard still there was left by a settler that died
// between deleting its marker and its shards. One query, normally empty;
// a failure is logged and leaves them (rows nothing reads).
func SweepShards(ctx context.Context, st *Stores, ch ChainRef, epoch, from, to uint64) {
	q := meta.Query{PK: meta.ChainPK(ch.Star, ch.Class), From: meta.MarkerShardKey(ch.Star, ch.Class, epoch, from, 0).SK,
		To: meta.MarkerShardKey(ch.Star, ch.Class, epoch, to-1, math.MaxInt).SK}
	for range 64 { // bounded: 64 pages of orphans per advance, the rest on no later pass
		pg, err := st.Meta.Query(ctx, q)
		if err != nil {
			st.Log().Warn("settle: reading stream shards left behind", "chain", ch.String(), "epoch", epoch, "err", err)
			return
		}
		keys := make([]meta.Key, len(pg.Items))
		for i, it := range pg.Items {
			keys[i] = meta.Key{PK: it.PK, SK: it.SK}
		}
		if len(keys) > 0 {
			if err := st.Meta.BatchDelete(ctx, keys); err != nil {
				st.Log().Warn("settle: deleting stream shards left behind", "chain", ch.String(), "epoch", epoch, "err", err)
				return
			}
		}
		if pg.Next == "" {
			return
		}
		q.PageToken = pg.Next
	}
}

// Ripe reports whether a marker is due: ripened by now and wholly below
// the epoch's checkpoint (a marker at or above it belongs to a pass whose
// checkpoint CAS has not landed, so its refs may not all be written).
func Ripe(m meta.Marker, checkpoint uint64, now time.Time) bool {
	return m.Ripen <= millis(now) && m.EndSlot <= checkpoint
}

// Due reports whether a marker may be settled now: ripe, or gathered into
// an era (an age-cap marker that ripens within gather, wholly below the
// checkpoint). Only a ripe marker starts an era.
func Due(m meta.Marker, checkpoint uint64, now time.Time, gather time.Duration) bool {
	if Ripe(m, checkpoint, now) {
		return true
	}
	return gather > 0 && m.Cause == "cap" && m.Ripen <= millis(now.Add(gather)) && m.EndSlot <= checkpoint
}
