package absorb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// The guard against a late absorber (issue 11, defect 9). A settle deletes
// a span ref only once a catalog row covers it, and only once the
// checkpoint is past every slot of the ref (settle.eraSet.absorbed). A
// deposed or lagging absorber that still runs a pass over those slots
// would put the ref again (IfAbsent holds on a deleted key) and nothing
// would ever delete it. No condition on the put itself can refuse that
// (conditions are on one item, and the deleted key is absent), so the
// guard is a check before the puts and one after them:
//
//   - before: the checkpoint is read after the marker claim; past the
//     pass's first slot, the pass writes nothing (and takes back a marker
//     it just re-created);
//   - after: the checkpoint CAS reads the checkpoint again. If it still
//     stands at the pass's first slot, no settle can have deleted any row
//     this pass created before that read (a delete needs the checkpoint
//     past the row's slots, and checkpoints only grow), so every created
//     row is genuine. If another absorber finished the pass, each row this
//     absorber created is checked and deleted when other rows (a catalog
//     row below it, a settle's remainder) cover all of its seqs.
//
// A created row is remembered until one of those reads judges it, so a
// pass that fails after its puts (a reply lost) is judged on its re-run.

// cleanupTimeout bounds taking back what a late pass re-created. The
// cleanup does not stop with the pass's context: a deposed star that wakes
// from a pause learns it is a zombie and closes at once, and a cleanup cut
// short there would leave the resurrected row behind for good.
const cleanupTimeout = 10 * time.Second

func cleanupCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
}

// madeRef is a span ref row this absorber created (its IfAbsent put won).
type madeRef struct {
	epoch, from uint64 // the pass that wrote it: its epoch and first slot
	streamID    string
	first, end  uint64
	ver         int64
}

func (a *Absorber) made(r madeRef) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unproven = append(a.unproven, r)
}

// proven records a pass whose checkpoint CAS this absorber won: its rows
// are genuine, and the streams' totals continue from them.
func (a *Absorber) proven(epoch, from uint64, totals map[string]StreamTotals) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.unproven = slices.DeleteFunc(a.unproven, func(r madeRef) bool { return r.epoch == epoch && r.from == from })
	if a.totals == nil {
		a.totals = map[string]StreamTotals{}
	}
	for id, t := range totals {
		a.totals[id] = t
	}
}

// behind ends a pass whose first slot is not the checkpoint cp. Below it
// the slots are absorbed already (by another absorber, whose rows a settle
// may have taken since): the pass consumes them without writing, first
// judging the rows this absorber created for passes cp has passed, and
// forgets the totals of their streams, which the next pass reads from the
// rows. Above it there is a gap: an error.
func (a *Absorber) behind(ctx context.Context, epoch uint64, slots []Slot, cp uint64) (int, error) {
	from := slots[0].Slot
	if cp < from {
		return 0, fmt.Errorf("absorb: epoch %d checkpoint %d is below pass start %d", epoch, cp, from)
	}
	a.mu.Lock()
	var judge []madeRef
	for _, r := range a.unproven {
		if r.epoch == epoch && r.from < cp {
			judge = append(judge, r)
		}
	}
	a.mu.Unlock()
	cctx, cancel := cleanupCtx(ctx)
	defer cancel()
	for _, r := range judge {
		if err := a.retire(cctx, r); err != nil {
			return 0, err
		}
		a.mu.Lock()
		a.unproven = slices.DeleteFunc(a.unproven, func(x madeRef) bool { return x == r })
		delete(a.totals, r.streamID)
		a.mu.Unlock()
	}
	n := int(min(cp-from, uint64(len(slots))))
	a.mu.Lock()
	for _, s := range slots[:n] {
		for _, x := range s.Extents {
			delete(a.totals, x.StreamID)
		}
	}
	a.mu.Unlock()
	return n, nil
}

// retire deletes a row this absorber created if other rows cover every
// seq of it: then it is a resurrection (or redundant), and deleting it
// leaves every seq covered as before.
func (a *Absorber) retire(ctx context.Context, r madeRef) error {
	covered, err := a.coveredByOthers(ctx, r)
	if err != nil || !covered {
		return err
	}
	return a.deleteIfVer(ctx, meta.RefKey(r.streamID, r.first), r.ver)
}

// maxCoverRows bounds the rows read to judge one created row.
const maxCoverRows = 1024

// coveredByOthers reports whether rows other than r cover [r.first,
// r.end): a row keyed below r.first reaching past it (the catalog row a
// settle swapped in, or a longer ref), then rows keyed inside r chaining
// on to its end (a settle's remainder, later catalog rows).
func (a *Absorber) coveredByOthers(ctx context.Context, r madeRef) (bool, error) {
	if r.first == 0 {
		return false, nil
	}
	// Below: back from r.first-1 until a catalog row (rows under the
	// greatest one are catalog rows too) or a row reaching past r.first.
	pk := meta.RefKey(r.streamID, 0).PK
	q := meta.Query{PK: pk, From: meta.RefPrefix, To: meta.RefKey(r.streamID, r.first-1).SK, Backward: true, Limit: 64}
	var pos uint64
	for read := 0; pos <= r.first && read < maxCoverRows; {
		pg, err := a.Meta.Query(ctx, q)
		if err != nil {
			return false, fmt.Errorf("absorb: rows of stream %s below %d: %w", r.streamID, r.first, err)
		}
		stop := pg.Next == ""
		for _, it := range pg.Items {
			read++
			var x meta.Ref
			if err := meta.Decode(it.Val, &x); err != nil {
				return false, fmt.Errorf("absorb: row %s/%s: %w", it.PK, it.SK, err)
			}
			pos = max(pos, x.EndSeq)
			if x.Settled != nil || pos > r.first {
				stop = true
				break
			}
		}
		if stop {
			break
		}
		q.PageToken = pg.Next
	}
	if pos <= r.first {
		return false, nil
	}
	// Inside: rows keyed in (r.first, r.end), ascending, must chain on.
	q = meta.Query{PK: pk, From: meta.RefKey(r.streamID, r.first+1).SK, To: meta.RefKey(r.streamID, r.end-1).SK, Limit: 64}
	for read := 0; pos < r.end && read < maxCoverRows; {
		pg, err := a.Meta.Query(ctx, q)
		if err != nil {
			return false, fmt.Errorf("absorb: rows of stream %s inside [%d,%d): %w", r.streamID, r.first, r.end, err)
		}
		for _, it := range pg.Items {
			read++
			var x meta.Ref
			if err := meta.Decode(it.Val, &x); err != nil {
				return false, fmt.Errorf("absorb: row %s/%s: %w", it.PK, it.SK, err)
			}
			if x.FirstSeq > pos {
				return false, nil
			}
			pos = max(pos, x.EndSeq)
		}
		if pg.Next == "" {
			break
		}
		q.PageToken = pg.Next
	}
	return pos >= r.end, nil
}

// deleteIfVer deletes a row this absorber wrote, if it still is that row:
// one a settle already moved or deleted is left to the settle.
func (a *Absorber) deleteIfVer(ctx context.Context, k meta.Key, ver int64) error {
	err := a.Meta.Delete(ctx, k.PK, k.SK, meta.IfVer(ver))
	if err == nil || errors.Is(err, meta.ErrConditionFailed) || errors.Is(err, meta.ErrNotFound) {
		return nil
	}
	return fmt.Errorf("absorb: delete %s/%s: %w", k.PK, k.SK, err)
}
