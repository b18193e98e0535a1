// Package absorb turns released flights into span refs: per pass, one
// batch marker, then one immutable metastore row per stream, then the
// epoch checkpoint by CAS. The live leader feeds it from its flight index
// and a chain settlement feeds it from a walk of slot footers, through the
// same Absorber, so the two paths cannot diverge. Metadata only: it never
// touches object storage.
//
// Two absorbers may meet on one epoch with their own pass sizes (a walk
// beside a live or paused leader). The marker, keyed by the pass's first
// slot and written first (IfAbsent), decides the pass's boundaries for all
// of them. Refs are written only after a checkpoint read, taken after the
// claim, finds the checkpoint at that slot; since a marker is deleted only
// once the checkpoint is past that slot, every absorber writing refs there
// holds the same marker, and the CAS moves the checkpoint only from that
// slot to the marker's end. So passes tile the slots, any two absorbers of
// a pass write the same refs, and a stream's rows never overlap.
//
// An absorber that lags behind a settle is guarded by checkpoint reads
// before and after its ref puts (guard.go); docs/write-path.md ("Absorb")
// gives the whole argument and what is left.
package absorb

import (
	"fmt"
	"hash/fnv"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// Slot is one released (or walked) slot: its number and its footer's
// extents, in footer order.
type Slot struct {
	Slot    uint64
	Extents []format.Extent
}

// Ripening decides when a pass's batch marker ripens (docs/design.md §10).
type Ripening struct {
	Trigger uint64        // un-settled bytes per stream that make a crossing (8 MiB)
	Linger  time.Duration // a crossing ripens at birth + Linger + jitter
	AgeCap  time.Duration // otherwise at birth + AgeCap
}

// Jitter is a deterministic share of up to half the linger for the marker
// keyed key, so markers (and the settle eras they make) born at one
// instant do not all ripen at one. It is drawn per marker, not per stream:
// a marker's streams settle in one era job whatever their own jitter, and
// the minimum over thousands of streams would be no jitter at all.
func (r Ripening) Jitter(key string) time.Duration {
	half := r.Linger / 2
	if half <= 0 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(key))
	return time.Duration(h.Sum64() % uint64(half))
}

// Crosses reports whether a pass that takes a stream's cumulative bytes to
// cum makes a crossing, given t, its totals before the pass: its
// un-settled bytes (cum - t.Settled) reach the trigger, and it has made no
// crossing since its settled point moved, or cum is a whole trigger past
// the last one (a hot stream crosses again while its crossing lingers).
func (r Ripening) Crosses(t StreamTotals, cum uint64) bool {
	if r.Trigger == 0 || cum < t.Settled+r.Trigger {
		return false
	}
	return t.Crossed <= t.Settled || cum >= t.Crossed+r.Trigger
}

// StreamTotals are the chained fields a stream's next ref continues from,
// and what the size trigger measures from.
type StreamTotals struct {
	CumBytes     uint64
	FencingToken string
	TrimPoint    uint64
	// Settled is the stream's cumulative bytes at its settled point (the
	// greatest catalog row's CumBytes) as last read; it only grows, so an
	// old value over-counts the un-settled bytes, and the absorber reads
	// it again before it counts a crossing.
	Settled uint64
	// Crossed is CumBytes after the last pass that made a crossing for the
	// stream (0: none since Settled).
	Crossed uint64
}

// RefWrite is one span ref a pass writes.
type RefWrite struct {
	StreamID string
	Ref      meta.Ref
}

// PassPlan is everything one pass writes, computed without I/O.
type PassPlan struct {
	Epoch   uint64
	From    uint64 // first slot of the pass
	End     uint64 // one past its last slot
	Refs    []RefWrite
	Marker  meta.Marker
	Totals  map[string]StreamTotals // each stream's totals after the pass
	Streams []string                // streams in first-seen order
	// Shards are the marker's stream set when it does not fit inline
	// (meta.ShardStreams), written as meta.MarkerShardKey rows.
	Shards [][]string
	// Crossed are the streams whose crossing made the marker linger.
	Crossed []string
}

