package settle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// ErrRows reports a stream's rows in a shape no settle step leaves them
// in (a hole, or a row keyed inside another's extent): the stream is left
// alone and the job fails, so an operator looks.
var ErrRows = errors.New("settle: stream rows do not chain")

// refRow is one ref row of a stream as read, with its version for CAS
// (0: not written yet).
type refRow struct {
	Ver int64
	Ref meta.Ref
}

// view is what a settle needs of a stream's rows: the rows from its
// greatest catalog row up, sorted out. Pure data.
//
// Commit order (see commit in group.go) keeps every state between steps in
// this shape: base is the greatest catalog row; leftovers are span refs
// keyed inside base's window, covered by it and not yet deleted; the last
// leftover may reach past base's end (the object ended inside it), and then
// its remainder stands (or, after a crash, must be put) at base's end;
// standing refs chain from base's end, each starting where the previous
// ends.
type view struct {
	base      *refRow
	leftovers []refRow
	// remainder is the span ref to put at base's end before the last
	// leftover is deleted; nil when none is needed or it stands already.
	remainder *meta.Ref
	// standing begins with remainder (Ver 0) when it is not written yet.
	standing []refRow
}

// analyze sorts a stream's rows (ascending by first seq, from the
// greatest catalog row up, or all of them when there is none) into a view.
// Pure.
func analyze(rows []refRow) (view, error) {
	var v view
	bi := -1
	for i := range rows {
		if rows[i].Ref.Settled != nil {
			bi = i
		}
	}
	i := 0
	var pos uint64
	switch {
	case bi >= 0:
		b := rows[bi]
		v.base = &b
		pos = b.Ref.EndSeq
		for i = bi + 1; i < len(rows) && rows[i].Ref.FirstSeq < pos; i++ {
			v.leftovers = append(v.leftovers, rows[i])
		}
		for j, l := range v.leftovers {
			if l.Ref.EndSeq > pos && j != len(v.leftovers)-1 {
				return view{}, fmt.Errorf("%w: span ref at %d reaches past the catalog row's end %d but is not the last inside it", ErrRows, l.Ref.FirstSeq, pos)
			}
		}
		if n := len(v.leftovers); n > 0 && v.leftovers[n-1].Ref.EndSeq > pos {
			last := v.leftovers[n-1].Ref
			if i < len(rows) && rows[i].Ref.FirstSeq == pos {
				if rows[i].Ref.EndSeq != last.EndSeq {
					return view{}, fmt.Errorf("%w: remainder at %d ends at %d, the ref it splits at %d", ErrRows, pos, rows[i].Ref.EndSeq, last.EndSeq)
				}
				break
			}
			r, err := remainderOf(last, pos, b.Ref.MaxTimestamp)
			if err != nil {
				return view{}, err
			}
			v.remainder = &r
			v.standing = append(v.standing, refRow{Ref: r})
			pos = r.EndSeq
		}
	case len(rows) > 0:
		pos = rows[0].Ref.FirstSeq
	}
	for ; i < len(rows); i++ {
		r := rows[i]
		switch {
		case r.Ref.Span == nil:
			return view{}, fmt.Errorf("%w: catalog row at %d above the greatest catalog row", ErrRows, r.Ref.FirstSeq)
		case r.Ref.FirstSeq > pos:
			return view{}, fmt.Errorf("%w: no row covers seqs [%d,%d)", ErrRows, pos, r.Ref.FirstSeq)
		case r.Ref.FirstSeq < pos:
			return view{}, fmt.Errorf("%w: span ref at %d lies inside the ref ending at %d", ErrRows, r.Ref.FirstSeq, pos)
		}
		v.standing = append(v.standing, r)
		pos = r.Ref.EndSeq
	}
	return v, nil
}

// remainderOf is the part of span ref r from seq at on, where at is the
// first seq of one of its slot refs: the same slots, cumulative fields and
// end. Its min timestamp is raised to floorTS (the max timestamp of the
// records before at; timestamps never decrease), a bound computed from
// rows alone so every settler puts the same row. Pure.
func remainderOf(r meta.Ref, at uint64, floorTS uint64) (meta.Ref, error) {
	if r.Span == nil {
		return meta.Ref{}, fmt.Errorf("%w: split of a catalog row at %d", ErrRows, at)
	}
	sp, ok := r.Span.From(at)
	if !ok || at <= r.FirstSeq || at >= r.EndSeq {
		return meta.Ref{}, fmt.Errorf("%w: span ref [%d,%d) has no slot ref starting at %d", ErrRows, r.FirstSeq, r.EndSeq, at)
	}
	out := r
	out.FirstSeq = at
	out.Span = sp
	out.MinTimestamp = min(max(r.MinTimestamp, floorTS), r.MaxTimestamp)
	return out, nil
}

