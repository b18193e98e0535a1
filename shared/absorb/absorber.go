package absorb

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/starlog/starlog/shared/meta"
)

// ErrNeedMore means an earlier run of this pass (one that crashed before its
// checkpoint CAS, or a concurrent absorber) recorded a marker reaching past
// the slots given: the pass waits for more slots so it writes the very same
// rows.
var ErrNeedMore = errors.New("absorb: pass needs more slots to match its recorded marker")

// NeedMoreError is ErrNeedMore with the count: the pass from Slot must be
// offered Slots slots (its recorded marker's), so a caller gathering
// slots one by one tries again only once it has them.
type NeedMoreError struct {
	Epoch, Slot uint64
	Slots       int
}

func (e *NeedMoreError) Error() string {
	return fmt.Sprintf("%v: epoch %d pass from slot %d has %d", ErrNeedMore, e.Epoch, e.Slot, e.Slots)
}

func (e *NeedMoreError) Is(target error) bool { return target == ErrNeedMore }

// Absorber runs passes for one chain. It keeps each stream's chained totals
// in memory and reads the ones it lacks from the stream's rows.
type Absorber struct {
	Star  string
	Class meta.Class
	Meta  meta.Store
	Rip   Ripening
	// Concurrency bounds the metastore writes of one pass (default 16).
	Concurrency int
	// Now stamps markers (default time.Now).
	Now func() time.Time
	// UpdateEpoch advances the checkpoint by CAS (chain.Chain.UpdateEpoch).
	UpdateEpoch func(ctx context.Context, epoch uint64, fn func(*meta.Epoch) bool) (meta.Epoch, error)

	mu     sync.Mutex
	totals map[string]StreamTotals
	// unproven are the span refs this absorber created that no checkpoint
	// read has proven yet (see guard.go): a pass that ends finding its
	// slots absorbed by another checks them for resurrections.
	unproven []madeRef
	// short is the last pass found short of its recorded marker: a marker
	// never changes once claimed, so a pass from the same slot offered
	// fewer slots is short again, without reading the streams' rows.
	short *NeedMoreError
}

// Seed tells the absorber a stream's totals at its durable tail (a leader
// opening the stream knows them from its greatest row).
func (a *Absorber) Seed(streamID string, t StreamTotals) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.totals == nil {
		a.totals = map[string]StreamTotals{}
	}
	a.totals[streamID] = t
}

// Forget drops a stream's totals (the stream was handed off or deleted).
func (a *Absorber) Forget(streamID string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.totals, streamID)
}

