package loglet

import (
	"fmt"
	"sort"
	"sync"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/format"
)

// Index is the flight index: released flights not yet absorbed, in release
// order. Each holds its rendered bundle (one copy of its bytes, the copy
// the pool budget charged for), and each stream's extents are indexed in
// seq order, so reads of the tail window (released but not yet
// ref-covered) decode straight from memory.
type Index struct {
	mu       sync.Mutex
	flights  []*flight
	byStream map[string][]extentRef
	wake     chan struct{} // closed and replaced on every Add
}

// extentRef is one stream's extent in one held flight.
type extentRef struct {
	f *flight
	x format.Extent
}

// NewIndex returns an empty flight index.
func NewIndex() *Index {
	return &Index{byStream: map[string][]extentRef{}, wake: make(chan struct{})}
}

// Add appends a released flight.
func (x *Index) Add(f *flight) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.flights = append(x.flights, f)
	for _, e := range f.extents {
		x.byStream[e.StreamID] = append(x.byStream[e.StreamID], extentRef{f, e})
	}
	close(x.wake)
	x.wake = make(chan struct{})
}

// Released returns a channel closed at the next release: tailing readers
// wait on it.
func (x *Index) Released() <-chan struct{} {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.wake
}

// Pending returns up to max consecutive unabsorbed slots of the oldest
// epoch in the index, as the absorb consumes them.
func (x *Index) Pending(max int) (uint64, []absorb.Slot) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.flights) == 0 {
		return 0, nil
	}
	epoch := x.flights[0].epoch
	var out []absorb.Slot
	for _, f := range x.flights {
		if f.epoch != epoch || len(out) == max {
			break
		}
		out = append(out, absorb.Slot{Slot: f.slot, Extents: f.extents})
	}
	return epoch, out
}

// Absorbed drops the n oldest flights (now covered by span refs) and
// returns the bundle bytes they stood for. Nothing keeps a dropped flight
// reachable: its slots in the per-stream queues are cleared before the
// queues are resliced, and a queue's backing array is reallocated once
// most of it lies before its head.
func (x *Index) Absorbed(n int) (bundleBytes int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, f := range x.flights[:n] {
		bundleBytes += f.bodyLen
		for _, e := range f.extents {
			q := x.byStream[e.StreamID]
			i := 0
			for i < len(q) && q[i].f == f {
				q[i] = extentRef{}
				i++
			}
			switch q = q[i:]; {
			case len(q) == 0:
				delete(x.byStream, e.StreamID)
			case cap(q) > 2*len(q)+8:
				x.byStream[e.StreamID] = append([]extentRef(nil), q...)
			default:
				x.byStream[e.StreamID] = q
			}
		}
	}
	clear(x.flights[:n])
	x.flights = append(x.flights[:0:0], x.flights[n:]...)
	return bundleBytes
}

// Read returns up to limit records of a stream with seq ≥ from held in the
// index, in seq order, and the first seq the index holds for the stream
// (reads below it go to the refs). The records alias the held bundles,
// which never change.
func (x *Index) Read(streamID string, from uint64, limit int) (recs []format.Record, first uint64, ok bool) {
	x.mu.Lock()
	q := x.byStream[streamID]
	if len(q) == 0 {
		x.mu.Unlock()
		return nil, 0, false
	}
	first = q[0].x.FirstSeq
	i := sort.Search(len(q), func(i int) bool { return q[i].x.EndSeq() > from })
	var todo []extentRef
	for n := 0; i < len(q) && n < limit; i++ {
		todo = append(todo, q[i])
		n += int(q[i].x.EndSeq() - max(from, q[i].x.FirstSeq)) // records ≥ from only
	}
	x.mu.Unlock()
	for _, r := range todo {
		got, err := format.DecodeBlocks(r.f.body[r.x.Offset : r.x.Offset+uint64(r.x.Length)])
		if err != nil {
			// We rendered these bytes ourselves: a decode failure is memory
			// corruption or a bug, never input to tolerate.
			panic(fmt.Sprintf("loglet: flight index: decode own bundle slot %d: %v", r.f.slot, err))
		}
		for _, rec := range got {
			if rec.SeqNum >= from && len(recs) < limit {
				recs = append(recs, rec)
			}
		}
	}
	return recs, first, true
}

// Len is the number of flights held.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.flights)
}

// Oldest is when the oldest held flight was cut (backlog age).
func (x *Index) oldestStart() (t int64, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.flights) == 0 {
		return 0, false
	}
	return x.flights[0].started.UnixNano(), true
}
