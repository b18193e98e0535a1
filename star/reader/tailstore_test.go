package reader

import (
	"sync"
	"testing"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// slotTail is a tail window over released flights as the flight index
// keeps them: the slots below held are evicted (named by slot object),
// the rest carry their records. Each Read first runs before (once), to
// stage a race.
type slotTail struct {
	mu      sync.Mutex
	epoch   uint64
	buckets []string
	slots   []absorb.Slot
	held    int // slots[held:] hold their records
	truth   []format.Record
	// before runs before the first Read answers; afterFirst flights are
	// dropped (absorbed) once it answered.
	before     func()
	afterFirst int
	reads      int
}

func (t *slotTail) Read(streamID string, from uint64, limit int) ([]TailExtent, uint64, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.reads++; t.reads == 1 && t.before != nil {
		t.before()
	}
	if t.reads == 2 && t.afterFirst > 0 {
		t.slots, t.held = t.slots[t.afterFirst:], max(t.held-t.afterFirst, 0)
	}
	var xs []TailExtent
	first, ok, n := uint64(0), false, 0
	for i, s := range t.slots {
		for _, e := range s.Extents {
			if e.StreamID != streamID {
				continue
			}
			if !ok {
				first, ok = e.FirstSeq, true
			}
			if e.EndSeq() <= from || n >= limit {
				continue
			}
			n += int(e.EndSeq() - maxU(from, e.FirstSeq))
			if i >= t.held {
				xs = append(xs, TailExtent{Records: t.truth[maxU(from, e.FirstSeq):e.EndSeq()]})
				continue
			}
			xs = append(xs, TailExtent{Span: &meta.Span{Star: testStar, Class: meta.Express, Epoch: t.epoch}, Buckets: t.buckets,
				Slot: meta.SlotRef{Slot: s.Slot, FirstSeq: e.FirstSeq, Count: uint64(e.Count), Offset: e.Offset, Length: uint64(e.Length)}})
		}
	}
	return xs, first, ok
}

func maxU(a, b uint64) uint64 { return max(a, b) }

// expressTail writes six Express flights of s1 (4 records each, s2
// between), all released and none absorbed, and returns the window with
// the first four evicted.
func expressTail(f *fixture) *slotTail {
	f.epoch(meta.Express, 1, expressBuckets...)
	t := &slotTail{epoch: 1, buckets: expressBuckets, held: 4}
	for range 6 {
		t.slots = append(t.slots, f.flight(meta.Express, 1, expressBuckets, f.batch("s2", 1), f.batch("s1", 4)))
	}
	t.truth = f.truth["s1"]
	return t
}

// A read through a window whose oldest flights are evicted reads those
// from their slot objects (one ranged GET each) and the held ones from
// memory, contiguously, within the read's limits; a read starting inside
// an evicted extent gets the records from its start on.
func TestTailReadsEvictedFlightsFromTheStore(t *testing.T) {
	f := newFixture(t)
	w := expressTail(f)
	r := f.reader(Config{})
	tail := &Tail{Window: w, End: 24}
	res := f.read(r, "s1", AtSeq(0), Limits{Count: 10}, tail)
	f.want("s1", res.Records, 0, 10)
	if res.Stop != StopCount {
		t.Fatalf("stop %s, want count", res.Stop)
	}
	res = f.read(r, "s1", AtSeq(10), Limits{}, tail)
	f.want("s1", res.Records, 10, 24)
	if res.Stop != StopCaughtUp {
		t.Fatalf("stop %s, want caught-up", res.Stop)
	}
	// Slots 0–3 evicted: one GET each (slot 2 was read twice, from the
	// cache the second time); slots 4 and 5 from memory.
	if got := f.counter("starlog_reader_object_gets_total", "kind", "extent"); got != 4 {
		t.Fatalf("extent GETs %v, want 4", got)
	}
	if got := f.counter("starlog_reader_tail_store_extents_total"); got != 5 {
		t.Fatalf("tail extents read through the store %v, want 5", got)
	}
	// No metastore: the window names the bucket set, and the read found
	// everything in it.
	if got := f.counter("starlog_reader_meta_queries_total"); got != 0 {
		t.Fatalf("%v metastore queries", got)
	}
}

// An evicted flight's copy that is missing in one bucket and damaged in
// another is read from the third.
func TestTailReadFallsBackPastBadCopies(t *testing.T) {
	f := newFixture(t)
	w := expressTail(f)
	key := chain.SlotKey(testStar, meta.Express, 1, 1)
	if err := f.mem.Bucket(expressBuckets[0]).Delete(f.ctx, key); err != nil {
		t.Fatal(err)
	}
	b, err := f.mem.Bucket(expressBuckets[1]).Get(f.ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	b = append([]byte(nil), b...)
	x := w.slots[1].Extents[1] // s1's extent
	b[x.Offset+uint64(x.Length)-2] ^= 0xff
	if err := f.mem.Bucket(expressBuckets[1]).Delete(f.ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := f.mem.Bucket(expressBuckets[1]).PutIfAbsent(f.ctx, key, b); err != nil {
		t.Fatal(err)
	}
	r := f.reader(Config{})
	res := f.read(r, "s1", AtSeq(0), Limits{}, &Tail{Window: w, End: 24})
	f.want("s1", res.Records, 0, 24)
	if got := f.objs.count(expressBuckets[2]); got != 1 {
		t.Fatalf("%d GETs of %s, want the one slot the others could not serve", got, expressBuckets[2])
	}
}

// An evicted flight whose slot is gone from every bucket when read (the
// absorb, a settle and a trim moved it since the window named it) sends
// the read to the rows, which have it now.
func TestTailReadOfAGoneSlotFallsToTheRows(t *testing.T) {
	f := newFixture(t)
	w := expressTail(f)
	w.before = func() {
		// The window answers this Read stale; meanwhile the first four
		// flights were absorbed and settled into one object, and their
		// slots trimmed. Later Reads no longer name them.
		f.putRef("s1", f.settled("s1", 1, 0, 16, 4, 0))
		for s := range uint64(4) {
			for _, b := range expressBuckets {
				if err := f.mem.Bucket(b).Delete(f.ctx, chain.SlotKey(testStar, meta.Express, 1, s)); err != nil {
					t.Error(err)
				}
			}
		}
	}
	w.afterFirst = 4
	r := f.reader(Config{})
	res := f.read(r, "s1", AtSeq(0), Limits{}, &Tail{Window: w, End: 24})
	f.want("s1", res.Records, 0, 24)
	if got := f.counter("starlog_reader_object_gets_total", "kind", "settled"); got == 0 {
		t.Fatal("the settled records were not read from the catalog row")
	}
}