// Pass absorbs a prefix of slots (consecutive, of one epoch, starting at the
// epoch's checkpoint) and returns how many it consumed: all of them, fewer
// when the marker recorded for this pass ends sooner, or, when another
// absorber already moved the checkpoint past the first slot, the slots
// below the checkpoint, writing nothing.
//
// Steps: read the checkpoint; claim the pass's boundaries with its batch
// marker (IfAbsent: the first claim stands, and every absorber of the pass
// adopts it); read the checkpoint again; span refs (idempotent conditional
// puts); the checkpoint CAS, whose read also tells whether another absorber
// finished the pass meanwhile. A crash at any step followed by a re-run, or
// any interleaving with another absorber of the epoch, converges to rows
// that tile each stream without overlap (see the package doc).
func (a *Absorber) Pass(ctx context.Context, epoch uint64, slots []Slot) (int, error) {
	if len(slots) == 0 {
		return 0, nil
	}
	from := slots[0].Slot
	cp, err := a.checkpoint(ctx, epoch)
	if err != nil {
		return 0, err
	}
	if cp != from {
		return a.behind(ctx, epoch, slots, cp)
	}
	// Still short of the marker found last time (the checkpoint is read
	// first: the marker's own pass, run by another, may have passed it).
	a.mu.Lock()
	short := a.short
	a.mu.Unlock()
	if short != nil && short.Epoch == epoch && short.Slot == from && len(slots) < short.Slots {
		return 0, short
	}
	prev, err := a.prevTotals(ctx, slots)
	if err != nil {
		// Rows that do not continue at the pass (a catalog row reaching
		// past it) mean another absorber and a settle got here first while
		// this one lagged: the checkpoint says so.
		if cp, cerr := a.checkpoint(ctx, epoch); cerr == nil && cp != from {
			return a.behind(ctx, epoch, slots, cp)
		}
		return 0, err
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	birth := now()
	p, err := Plan(a.Star, a.Class, epoch, slots, prev, a.Rip, birth)
	if err != nil {
		return 0, err
	}
	if len(p.Crossed) > 0 {
		// A crossing counted from a remembered settled point may be one a
		// settle since undid: read those streams' settled points again.
		if err := a.refreshSettled(ctx, slots, p.Crossed, prev); err != nil {
			return 0, err
		}
		if p, err = Plan(a.Star, a.Class, epoch, slots, prev, a.Rip, birth); err != nil {
			return 0, err
		}
	}
	mk := meta.MarkerKey(a.Star, a.Class, epoch, from)
	claim, err := a.claimMarker(ctx, mk, p.Marker)
	if err != nil {
		return 0, err
	}
	if n := int(claim.m.EndSlot - from); n != len(slots) {
		if n > len(slots) {
			short := &NeedMoreError{Epoch: epoch, Slot: from, Slots: n}
			a.mu.Lock()
			a.short = short
			a.mu.Unlock()
			return 0, short
		}
		slots = slots[:n]
		if p, err = Plan(a.Star, a.Class, epoch, slots, prev, a.Rip, birth); err != nil {
			return 0, err
		}
	}
	// A claim that landed after the checkpoint passed from re-created a
	// marker a settle had resolved: take it back and write no ref.
	if cp, err = a.checkpoint(ctx, epoch); err != nil {
		return 0, err
	}
	if cp != from {
		if claim.created && cp > from {
			cctx, cancel := cleanupCtx(ctx)
			err := a.deleteIfVer(cctx, mk, claim.ver)
			cancel()
			if err != nil {
				return 0, err
			}
		}
		return a.behind(ctx, epoch, slots, cp)
	}
	if err := a.writeShards(ctx, epoch, from, p.Shards); err != nil {
		return 0, err
	}
	if err := a.writeRefs(ctx, epoch, from, p.Refs); err != nil {
		return 0, err
	}
	seen, err := a.advance(ctx, epoch, p)
	if err != nil {
		return 0, err
	}
	switch {
	case seen == p.From:
		a.proven(epoch, from, p.Totals)
		return len(slots), nil
	case seen >= p.End:
		// Another absorber of this very pass (same boundaries, from the
		// marker) finished it first, and a settle may have taken its refs.
		return a.behind(ctx, epoch, slots, seen)
	default:
		return 0, fmt.Errorf("absorb: epoch %d checkpoint %d moved inside pass [%d,%d), which its marker recorded", epoch, seen, p.From, p.End)
	}
}

// advance CASes the checkpoint from the pass's first slot to its end, and
// returns the checkpoint it read last: the pass's first slot when it won.
// That read comes after every ref put of the pass (see guard.go).
func (a *Absorber) advance(ctx context.Context, epoch uint64, p PassPlan) (uint64, error) {
	var seen uint64
	_, err := a.UpdateEpoch(ctx, epoch, func(e *meta.Epoch) bool {
		seen = e.Checkpoint
		if e.Checkpoint != p.From {
			return false
		}
		e.Checkpoint = p.End
		return true
	})
	if err != nil {
		return 0, fmt.Errorf("absorb: checkpoint epoch %d to %d: %w", epoch, p.End, err)
	}
	return seen, nil
}

// checkpoint reads the epoch's checkpoint.
func (a *Absorber) checkpoint(ctx context.Context, epoch uint64) (uint64, error) {
	k := meta.EpochKey(a.Star, a.Class, epoch)
	it, err := a.Meta.Get(ctx, k.PK, k.SK)
	if err != nil {
		return 0, fmt.Errorf("absorb: read epoch %d: %w", epoch, err)
	}
	var e meta.Epoch
	if err := meta.Decode(it.Val, &e); err != nil {
		return 0, fmt.Errorf("absorb: epoch %d record: %w", epoch, err)
	}
	return e.Checkpoint, nil
}

// markerClaim is the marker that decides a pass's boundaries.
type markerClaim struct {
	m       meta.Marker
	ver     int64
	created bool // by this call
}

// claimMarker puts the pass's marker if absent, or reads the one recorded
// first (by a crashed run or a concurrent absorber), whose boundaries the
// pass then takes.
func (a *Absorber) claimMarker(ctx context.Context, k meta.Key, m meta.Marker) (markerClaim, error) {
	for range 3 {
		ver, err := a.Meta.Put(ctx, k.PK, k.SK, meta.Encode(m), meta.IfAbsent())
		if err == nil {
			return markerClaim{m: m, ver: ver, created: true}, nil
		}
		if !errors.Is(err, meta.ErrConditionFailed) {
			return markerClaim{}, fmt.Errorf("absorb: put marker %s: %w", k.SK, err)
		}
		it, err := a.Meta.Get(ctx, k.PK, k.SK)
		if errors.Is(err, meta.ErrNotFound) {
			continue // resolved between the two calls: the re-read checkpoint says so
		}
		if err != nil {
			return markerClaim{}, fmt.Errorf("absorb: read marker %s: %w", k.SK, err)
		}
		var have meta.Marker
		if err := meta.Decode(it.Val, &have); err != nil {
			return markerClaim{}, fmt.Errorf("absorb: marker %s: %w", k.SK, err)
		}
		if have.Epoch != m.Epoch || have.FromSlot != m.FromSlot || have.EndSlot <= m.FromSlot {
			return markerClaim{}, fmt.Errorf("absorb: marker %s records epoch %d slots [%d,%d)", k.SK, have.Epoch, have.FromSlot, have.EndSlot)
		}
		return markerClaim{m: have, ver: it.Ver}, nil
	}
	return markerClaim{}, fmt.Errorf("absorb: marker %s keeps vanishing", k.SK)
}

// prevTotals returns, for every stream in the pass, the totals its first
// extent continues from: remembered, or read from the stream's row just
// below that extent.
func (a *Absorber) prevTotals(ctx context.Context, slots []Slot) (map[string]StreamTotals, error) {
	first := map[string]uint64{}
	for _, s := range slots {
		for _, x := range s.Extents {
			if _, ok := first[x.StreamID]; !ok {
				first[x.StreamID] = x.FirstSeq
			}
		}
	}
	out := make(map[string]StreamTotals, len(first))
	var missing []string
	a.mu.Lock()
	for id := range first {
		if t, ok := a.totals[id]; ok {
			out[id] = t
		} else {
			missing = append(missing, id)
		}
	}
	a.mu.Unlock()
	slices.Sort(missing) // one order of calls for one input (deterministic tests, simulation)
	for _, id := range missing {
		seq := first[id]
		if seq == 0 {
			out[id] = StreamTotals{}
			continue
		}
		pg, err := a.Meta.Query(ctx, meta.FloorQuery(id, seq-1))
		if err != nil {
			return nil, fmt.Errorf("absorb: floor of stream %s at %d: %w", id, seq-1, err)
		}
		if len(pg.Items) == 0 {
			out[id] = StreamTotals{}
			continue
		}
		var r meta.Ref
		if err := meta.Decode(pg.Items[0].Val, &r); err != nil {
			return nil, err
		}
		if r.EndSeq != seq {
			return nil, fmt.Errorf("absorb: stream %s: row below seq %d ends at %d", id, seq, r.EndSeq)
		}
		t := StreamTotals{CumBytes: r.CumBytes, FencingToken: r.FencingToken, TrimPoint: r.TrimPoint}
		if r.Settled != nil {
			t.Settled = r.CumBytes
		}
		// Otherwise Settled stays 0 until a crossing makes the absorber
		// read it (refreshSettled): most passes cross nothing.
		out[id] = t
	}
	return out, nil
}

// maxSettledRows bounds the rows read to find one stream's settled point.
const maxSettledRows = 1024

// refreshSettled reads the settled point of each stream in ids (below its
// first extent in slots) into prev: the CumBytes of its greatest catalog
// row, found by reading its rows back from there. A stream with more span
// refs standing than maxSettledRows counts from the start of the lowest
// one read, which under-counts its un-settled bytes by at most the rows
// below (a settle is overdue there anyway). Reads only, and only for the
// rare pass that makes a crossing.
func (a *Absorber) refreshSettled(ctx context.Context, slots []Slot, ids []string, prev map[string]StreamTotals) error {
	first := map[string]uint64{}
	for _, s := range slots {
		for _, x := range s.Extents {
			if _, ok := first[x.StreamID]; !ok {
				first[x.StreamID] = x.FirstSeq
			}
		}
	}
	for _, id := range ids {
		seq := first[id]
		if seq == 0 {
			continue // a new stream: nothing settled
		}
		settled, err := a.settledPoint(ctx, id, seq)
		if err != nil {
			return err
		}
		t := prev[id]
		t.Settled = max(t.Settled, settled)
		prev[id] = t
	}
	return nil
}

// settledPoint returns the cumulative bytes at stream id's settled point
// below seq (see refreshSettled).
func (a *Absorber) settledPoint(ctx context.Context, id string, seq uint64) (uint64, error) {
	q := meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefKey(id, seq-1).SK, Backward: true, Limit: 128}
	var low uint64
	for read := 0; read < maxSettledRows; {
		pg, err := a.Meta.Query(ctx, q)
		if err != nil {
			return 0, fmt.Errorf("absorb: rows of stream %s below %d: %w", id, seq, err)
		}
		for _, it := range pg.Items {
			read++
			var r meta.Ref
			if err := meta.Decode(it.Val, &r); err != nil {
				return 0, fmt.Errorf("absorb: row %s/%s: %w", it.PK, it.SK, err)
			}
			if r.Settled != nil {
				return r.CumBytes, nil
			}
			low = r.CumBytes
			if r.Span != nil {
				for _, sl := range r.Span.Slots {
					low -= min(low, sl.Length)
				}
			}
		}
		if pg.Next == "" {
			return 0, nil // never settled (or settled and trimmed away: nothing of it stands)
		}
		q.PageToken = pg.Next
	}
	return low, nil
}

