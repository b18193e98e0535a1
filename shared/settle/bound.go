package settle

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// The storage bound's extension rule (docs/settle.md, "The storage
// bound"): a settle extends a stream's tail only while what the stream
// already has waiting for the reclaim leaves room under one output cap.
// The trim rule, its other half, is shared/reclaim's.

// recentWindow is how long a superseded revision counts against the
// extension bound: the reclaim deletes it a read grace after a pass first
// saw it superseded, and passes run at least every half grace.
func recentWindow(grace time.Duration) time.Duration { return 2 * grace }

// decideExtend decides whether the next object of w extends its tail or
// starts after it, and records the decision (IfAbsent) before anything is
// published, so a re-run (or a concurrent settler, or a settle from
// another chain) follows the first decision and never publishes the other
// object: the entry is where the decision lives until a decision not to
// extend is sealed into the tail's row (seal), which is what keeps a
// settler that decides afresh after the entry is gone from extending a
// followed tail. The tail is
// extended only while its superseded revisions that may still stand,
// itself included, stay within the output cap, which bounds what a stream
// stores beyond its retained bytes by one output cap (docs/settle.md,
// "Reclamation").
func decideExtend(ctx context.Context, st *Stores, w *streamWork, t *tailObj, now time.Time) (bool, error) {
	s := t.row.Ref.Settled
	k := meta.ReclaimKey(w.id, s.Epoch, s.FirstSeq, s.Revision)
	it, err := st.Meta.Get(ctx, k.PK, k.SK)
	if err == nil {
		return decodeDecision(it, w.id)
	}
	if !errors.Is(err, meta.ErrNotFound) {
		return false, fmt.Errorf("settle: read reclaim entry %s: %w", k.SK, err)
	}
	cfg := st.cfg()
	wb, err := ReadWaiting(ctx, st.Meta, w.id)
	if err != nil {
		return false, err
	}
	// The revisions of the last window, plus the trimmed objects (and
	// reservations) the entries say still wait, share the one cap. The
	// superseded revisions are counted by the window, not the entries: a
	// settle run without the janitor (tests, a janitor down for a while)
	// then keeps extending tails as before rather than fragment them; the
	// trim rule, which must be exact, counts them from the entries.
	ext := extendable(s, now, recentWindow(cfg.ReadGrace), cfg.OutputCap, wb.Dropped)
	rc := meta.Reclaim{Basin: w.basin, Stream: w.id, Epoch: s.Epoch, First: s.FirstSeq, Rev: s.Revision, Bytes: s.Bytes, Extend: ext}
	_, err = st.Meta.Put(ctx, k.PK, k.SK, meta.Encode(rc), meta.IfAbsent())
	if err == nil {
		return ext, nil
	}
	if !errors.Is(err, meta.ErrConditionFailed) {
		return false, fmt.Errorf("settle: write reclaim entry %s: %w", k.SK, err)
	}
	if it, err = st.Meta.Get(ctx, k.PK, k.SK); err != nil {
		return false, fmt.Errorf("settle: read reclaim entry %s: %w", k.SK, err)
	}
	return decodeDecision(it, w.id)
}

func decodeDecision(it meta.Item, id string) (bool, error) {
	var rc meta.Reclaim
	if err := meta.Decode(it.Val, &rc); err != nil {
		return false, err
	}
	if rc.Stream != id {
		return false, fmt.Errorf("%w: reclaim entry %s names stream %q", ErrRows, it.SK, rc.Stream)
	}
	return rc.Extend, nil
}

// extendable is the extension bound: the revisions of s superseded within
// window, plus s itself once superseded, plus the stream's trimmed objects
// still waiting out the read grace (dropped), fit in the output cap. Both
// kinds are stored but not retained, so they share the one cap the bound
// allows beyond retained bytes. Pure.
func extendable(s *meta.Settled, now time.Time, window time.Duration, outputCap, dropped uint64) bool {
	pending := s.Bytes + dropped
	for _, r := range recent(s, now, window) {
		pending += r.Bytes
	}
	return pending <= outputCap
}

// Waiting is what a stream stores that no catalog row names any more, or
// soon will not, as its reclaim entries say: what the storage bound's
// extension rule (here) and trim rule (shared/reclaim) count.
type Waiting struct {
	// Superseded: the revisions an extension replaces (Extend; counted
	// from the decision on, before the extension commits, which only errs
	// on the safe side).
	Superseded uint64
	// Dropped: the objects a trim or retention marked Drop: their rows are
	// deleted, or kept for the storage bound (a reservation).
	Dropped uint64
	Drops   map[string]uint64 // dropped by entry sort key
}

// ReadWaiting reads a stream's reclaim entries. The reclaim pass deletes each
// entry with its object, so the sums are exact whatever the janitor's
// pace. A stream has few entries at a time: those of the last grace and
// pass.
func ReadWaiting(ctx context.Context, ms meta.Store, id string) (Waiting, error) {
	w := Waiting{Drops: map[string]uint64{}}
	q := meta.Query{PK: meta.ReclaimPK, From: id + "/", To: id + "/~", Limit: 256}
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return w, fmt.Errorf("settle: reclaim entries of %s: %w", id, err)
		}
		for _, it := range pg.Items {
			var rc meta.Reclaim
			if err := meta.Decode(it.Val, &rc); err != nil {
				return w, fmt.Errorf("%w: reclaim entry %s: %v", ErrRows, it.SK, err)
			}
			switch {
			case rc.Stream != id:
			case rc.Drop:
				w.Dropped += rc.Bytes
				w.Drops[it.SK] = rc.Bytes
			case rc.Extend:
				w.Superseded += rc.Bytes
			}
		}
		if pg.Next == "" {
			return w, nil
		}
		q.PageToken = pg.Next
	}
}

// recent is s.Recent without the revisions superseded before now−window.
// Pure.
func recent(s *meta.Settled, now time.Time, window time.Duration) []meta.Superseded {
	var out []meta.Superseded
	for _, r := range s.Recent {
		if r.At > millis(now.Add(-window)) {
			out = append(out, r)
		}
	}
	return out
}