// Plan groups the pass's slots into one span ref per stream, continuing
// each stream's chained totals from prev, and computes the pass's marker.
// Slots must be consecutive and of one epoch; extents of a stream must be
// contiguous in seq order across the pass (the flusher guarantees it).
func Plan(star string, class meta.Class, epoch uint64, slots []Slot, prev map[string]StreamTotals, rip Ripening, birth time.Time) (PassPlan, error) {
	if len(slots) == 0 {
		return PassPlan{}, fmt.Errorf("absorb: empty pass")
	}
	p := PassPlan{Epoch: epoch, From: slots[0].Slot, End: slots[len(slots)-1].Slot + 1, Totals: map[string]StreamTotals{}}
	refs := map[string]*meta.Ref{}
	var bytes uint64 // of the pass, for the marker
	for i, s := range slots {
		if s.Slot != p.From+uint64(i) {
			return PassPlan{}, fmt.Errorf("absorb: pass slots not consecutive: %d after %d", s.Slot, p.From+uint64(i)-1)
		}
		for _, x := range s.Extents {
			r, ok := refs[x.StreamID]
			if !ok {
				t := prev[x.StreamID]
				r = &meta.Ref{
					FirstSeq: x.FirstSeq, EndSeq: x.FirstSeq,
					CumBytes: t.CumBytes, FencingToken: t.FencingToken, TrimPoint: t.TrimPoint,
					MinTimestamp: x.MinTimestamp, MaxTimestamp: x.MaxTimestamp,
					Span: &meta.Span{Class: class, Star: star, Epoch: epoch},
				}
				refs[x.StreamID] = r
				p.Streams = append(p.Streams, x.StreamID)
			}
			if x.FirstSeq != r.EndSeq {
				return PassPlan{}, fmt.Errorf("absorb: stream %s: extent at seq %d in slot %d does not continue %d", x.StreamID, x.FirstSeq, s.Slot, r.EndSeq)
			}
			sl := r.Span.Slots
			if n := len(sl); n > 0 && sl[n-1].Slot == s.Slot && sl[n-1].Offset+sl[n-1].Length == x.Offset {
				sl[n-1].Count += uint64(x.Count)
				sl[n-1].Length += uint64(x.Length)
			} else {
				r.Span.Slots = append(sl, meta.SlotRef{Slot: s.Slot, FirstSeq: x.FirstSeq, Count: uint64(x.Count), Offset: x.Offset, Length: uint64(x.Length)})
			}
			r.EndSeq = x.EndSeq()
			r.CumBytes += uint64(x.Length)
			bytes += uint64(x.Length)
			r.MinTimestamp = min(r.MinTimestamp, x.MinTimestamp)
			r.MaxTimestamp = max(r.MaxTimestamp, x.MaxTimestamp)
			r.FencingToken = x.FencingToken
		}
	}
	ripen := birth.Add(rip.AgeCap)
	cause := "cap"
	for _, id := range p.Streams {
		r := refs[id]
		p.Refs = append(p.Refs, RefWrite{StreamID: id, Ref: *r})
		t := prev[id]
		next := StreamTotals{CumBytes: r.CumBytes, FencingToken: r.FencingToken, TrimPoint: r.TrimPoint, Settled: t.Settled, Crossed: t.Crossed}
		if rip.Crosses(t, r.CumBytes) {
			next.Crossed = r.CumBytes
			p.Crossed = append(p.Crossed, id)
		}
		p.Totals[id] = next
	}
	if len(p.Crossed) > 0 {
		mk := meta.MarkerKey(star, class, epoch, p.From)
		ripen, cause = birth.Add(rip.Linger+rip.Jitter(mk.PK+"/"+mk.SK)), "linger"
	}
	streams := slices.Clone(p.Streams)
	slices.Sort(streams)
	p.Marker = meta.Marker{
		Epoch: epoch, FromSlot: p.From, EndSlot: p.End,
		Birth: birth.UnixMilli(), Ripen: ripen.UnixMilli(), Cause: cause, Streams: streams, Bytes: bytes,
	}
	if p.Shards = meta.ShardStreams(streams); p.Shards != nil {
		p.Marker.Streams, p.Marker.Shards = []string{meta.MarkerShardedStream}, len(p.Shards)
	}
	return p, nil
}
