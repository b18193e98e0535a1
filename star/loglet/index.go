package loglet

import (
	"sort"
	"sync"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/format"
)

// Index is the flight index: released flights not yet absorbed, in release
// order, with each stream's batches in seq order so reads of the tail
// window (released but not yet ref-covered) are served from memory.
type Index struct {
	mu       sync.Mutex
	flights  []*flight
	byStream map[string][]*Batch
	wake     chan struct{} // closed and replaced on every Add
}

// NewIndex returns an empty flight index.
func NewIndex() *Index {
	return &Index{byStream: map[string][]*Batch{}, wake: make(chan struct{})}
}

// Add appends a released flight.
func (x *Index) Add(f *flight) {
	x.mu.Lock()
	defer x.mu.Unlock()
	x.flights = append(x.flights, f)
	for _, b := range f.batches {
		x.byStream[b.StreamID] = append(x.byStream[b.StreamID], b)
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
// returns the bundle bytes they stood for and the pool bytes they held.
func (x *Index) Absorbed(n int) (bundleBytes, poolBytes int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for _, f := range x.flights[:n] {
		bundleBytes += f.bodyLen
		poolBytes += f.bytes
		for _, b := range f.batches {
			q := x.byStream[b.StreamID]
			if len(q) > 0 && q[0] == b {
				q = q[1:]
			}
			if len(q) == 0 {
				delete(x.byStream, b.StreamID)
			} else {
				x.byStream[b.StreamID] = q
			}
		}
	}
	x.flights = append(x.flights[:0:0], x.flights[n:]...)
	return bundleBytes, poolBytes
}

// Read returns up to max records of a stream with seq ≥ from held in the
// index, in seq order, and the first seq the index holds for the stream
// (reads below it go to the refs).
func (x *Index) Read(streamID string, from uint64, max int) (recs []format.Record, first uint64, ok bool) {
	x.mu.Lock()
	defer x.mu.Unlock()
	q := x.byStream[streamID]
	if len(q) == 0 {
		return nil, 0, false
	}
	i := sort.Search(len(q), func(i int) bool { return q[i].Seq.End.SeqNum > from })
	for ; i < len(q) && len(recs) < max; i++ {
		for _, r := range q[i].Seq.Records {
			if r.SeqNum >= from && len(recs) < max {
				recs = append(recs, r)
			}
		}
	}
	return recs, q[0].Seq.Start.SeqNum, true
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