// writeShards puts the shard rows of a marker's stream set: unconditional
// and idempotent, since every absorber of the pass computes the same ones
// from the marker's boundaries.
func (a *Absorber) writeShards(ctx context.Context, epoch, from uint64, shards [][]string) error {
	if len(shards) == 0 {
		return nil
	}
	items := make([]meta.Item, len(shards))
	for i, ids := range shards {
		k := meta.MarkerShardKey(a.Star, a.Class, epoch, from, i)
		items[i] = meta.Item{PK: k.PK, SK: k.SK, Val: meta.Encode(meta.MarkerShard{Streams: ids})}
	}
	if err := a.Meta.BatchPut(ctx, items); err != nil {
		return fmt.Errorf("absorb: put %d stream shards of marker %d/%d: %w", len(shards), epoch, from, err)
	}
	return nil
}

func (a *Absorber) writeRefs(ctx context.Context, epoch, from uint64, refs []RefWrite) error {
	g, gctx := errgroup.WithContext(ctx)
	n := a.Concurrency
	if n <= 0 {
		n = 16
	}
	g.SetLimit(n)
	for _, rw := range refs {
		g.Go(func() error { return a.writeRef(gctx, epoch, from, rw.StreamID, rw.Ref, 0) })
	}
	return g.Wait()
}

