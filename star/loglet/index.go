package loglet

import (
	"fmt"
	"sort"
	"sync"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/reader"
)

// Index is the flight index: released flights not yet absorbed, in release
// order, each stream's extents indexed in seq order, so reads of the tail
// window (released but not yet ref-covered) find them without the rows.
//
// Only the most recent rendered bundles stay in memory, up to the cache
// bound (Config.IndexCacheBytes): a tailing reader reads a flight moments
// after its release, from memory. An older flight's bundle is let go (its
// extents stay indexed) and its records are read from its slot object, as
// an absorbed span ref's are: every flight here is released, so durable at
// W of K. The backlog budget therefore bounds a successor's takeover walk,
// not the star's memory.
type Index struct {
	star       string
	class      meta.Class
	cacheBytes int64 // < 0: hold no bundle
	m          *Metrics

	mu       sync.Mutex
	flights  []*flight
	held     int   // flights[held:] hold their bundles; older ones were evicted
	heldSize int64 // the bytes of those bundles
	byStream map[string][]extentRef
	wake     chan struct{} // closed and replaced on every Add
}

// extentRef is one stream's extent in one indexed flight: f.extents[i].
// (An index, not a copy: with thousands of streams the refs are the bulk
// of what an evicted flight still costs.)
type extentRef struct {
	f *flight
	i int
}

func (r extentRef) x() *format.Extent { return &r.f.extents[r.i] }

// newIndex returns an empty flight index of chain star/class keeping at
// most cacheBytes of bundles in memory (negative: none). m may be nil.
func newIndex(star string, class meta.Class, cacheBytes int64, m *Metrics) *Index {
	return &Index{star: star, class: class, cacheBytes: cacheBytes, m: m, byStream: map[string][]extentRef{}, wake: make(chan struct{})}
}

// Add appends a released flight, holding its bundle, and lets go of the
// oldest held bundles beyond the cache bound.
func (x *Index) Add(f *flight) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if f.span == nil {
		f.span = &meta.Span{Star: x.star, Class: x.class, Epoch: f.epoch}
	}
	x.flights = append(x.flights, f)
	x.heldSize += int64(len(f.body))
	for i := range f.extents {
		id := f.extents[i].StreamID
		q := x.byStream[id]
		if len(q) > 0 {
			// One copy of the stream's id for all its extents: the
			// footer decode allocated one per flight.
			f.extents[i].StreamID = q[0].x().StreamID
		}
		x.byStream[id] = append(q, extentRef{f, i})
	}
	x.evict()
	close(x.wake)
	x.wake = make(chan struct{})
}

// evict lets go of the oldest held bundles until the held ones fit the
// cache bound (mu held).
func (x *Index) evict() {
	for x.held < len(x.flights) && x.heldSize > max(x.cacheBytes, 0) {
		f := x.flights[x.held]
		x.heldSize -= int64(len(f.body))
		f.body = nil
		x.held++
		if x.m != nil {
			x.m.indexEvictions.Inc()
		}
	}
	if x.m != nil {
		x.m.indexBytes.Set(float64(x.heldSize))
	}
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
	for k, f := range x.flights[:n] {
		bundleBytes += f.bodyLen
		if k >= x.held {
			x.heldSize -= int64(len(f.body))
		}
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
	x.held = max(x.held-n, 0)
	clear(x.flights[:n])
	x.flights = append(x.flights[:0:0], x.flights[n:]...)
	if x.m != nil {
		x.m.indexBytes.Set(float64(x.heldSize))
	}
	return bundleBytes
}

// Read returns the stream's extents in the index holding seqs ≥ from, in
// seq order, until they hold limit such records, and the first seq the
// index holds for the stream (reads below it go to the refs). An extent of
// a held bundle carries its records from `from` on (aliasing the bundle,
// which never changes); one of an evicted bundle names its slot object and
// bucket set, for the reader to fetch.
func (x *Index) Read(streamID string, from uint64, limit int) (xs []reader.TailExtent, first uint64, ok bool) {
	type todo struct {
		x    format.Extent
		f    *flight
		body []byte // nil: evicted
	}
	x.mu.Lock()
	q := x.byStream[streamID]
	if len(q) == 0 {
		x.mu.Unlock()
		return nil, 0, false
	}
	first = q[0].x().FirstSeq
	i := sort.Search(len(q), func(i int) bool { return q[i].x().EndSeq() > from })
	var ts []todo
	for n := 0; i < len(q) && n < limit; i++ {
		e := *q[i].x()
		ts = append(ts, todo{e, q[i].f, q[i].f.body})
		n += int(e.EndSeq() - max(from, e.FirstSeq)) // records ≥ from only
	}
	x.mu.Unlock()
	xs = make([]reader.TailExtent, 0, len(ts))
	for _, t := range ts {
		if t.body == nil {
			xs = append(xs, reader.TailExtent{Span: t.f.span, Buckets: t.f.buckets, Slot: meta.SlotRef{
				Slot: t.f.slot, FirstSeq: t.x.FirstSeq, Count: uint64(t.x.Count), Offset: t.x.Offset, Length: uint64(t.x.Length)}})
			continue
		}
		got, err := format.DecodeBlocks(t.body[t.x.Offset : t.x.Offset+uint64(t.x.Length)])
		if err != nil {
			// We rendered these bytes ourselves: a decode failure is memory
			// corruption or a bug, never input to tolerate.
			panic(fmt.Sprintf("loglet: flight index: decode own bundle slot %d: %v", t.f.slot, err))
		}
		k := sort.Search(len(got), func(k int) bool { return got[k].SeqNum >= from })
		xs = append(xs, reader.TailExtent{Records: got[k:]})
	}
	return xs, first, true
}

// Holds reports whether the index holds an extent of the stream.
func (x *Index) Holds(streamID string) bool {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.byStream[streamID]) > 0
}

// Len is the number of flights held.
func (x *Index) Len() int {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.flights)
}

// Cached is the number of flights whose bundles are in memory and their
// bytes.
func (x *Index) Cached() (flights int, bytes int64) {
	x.mu.Lock()
	defer x.mu.Unlock()
	return len(x.flights) - x.held, x.heldSize
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