// eraSet is the ripe markers a settle job works on: the era as it stands
// when the job reads it.
type eraSet struct {
	ch      ChainRef
	epoch   uint64
	markers []liveMarker // ripe, ascending by first slot

	mu sync.Mutex
	// checkpoints of the chain epochs met in windows (this one's too), as
	// read by the job: they only grow, so a stale one is conservative.
	checkpoints map[epochRef]uint64
}

// epochRef names one epoch of one chain.
type epochRef struct {
	ch    ChainRef
	epoch uint64
}

// absorbed reports whether every slot of sp is below its epoch's known
// checkpoint: its pass is complete, so every ref of it is written, and an
// absorber still running that pass finds the checkpoint past it and writes
// nothing, or takes back a ref it re-created after a settle deleted it
// (absorb's guard).
func (e *eraSet) absorbed(sp *meta.Span) bool {
	e.mu.Lock()
	cp, ok := e.checkpoints[epochRef{ChainRef{sp.Star, sp.Class}, sp.Epoch}]
	e.mu.Unlock()
	return ok && len(sp.Slots) > 0 && sp.Slots[len(sp.Slots)-1].Slot < cp
}

// learn reads the checkpoints of chain epochs in standing not known yet.
func (e *eraSet) learn(ctx context.Context, ms meta.Store, standing []refRow) error {
	for _, r := range standing {
		sp := r.Ref.Span
		k := epochRef{ChainRef{sp.Star, sp.Class}, sp.Epoch}
		e.mu.Lock()
		_, ok := e.checkpoints[k]
		e.mu.Unlock()
		if ok {
			continue
		}
		rec, err := ReadEpoch(ctx, ms, k.ch, k.epoch)
		if err != nil {
			return err
		}
		e.mu.Lock()
		e.checkpoints[k] = rec.Checkpoint
		e.mu.Unlock()
	}
	return nil
}

// marker returns the index of the marker holding slot, or -1.
func (e *eraSet) marker(slot uint64) int {
	lo, hi := 0, len(e.markers)
	for lo < hi {
		mid := (lo + hi) / 2
		switch m := e.markers[mid].M; {
		case slot < m.FromSlot:
			hi = mid
		case slot >= m.EndSlot:
			lo = mid + 1
		default:
			return mid
		}
	}
	return -1
}

// onChain reports whether sp rides this era's chain epoch.
func (e *eraSet) onChain(sp *meta.Span) bool {
	return sp != nil && sp.Star == e.ch.Star && sp.Class == e.ch.Class && sp.Epoch == e.epoch
}

// owns reports whether every slot of sp is in one of the era's markers.
func (e *eraSet) owns(sp *meta.Span) bool {
	if !e.onChain(sp) || len(sp.Slots) == 0 {
		return false
	}
	for _, sl := range sp.Slots {
		if e.marker(sl.Slot) < 0 {
			return false
		}
	}
	return true
}

// window is what this job may settle of a stream: its standing refs up to
// and including the last one the era owns, cut before the first ref whose
// pass is not absorbed yet (absorbed reports whether every slot of a span
// is below its epoch's checkpoint, as learned). A window always starts at the first
// standing ref, since a stream settles in seq order: a stream whose
// trigger crossing ripened this era brings the earlier bytes of its
// standing window along, wherever they lie; their markers resolve when
// they ripen and find nothing of the stream left standing.
func (e *eraSet) window(standing []refRow) []refRow {
	n := 0
	for i, r := range standing {
		if !e.absorbed(r.Ref.Span) {
			break
		}
		if e.owns(r.Ref.Span) {
			n = i + 1
		}
	}
	return standing[:n]
}

// capRipe reports whether marker i is due by its age cap: so cast, or
// older than the cap however it was cast.
func (e *eraSet) capRipe(i int, ageCap time.Duration, now time.Time) bool {
	m := e.markers[i].M
	return m.Cause != "linger" || millis(now) >= m.Birth+ageCap.Milliseconds()
}

// qualifies decides whether a live stream settles its window in this job:
// a linger-ripened era settles it only when its standing window reaches
// the trigger (smaller would mint the fragments the policy forbids); a
// window touching a cap-ripened marker takes everything standing. Pure.
func (e *eraSet) qualifies(window []refRow, trigger uint64, ageCap time.Duration, now time.Time) bool {
	var bytes uint64
	for _, r := range window {
		owned := e.onChain(r.Ref.Span)
		for _, sl := range r.Ref.Span.Slots {
			bytes += sl.Length
			if i := e.marker(sl.Slot); owned && i >= 0 && e.capRipe(i, ageCap, now) {
				return true
			}
		}
	}
	return len(window) > 0 && bytes >= trigger
}

// residue marks the era's markers still holding slots of standing refs.
func (e *eraSet) residue(standing []refRow, into []bool) {
	for _, r := range standing {
		if !e.onChain(r.Ref.Span) {
			continue
		}
		for _, sl := range r.Ref.Span.Slots {
			if i := e.marker(sl.Slot); i >= 0 {
				into[i] = true
			}
		}
	}
}