// maxSplits bounds how many longer refs one ref write splits in a chain
// (each sits on a later slot, so a pass of any size meets few).
const maxSplits = 64

// writeRef puts one span ref if absent. A row already at its key is the
// same ref (another absorber of the pass), a catalog row (a settle took
// the pass, which this absorber will find out at its checkpoint CAS), or
// a ref left by a version that wrote refs before markers and crashed: a
// shorter one makes the remainder go in at its end; a longer one is split
// at this ref's end, so later passes never nest refs inside it.
func (a *Absorber) writeRef(ctx context.Context, epoch, from uint64, streamID string, r meta.Ref, depth int) error {
	for range len(r.Span.Slots) + 2 {
		k := meta.RefKey(streamID, r.FirstSeq)
		ver, err := a.Meta.Put(ctx, k.PK, k.SK, meta.Encode(r), meta.IfAbsent())
		if err == nil {
			a.made(madeRef{epoch: epoch, from: from, streamID: streamID, first: r.FirstSeq, end: r.EndSeq, ver: ver})
			return nil
		}
		if !errors.Is(err, meta.ErrConditionFailed) {
			return fmt.Errorf("absorb: put ref %s %s: %w", streamID, k.SK, err)
		}
		it, err := a.Meta.Get(ctx, k.PK, k.SK)
		if errors.Is(err, meta.ErrNotFound) {
			// A row stood here and is gone: only a settle deletes span refs,
			// once a catalog row covers them. Putting it again would
			// resurrect it.
			return nil
		}
		if err != nil {
			return fmt.Errorf("absorb: read ref %s %s: %w", streamID, k.SK, err)
		}
		var have meta.Ref
		if err := meta.Decode(it.Val, &have); err != nil {
			return fmt.Errorf("absorb: ref %s %s: %w", streamID, k.SK, err)
		}
		switch {
		case have.EndSeq == r.EndSeq, have.EndSeq > r.EndSeq && have.Settled != nil:
			return nil
		case have.EndSeq > r.EndSeq:
			if depth >= maxSplits {
				return fmt.Errorf("absorb: stream %s: more than %d longer refs to split", streamID, maxSplits)
			}
			if err := a.split(ctx, epoch, from, streamID, it.Ver, have, r, depth); err != nil {
				return err
			}
			continue // the row at the key is ours now, or a racer's: read it again
		}
		rest, ok := r.Span.From(have.EndSeq)
		if !ok {
			return fmt.Errorf("absorb: stream %s: row at %d ends at %d, inside a slot extent of the pass", streamID, r.FirstSeq, have.EndSeq)
		}
		r.FirstSeq, r.Span = have.EndSeq, rest
	}
	return fmt.Errorf("absorb: stream %s: ref at %d did not settle on the rows", streamID, r.FirstSeq)
}

