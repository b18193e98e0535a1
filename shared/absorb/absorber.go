package absorb

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/starlog/starlog/shared/meta"
)

// ErrNeedMore means an earlier run of this pass (one that crashed before its
// checkpoint CAS) recorded a marker reaching past the slots given: the pass
// waits for more slots so a re-run writes the very same rows.
var ErrNeedMore = errors.New("absorb: pass needs more slots to match its recorded marker")

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
// epoch's checkpoint) and returns how many it consumed: all of them, or
// fewer when a marker recorded by an earlier run of this pass ends sooner.
// Steps: span refs (idempotent conditional puts), the batch marker, then
// the checkpoint CAS. A crash at any step followed by a re-run converges.
func (a *Absorber) Pass(ctx context.Context, epoch uint64, slots []Slot) (int, error) {
	if len(slots) == 0 {
		return 0, nil
	}
	from := slots[0].Slot
	mk := meta.MarkerKey(a.Star, a.Class, epoch, from)
	if it, err := a.Meta.Get(ctx, mk.PK, mk.SK); err == nil {
		var m meta.Marker
		if err := meta.Decode(it.Val, &m); err != nil {
			return 0, err
		}
		n := int(m.EndSlot - from)
		if n > len(slots) {
			return 0, ErrNeedMore
		}
		slots = slots[:n]
	} else if !errors.Is(err, meta.ErrNotFound) {
		return 0, fmt.Errorf("absorb: read marker %s: %w", mk.SK, err)
	}

	prev, err := a.prevTotals(ctx, slots)
	if err != nil {
		return 0, err
	}
	now := time.Now
	if a.Now != nil {
		now = a.Now
	}
	p, err := Plan(a.Star, a.Class, epoch, slots, prev, a.Rip, now())
	if err != nil {
		return 0, err
	}
	if err := a.writeRefs(ctx, p.Refs); err != nil {
		return 0, err
	}
	if err := a.writeMarker(ctx, mk, p.Marker); err != nil {
		return 0, err
	}
	var gap error
	_, err = a.UpdateEpoch(ctx, epoch, func(e *meta.Epoch) bool {
		switch {
		case e.Checkpoint >= p.End:
			return false // a concurrent run got there
		case e.Checkpoint < p.From:
			gap = fmt.Errorf("absorb: epoch %d checkpoint %d is below pass start %d", epoch, e.Checkpoint, p.From)
			return false
		}
		e.Checkpoint = p.End
		return true
	})
	if err != nil {
		return 0, fmt.Errorf("absorb: checkpoint epoch %d to %d: %w", epoch, p.End, err)
	}
	if gap != nil {
		return 0, gap
	}
	a.mu.Lock()
	if a.totals == nil {
		a.totals = map[string]StreamTotals{}
	}
	for id, t := range p.Totals {
		a.totals[id] = t
	}
	a.mu.Unlock()
	return len(slots), nil
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
		out[id] = StreamTotals{CumBytes: r.CumBytes, FencingToken: r.FencingToken, TrimPoint: r.TrimPoint}
	}
	return out, nil
}

func (a *Absorber) writeRefs(ctx context.Context, refs []RefWrite) error {
	g, gctx := errgroup.WithContext(ctx)
	n := a.Concurrency
	if n <= 0 {
		n = 16
	}
	g.SetLimit(n)
	for _, rw := range refs {
		g.Go(func() error { return a.writeRef(gctx, rw.StreamID, rw.Ref) })
	}
	return g.Wait()
}

// writeRef puts one span ref if absent. A row already at its key is the same
// ref from an earlier run, a row that covers more (a catalog row, or an
// earlier run with a longer pass), or a shorter ref from an earlier run with
// other pass boundaries: then the remainder goes in at that row's end.
func (a *Absorber) writeRef(ctx context.Context, streamID string, r meta.Ref) error {
	for {
		k := meta.RefKey(streamID, r.FirstSeq)
		_, err := a.Meta.Put(ctx, k.PK, k.SK, meta.Encode(r), meta.IfAbsent())
		if err == nil {
			return nil
		}
		if !errors.Is(err, meta.ErrConditionFailed) {
			return fmt.Errorf("absorb: put ref %s %s: %w", streamID, k.SK, err)
		}
		it, err := a.Meta.Get(ctx, k.PK, k.SK)
		if err != nil {
			return fmt.Errorf("absorb: read ref %s %s: %w", streamID, k.SK, err)
		}
		var have meta.Ref
		if err := meta.Decode(it.Val, &have); err != nil {
			return err
		}
		if have.EndSeq >= r.EndSeq {
			return nil
		}
		rest, ok := r.Span.From(have.EndSeq)
		if !ok {
			return fmt.Errorf("absorb: stream %s: row at %d ends at %d, inside a slot extent of the pass", streamID, r.FirstSeq, have.EndSeq)
		}
		r.FirstSeq, r.Span = have.EndSeq, rest
	}
}

func (a *Absorber) writeMarker(ctx context.Context, k meta.Key, m meta.Marker) error {
	_, err := a.Meta.Put(ctx, k.PK, k.SK, meta.Encode(m), meta.IfAbsent())
	if err == nil || errors.Is(err, meta.ErrConditionFailed) {
		return nil // a re-run: the marker recorded first stands
	}
	return fmt.Errorf("absorb: put marker %s: %w", k.SK, err)
}