// split shrinks have, a longer span ref at r's key (at version ver), to r:
// the rest of have goes in at r's end first and the CAS second, so every
// seq stays covered in between (readers take the lower, longer row or the
// rest; both hold the same slots).
func (a *Absorber) split(ctx context.Context, epoch, from uint64, streamID string, ver int64, have, r meta.Ref, depth int) error {
	if have.Span == nil || have.Span.Star != r.Span.Star || have.Span.Class != r.Span.Class || have.Span.Epoch != r.Span.Epoch {
		return fmt.Errorf("absorb: stream %s: row at %d of another chain epoch reaches past %d", streamID, r.FirstSeq, r.EndSeq)
	}
	sp, ok := have.Span.From(r.EndSeq)
	if !ok {
		return fmt.Errorf("absorb: stream %s: ref at %d ending at %d has no slot ref at %d", streamID, have.FirstSeq, have.EndSeq, r.EndSeq)
	}
	rest := have
	rest.FirstSeq, rest.Span = r.EndSeq, sp
	// Timestamps never decrease: the records before r.EndSeq bound the rest's.
	rest.MinTimestamp = min(max(have.MinTimestamp, r.MaxTimestamp), have.MaxTimestamp)
	if err := a.writeRef(ctx, epoch, from, streamID, rest, depth+1); err != nil {
		return err
	}
	k := meta.RefKey(streamID, r.FirstSeq)
	_, err := a.Meta.Put(ctx, k.PK, k.SK, meta.Encode(r), meta.IfVer(ver))
	if err != nil && !errors.Is(err, meta.ErrConditionFailed) {
		return fmt.Errorf("absorb: split ref %s %s at %d: %w", streamID, k.SK, r.EndSeq, err)
	}
	return nil
}
