package reader

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/poll"
)

// spans builds stream s1 (35 records) over five slots of standard epoch 1,
// interleaved with s2, in three absorb passes:
//
//	pass 1, ref [0,15):  slot 0 = s1 0-4, s2, s1 5-8 (two slot refs); slot 1 = s1 9-14
//	pass 2, ref [15,25): slot 2 = s1 15-21, s1 22-24 (adjacent: one slot ref, two blocks)
//	pass 3, ref [25,35): slot 3 = s2 only; slot 4 = s1 25-34
func spans(f *fixture) {
	f.epoch(meta.Standard, 1, stdBucket)
	set := []string{stdBucket}
	s0 := f.flight(meta.Standard, 1, set, f.batch("s1", 5), f.batch("s2", 3), f.batch("s1", 4))
	s1 := f.flight(meta.Standard, 1, set, f.batch("s1", 6))
	f.absorb(meta.Standard, 1, s0, s1)
	s2 := f.flight(meta.Standard, 1, set, f.batch("s1", 7), f.batch("s1", 3))
	f.absorb(meta.Standard, 1, s2)
	s3 := f.flight(meta.Standard, 1, set, f.batch("s2", 4))
	s4 := f.flight(meta.Standard, 1, set, f.batch("s1", 10))
	f.absorb(meta.Standard, 1, s3, s4)
}

func TestReadSpanRefsFromZero(t *testing.T) {
	f := newFixture(t)
	spans(f)
	r := f.reader(Config{})
	res := f.read(r, "s1", AtSeq(0), Limits{}, nil)
	f.want("s1", res.Records, 0, 35)
	if res.Stop != StopFrontier || res.Next != 35 || res.Start != 0 {
		t.Fatalf("stop %s next %d start %d, want frontier 35 0", res.Stop, res.Next, res.Start)
	}
	res = f.read(r, "s2", AtSeq(0), Limits{}, nil)
	f.want("s2", res.Records, 0, 7)

	// Chained small reads return the same records, each stopping on count.
	var all []format.Record
	next := uint64(0)
	for next < 35 {
		res := f.read(r, "s1", AtSeq(next), Limits{Count: 4}, nil)
		if len(res.Records) == 0 {
			t.Fatalf("no progress at %d: %s", next, res.Stop)
		}
		if res.Start != next || (res.Next < 35 && res.Stop != StopCount) {
			t.Fatalf("read at %d: start %d stop %s", next, res.Start, res.Stop)
		}
		all = append(all, res.Records...)
		next = res.Next
	}
	f.want("s1", all, 0, 35)
}

func TestReadStartsMidExtent(t *testing.T) {
	f := newFixture(t)
	spans(f)
	r := f.reader(Config{})
	for _, from := range []uint64{1, 5, 7, 9, 14, 15, 17, 22, 23, 34} {
		res := f.read(r, "s1", AtSeq(from), Limits{Count: 6}, nil)
		f.want("s1", res.Records, from, min(from+6, 35))
	}
	res := f.read(r, "s1", AtSeq(35), Limits{}, nil)
	if len(res.Records) != 0 || res.Stop != StopFrontier || res.Next != 35 {
		t.Fatalf("at the frontier: %d records, stop %s, next %d", len(res.Records), res.Stop, res.Next)
	}
	res = f.read(r, "s1", AtSeq(1000), Limits{}, nil)
	if len(res.Records) != 0 || res.Stop != StopFrontier {
		t.Fatalf("past the frontier: %d records, stop %s", len(res.Records), res.Stop)
	}
}

func TestReadLimits(t *testing.T) {
	f := newFixture(t)
	spans(f)
	r := f.reader(Config{})
	truth := f.truth["s1"]

	// Bytes: the greatest prefix whose metered size fits.
	for _, limit := range []int{1, 47, 200, 333, 1000} {
		want, sum := 0, 0
		for i := 3; i < len(truth) && sum+truth[i].MeteredSize() <= limit; i++ {
			sum += truth[i].MeteredSize()
			want++
		}
		res := f.read(r, "s1", AtSeq(3), Limits{Bytes: limit}, nil)
		f.want("s1", res.Records, 3, 3+uint64(want))
		if res.Bytes != sum || res.Stop != StopBytes {
			t.Fatalf("bytes %d: got %d bytes, stop %s; want %d, bytes", limit, res.Bytes, res.Stop, sum)
		}
	}

	// Until: exclusive; timestamps repeat, so it stops at the first record
	// of the run holding seq 20.
	until := truth[20].Timestamp
	res := f.read(r, "s1", AtSeq(2), Limits{Until: &until}, nil)
	f.want("s1", res.Records, 2, 18)
	if res.Stop != StopUntil || res.Next != 18 {
		t.Fatalf("until: stop %s next %d", res.Stop, res.Next)
	}
	// A row entirely at or past until stops without reading it.
	until = truth[25].Timestamp
	before := f.objs.total()
	res = f.read(r, "s1", AtSeq(26), Limits{Until: &until}, nil)
	if len(res.Records) != 0 || res.Stop != StopUntil || f.objs.total() != before {
		t.Fatalf("until below the row: %d records, stop %s, %d GETs", len(res.Records), res.Stop, f.objs.total()-before)
	}

	// Count and bytes together: whichever binds first.
	res = f.read(r, "s1", AtSeq(0), Limits{Count: 10, Bytes: 1 << 20}, nil)
	f.want("s1", res.Records, 0, 10)
	if res.Stop != StopCount {
		t.Fatalf("count: stop %s", res.Stop)
	}

	// The reader's batch caps bound a read without caller limits.
	rb := f.reader(Config{MaxBatchCount: 8, Registerer: noReg()})
	res = f.read(rb, "s1", AtSeq(0), Limits{}, nil)
	f.want("s1", res.Records, 0, 8)
	if res.Stop != StopBatch {
		t.Fatalf("batch: stop %s", res.Stop)
	}
	res = f.read(rb, "s1", AtSeq(0), Limits{Count: 100}, nil)
	if len(res.Records) != 8 || res.Stop != StopBatch {
		t.Fatalf("caller count above the batch cap: %d records, stop %s", len(res.Records), res.Stop)
	}
}

func TestReadTimestampStart(t *testing.T) {
	f := newFixture(t)
	spans(f)
	r := f.reader(Config{})
	truth := f.truth["s1"]
	first := func(ts uint64) uint64 {
		for _, rec := range truth {
			if rec.Timestamp >= ts {
				return rec.SeqNum
			}
		}
		return uint64(len(truth))
	}
	for _, ts := range []uint64{0, tsBase, truth[20].Timestamp, truth[20].Timestamp - 5, truth[20].Timestamp + 1, truth[34].Timestamp} {
		res := f.read(r, "s1", AtTimestamp(ts), Limits{Count: 5}, nil)
		from := first(ts)
		f.want("s1", res.Records, from, min(from+5, 35))
		if res.Start != from {
			t.Fatalf("ts %d: start %d, want %d", ts, res.Start, from)
		}
	}
	res := f.read(r, "s1", AtTimestamp(truth[34].Timestamp+1), Limits{}, nil)
	if len(res.Records) != 0 || res.Stop != StopFrontier || res.Next != 35 {
		t.Fatalf("past the last timestamp: %d records, stop %s, next %d", len(res.Records), res.Stop, res.Next)
	}
	// Rows below the time are skipped without a GET.
	rc := f.reader(Config{Registerer: noReg()})
	before := f.objs.total()
	f.read(rc, "s1", AtTimestamp(truth[30].Timestamp), Limits{Count: 1}, nil)
	if got := f.objs.total() - before; got != 1 {
		t.Fatalf("timestamp start in the last row: %d GETs, want 1", got)
	}
}

// catalogSpanTail builds stream c1: [0,60) in a settled object with its
// catalog row, [60,80) in span refs of express epoch 2, [80,95) only in
// the tail window.
func catalogSpanTail(f *fixture) *Tail {
	f.epoch(meta.Express, 2, expressBuckets...)
	f.recs("c1", 60)
	f.putRef("c1", f.settled("c1", 1, 0, 60, 4, 0))
	a := f.flight(meta.Express, 2, expressBuckets, f.batch("c1", 8), f.batch("c1", 4))
	b := f.flight(meta.Express, 2, expressBuckets, f.batch("c1", 8))
	f.absorb(meta.Express, 2, a)
	f.absorb(meta.Express, 2, b)
	f.recs("c1", 15)
	return f.tail("c1", 80)
}

func TestReadCatalogSpanTail(t *testing.T) {
	f := newFixture(t)
	tail := catalogSpanTail(f)
	// Small chunks: the settled object is read in several ranged GETs.
	r := f.reader(Config{SettledChunkBytes: 300})
	res := f.read(r, "c1", AtSeq(0), Limits{}, tail)
	f.want("c1", res.Records, 0, 95)
	if res.Stop != StopCaughtUp || res.Next != 95 {
		t.Fatalf("stop %s next %d", res.Stop, res.Next)
	}
	for _, from := range []uint64{1, 13, 30, 59, 60, 71, 80, 90, 94} {
		res := f.read(r, "c1", AtSeq(from), Limits{Count: 12}, tail)
		f.want("c1", res.Records, from, min(from+12, 95))
	}
	// Without the tail window the read stops at the ref-covered frontier.
	res = f.read(r, "c1", AtSeq(50), Limits{}, nil)
	f.want("c1", res.Records, 50, 80)
	if res.Stop != StopFrontier {
		t.Fatalf("no tail: stop %s", res.Stop)
	}
	// At the tail: nothing, caught up.
	res = f.read(r, "c1", AtSeq(95), Limits{}, tail)
	if len(res.Records) != 0 || res.Stop != StopCaughtUp {
		t.Fatalf("at the tail: %d records, stop %s", len(res.Records), res.Stop)
	}
	// Timestamp starts land in each of the three sources.
	truth := f.truth["c1"]
	for _, seq := range []int{0, 7, 31, 61, 77, 83, 94} {
		ts := truth[seq].Timestamp
		from := uint64(seq)
		for from > 0 && truth[from-1].Timestamp >= ts {
			from--
		}
		res := f.read(r, "c1", AtTimestamp(ts), Limits{Count: 3}, tail)
		f.want("c1", res.Records, from, min(from+3, 95))
	}
	// Until inside the settled object stops before the next chunk.
	until := truth[20].Timestamp
	res = f.read(r, "c1", AtSeq(0), Limits{Until: &until}, tail)
	f.want("c1", res.Records, 0, 18)
	if res.Stop != StopUntil {
		t.Fatalf("until: stop %s", res.Stop)
	}
	// Tail offsets resolve against the tail, or the frontier without one.
	res = f.read(r, "c1", AtTailOffset(5), Limits{}, tail)
	f.want("c1", res.Records, 90, 95)
	res = f.read(r, "c1", AtTailOffset(5), Limits{}, nil)
	f.want("c1", res.Records, 75, 80)
	res = f.read(r, "c1", AtTailOffset(1000), Limits{Count: 2}, tail)
	f.want("c1", res.Records, 0, 2)
}

func TestReadSettledWindowOfLargerObject(t *testing.T) {
	f := newFixture(t)
	f.recs("w", 40)
	// One object holds [0,40); the catalog row at 0 covers [0,25) and a
	// second row (a later revision's window) covers [25,40).
	row := f.settled("w", 3, 0, 40, 3, 0)
	row.EndSeq = 25
	row.MaxTimestamp = f.truth["w"][24].Timestamp
	f.putRef("w", row)
	r0 := f.reader(Config{SettledChunkBytes: 200, Registerer: noReg()})
	res := f.read(r0, "w", AtSeq(10), Limits{}, nil)
	f.want("w", res.Records, 10, 25) // never past the row, though the object goes on
	if res.Stop != StopFrontier {
		t.Fatalf("stop %s", res.Stop)
	}
	res = f.read(r0, "w", AtTimestamp(f.truth["w"][30].Timestamp), Limits{}, nil)
	if len(res.Records) != 0 || res.Next != 25 {
		t.Fatalf("timestamp past the row's window: %s, next %d", seqRange(res.Records), res.Next)
	}
	rest := f.settled("w", 3, 0, 40, 5, 1)
	rest.FirstSeq = 25
	f.putRef("w", rest)
	r := f.reader(Config{SettledChunkBytes: 200})
	res = f.read(r, "w", AtSeq(10), Limits{}, nil)
	f.want("w", res.Records, 10, 40)
	if f.counter("starlog_reader_object_gets_total", "kind", "footer") != 2 {
		t.Fatalf("want one footer GET per object")
	}
}

func TestReadFallsThroughBuckets(t *testing.T) {
	f := newFixture(t)
	f.epoch(meta.Express, 1, expressBuckets...)
	// Slot 0 never reached x-az1 (a straggling copy); slot 1 holds damaged
	// bytes there; slot 2 reached only x-az3.
	s0 := f.flight(meta.Express, 1, expressBuckets[1:], f.batch("e", 6))
	s1 := f.flight(meta.Express, 1, expressBuckets[1:], f.batch("e", 6))
	key := chain.SlotKey(testStar, meta.Express, 1, 1)
	good, err := f.mem.Bucket(expressBuckets[1]).Get(f.ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	for i := 100; i < len(bad)-30; i += 7 {
		bad[i] ^= 0x5a
	}
	if _, err := f.mem.Bucket(expressBuckets[0]).PutIfAbsent(f.ctx, key, bad); err != nil {
		t.Fatal(err)
	}
	s2 := f.flight(meta.Express, 1, expressBuckets[2:], f.batch("e", 6))
	f.absorb(meta.Express, 1, s0, s1, s2)
	r := f.reader(Config{})
	res := f.read(r, "e", AtSeq(0), Limits{}, nil)
	f.want("e", res.Records, 0, 18)
	if n := f.objs.count(expressBuckets[0]); n != 3 {
		t.Fatalf("x-az1 asked %d times, want 3", n)
	}
	if n := f.objs.count(expressBuckets[2]); n != 1 {
		t.Fatalf("x-az3 asked %d times, want 1 (slot 2 only)", n)
	}
	if got := f.counter("starlog_reader_bucket_fallthroughs_total"); got != 4 {
		t.Fatalf("fallthroughs %v, want 4", got)
	}

	// A slot gone from every bucket is an error, not a skip.
	for _, b := range expressBuckets {
		if err := f.mem.Bucket(b).Delete(f.ctx, chain.SlotKey(testStar, meta.Express, 1, 2)); err != nil {
			t.Fatal(err)
		}
	}
	r2 := f.reader(Config{Registerer: noReg()})
	_, err = r2.Read(f.ctx, Stream{ID: "e", Basin: testBasin}, AtSeq(0), Limits{}, nil)
	if !errors.Is(err, errSlotGone) {
		t.Fatalf("slot missing everywhere: err %v", err)
	}
}

func TestReadHoleIsAnError(t *testing.T) {
	f := newFixture(t)
	spans(f)
	f.deleteRef("s1", 15) // the middle pass's ref
	r := f.reader(Config{})
	for _, from := range []uint64{0, 3, 16, 15} {
		res, err := r.Read(f.ctx, Stream{ID: "s1", Basin: testBasin}, AtSeq(from), Limits{}, nil)
		if !errors.Is(err, ErrGap) {
			t.Fatalf("read from %d over a hole: %d records, err %v", from, len(res.Records), err)
		}
	}
	// Below the hole a bounded read still succeeds.
	res := f.read(r, "s1", AtSeq(0), Limits{Count: 15}, nil)
	f.want("s1", res.Records, 0, 15)

	// A hole between the rows and the tail window is an error too.
	g := newFixture(t)
	spans(g)
	g.recs("s1", 20) // 35..54, of which only 40.. are in the window
	rg := g.reader(Config{})
	_, err := rg.Read(g.ctx, Stream{ID: "s1", Basin: testBasin}, AtSeq(30), Limits{}, g.tail("s1", 40))
	if !errors.Is(err, ErrGap) {
		t.Fatalf("hole below the tail window: err %v", err)
	}
	// And so is a tail window that lacks records below the durable tail.
	tail := g.tail("s1", 40)
	tail.Window = &memTail{stream: "s1"}
	_, err = rg.Read(g.ctx, Stream{ID: "s1", Basin: testBasin}, AtSeq(35), Limits{}, tail)
	if !errors.Is(err, ErrGap) {
		t.Fatalf("empty tail window below the durable tail: err %v", err)
	}
}

func TestReadTrimmedStart(t *testing.T) {
	f := newFixture(t)
	spans(f)
	f.deleteRef("s1", 0) // retention removed the first row
	r := f.reader(Config{})
	res := f.read(r, "s1", AtSeq(3), Limits{}, nil)
	f.want("s1", res.Records, 15, 35)
	if res.Start != 15 {
		t.Fatalf("start %d, want 15", res.Start)
	}
	// A stream with no rows left: the tail window's first record.
	g := newFixture(t)
	g.recs("t", 30)
	res = g.read(g.reader(Config{}), "t", AtSeq(0), Limits{}, g.tail("t", 12))
	g.want("t", res.Records, 12, 30)
	if res.Start != 12 || res.Stop != StopCaughtUp {
		t.Fatalf("start %d stop %s", res.Start, res.Stop)
	}
}

func TestReadCachesRepeatedReads(t *testing.T) {
	f := newFixture(t)
	spans(f)
	tail := catalogSpanTail(f)
	r := f.reader(Config{})
	f.read(r, "s1", AtSeq(0), Limits{}, nil)
	// Five slot refs, one standard bucket: five GETs.
	if n := f.objs.total(); n != 5 {
		t.Fatalf("cold read: %d GETs, want 5", n)
	}
	res := f.read(r, "s1", AtSeq(0), Limits{}, nil)
	f.want("s1", res.Records, 0, 35)
	res = f.read(r, "s1", AtSeq(20), Limits{}, nil)
	f.want("s1", res.Records, 20, 35)
	if n := f.objs.total(); n != 5 {
		t.Fatalf("warm reads: %d GETs in all, want still 5", n)
	}
	if got := f.counter("starlog_reader_cache_misses_total", "kind", "epoch"); got != 1 {
		t.Fatalf("epoch misses %v, want 1", got)
	}
	if got := f.counter("starlog_reader_cache_hits_total", "kind", "extent"); got < 7 {
		t.Fatalf("extent hits %v, want ≥ 7", got)
	}

	before := f.objs.total()
	f.read(r, "c1", AtSeq(0), Limits{}, tail)
	cold := f.objs.total() - before
	// One footer GET, one chunk (the default 1 MiB chunk holds the whole
	// object), two express slots.
	if cold != 4 {
		t.Fatalf("cold catalog read: %d GETs, want 4", cold)
	}
	res = f.read(r, "c1", AtSeq(5), Limits{}, tail)
	f.want("c1", res.Records, 5, 95)
	if n := f.objs.total() - before; n != cold {
		t.Fatalf("warm catalog read: %d more GETs", n-cold)
	}
	if got := f.counter("starlog_reader_cache_hits_total", "kind", "footer"); got != 1 {
		t.Fatalf("footer hits %v, want 1", got)
	}
}

func TestReadCacheEvicts(t *testing.T) {
	f := newFixture(t)
	f.body = 2000
	spans(f)
	// Room for about one extent: a second pass re-reads.
	r := f.reader(Config{CacheBytes: 40 << 10})
	f.read(r, "s1", AtSeq(0), Limits{}, nil)
	f.read(r, "s1", AtSeq(0), Limits{}, nil)
	if n := f.objs.total(); n <= 5 || n > 10 {
		t.Fatalf("%d GETs for two reads with a small cache, want 6..10", n)
	}
	_, used := r.extents.cache.size()
	if used > r.extents.cache.capacity {
		t.Fatalf("cache holds %d bytes, capacity %d", used, r.extents.cache.capacity)
	}
}

func TestReadRetriesReplacedRow(t *testing.T) {
	f := newFixture(t)
	spans(f)
	// While the reader fetches slot 4 (row [25,35)), a settle swaps a
	// catalog row in over the span ref and trim deletes the slot.
	slot4 := chain.SlotKey(testStar, meta.Standard, 1, 4)
	var once sync.Once
	f.objs.onGet = func(_, key string) {
		if key != slot4 {
			return
		}
		once.Do(func() {
			f.putRef("s1", f.settled("s1", 1, 25, 35, 3, 0))
			if err := f.mem.Bucket(stdBucket).Delete(f.ctx, slot4); err != nil {
				t.Error(err)
			}
		})
	}
	r := f.reader(Config{})
	res := f.read(r, "s1", AtSeq(0), Limits{}, nil)
	f.want("s1", res.Records, 0, 35)
	if got := f.counter("starlog_reader_object_gets_total", "kind", "footer"); got != 1 {
		t.Fatalf("footer GETs %v: the replaced row was not read from its catalog row", got)
	}
}

// racingTail runs fn before its first read: the absorb moving records from
// the window into rows between the reader's row lookup and window read.
type racingTail struct {
	*memTail
	once sync.Once
	fn   func()
}

func (r *racingTail) Read(id string, from uint64, max int) ([]TailExtent, uint64, bool) {
	r.once.Do(r.fn)
	return r.memTail.Read(id, from, max)
}

func TestReadRacesAbsorb(t *testing.T) {
	f := newFixture(t)
	spans(f)
	s5 := f.flight(meta.Standard, 1, []string{stdBucket}, f.batch("s1", 10)) // 35..44, released
	f.recs("s1", 6)                                                          // 45..50, released later
	tail := f.tail("s1", 35)
	mt := tail.Window.(*memTail)
	tail.Window = &racingTail{memTail: mt, fn: func() {
		f.absorb(meta.Standard, 1, s5)
		mt.drop(45)
	}}
	r := f.reader(Config{})
	res := f.read(r, "s1", AtSeq(30), Limits{}, tail)
	f.want("s1", res.Records, 30, 51)
	if res.Stop != StopCaughtUp {
		t.Fatalf("stop %s", res.Stop)
	}
	// Slots 4 and 5: the absorbed records came from the new row.
	if got := f.counter("starlog_reader_object_gets_total", "kind", "extent"); got != 2 {
		t.Fatalf("extent GETs %v, want 2", got)
	}
}

func TestReadConcurrentReaders(t *testing.T) {
	f := newFixture(t)
	spans(f)
	tail := catalogSpanTail(f)
	r := f.reader(Config{SettledChunkBytes: 500})
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stream, end, tl := "s1", uint64(35), (*Tail)(nil)
			if g%2 == 1 {
				stream, end, tl = "c1", 95, tail
			}
			var got []format.Record
			for next := uint64(g); next < end; {
				res, err := r.Read(context.Background(), Stream{ID: stream, Basin: testBasin}, AtSeq(next), Limits{Count: 3 + g}, tl)
				if err != nil {
					errs <- err
					return
				}
				got = append(got, res.Records...)
				next = res.Next
			}
			for i, rec := range got {
				w := f.truth[stream][uint64(g)+uint64(i)]
				if rec.SeqNum != w.SeqNum || string(rec.Body) != string(w.Body) {
					errs <- errors.New(stream + ": wrong record")
					return
				}
			}
			if uint64(len(got)) != end-uint64(g) {
				errs <- errors.New(stream + ": wrong count")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func TestReadErrors(t *testing.T) {
	f := newFixture(t)
	spans(f)
	r := f.reader(Config{})
	// A row naming an epoch with no record.
	ref := meta.Ref{FirstSeq: 35, EndSeq: 36, Span: &meta.Span{Class: meta.Standard, Star: testStar, Epoch: 9,
		Slots: []meta.SlotRef{{Slot: 0, FirstSeq: 35, Count: 1, Offset: 60, Length: 60}}}}
	f.putRef("s1", ref)
	_, err := r.Read(f.ctx, Stream{ID: "s1", Basin: testBasin}, AtSeq(30), Limits{}, nil)
	if !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("missing epoch record: %v", err)
	}
	// A malformed row.
	k := meta.RefKey("s1", 40)
	if _, err := f.meta.Put(f.ctx, k.PK, k.SK, []byte(`{"first":40,"end":41}`), meta.Always()); err != nil {
		t.Fatal(err)
	}
	_, err = r.Read(f.ctx, Stream{ID: "s1", Basin: testBasin}, AtSeq(40), Limits{}, nil)
	if !errors.Is(err, ErrCorruptRow) {
		t.Fatalf("malformed row: %v", err)
	}
	// A catalog row whose object is missing.
	f.putRef("c9", meta.Ref{FirstSeq: 0, EndSeq: 5, Settled: &meta.Settled{Epoch: 1, Bytes: 500}})
	_, err = r.Read(f.ctx, Stream{ID: "c9", Basin: testBasin}, AtSeq(0), Limits{}, nil)
	if err == nil || !strings.Contains(err.Error(), "not found") {
		t.Fatalf("missing settled object: %v", err)
	}
	// A cancelled context stops the read.
	ctx, cancel := context.WithCancel(f.ctx)
	cancel()
	if _, err := f.reader(Config{Registerer: noReg()}).Read(ctx, Stream{ID: "s1"}, AtSeq(0), Limits{}, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}

// TestReadAbsorbPlanCompat reads rows as absorb.Plan lays them out when a
// stream's batches of one slot are not adjacent: each becomes its own slot
// ref, in seq order.
func TestReadAbsorbPlanCompat(t *testing.T) {
	f := newFixture(t)
	f.epoch(meta.Standard, 1, stdBucket)
	s := f.flight(meta.Standard, 1, []string{stdBucket}, f.batch("p", 2), f.batch("q", 1), f.batch("p", 2), f.batch("q", 1), f.batch("p", 2))
	refs := f.absorb(meta.Standard, 1, s)
	var p meta.Ref
	for _, rw := range refs {
		if rw.StreamID == "p" {
			p = rw.Ref
		}
	}
	if len(p.Span.Slots) != 3 {
		t.Fatalf("plan made %d slot refs, want 3", len(p.Span.Slots))
	}
	res := f.read(f.reader(Config{}), "p", AtSeq(1), Limits{}, nil)
	f.want("p", res.Records, 1, 6)
}

// hookMeta runs fn once, right after the first query matching match
// returns: the absorb writing a row between two lookups of one read.
type hookMeta struct {
	meta.Store
	match func(meta.Query) bool
	once  sync.Once
	fn    func()
}

func (h *hookMeta) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	p, err := h.Store.Query(ctx, q)
	if h.match(q) {
		h.once.Do(h.fn)
	}
	return p, err
}

// The floor lookup finds the row ending exactly at the start seq, then the
// absorb writes the next row before the forward page: the start is covered
// by that row, not a gap.
func TestReadRowWrittenBetweenFloorAndForward(t *testing.T) {
	f := newFixture(t)
	spans(f)                                                                 // s1: rows over [0, 35)
	s5 := f.flight(meta.Standard, 1, []string{stdBucket}, f.batch("s1", 10)) // 35..44, not yet absorbed
	floor := meta.FloorQuery("s1", 35)
	hook := &hookMeta{Store: f.meta,
		match: func(q meta.Query) bool { return q.Backward && q.To == floor.To },
		fn:    func() { f.absorb(meta.Standard, 1, s5) }}
	r, err := New(Config{Meta: hook, Objects: f.objs, SettledBucket: settledBkt, Registerer: noReg()})
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.Read(context.Background(), Stream{ID: "s1", Basin: "b"}, AtSeq(35), Limits{}, nil)
	if err != nil {
		t.Fatalf("read at the row boundary while the absorb writes: %v", err)
	}
	f.want("s1", res.Records, 35, 45)
}

// hangingReader is a Reader over f whose first Express bucket is
// black-holed (the fault store's hanging bucket: every call blocks until
// its context ends), with three one-slot extents to read.
func hangingReader(t *testing.T, cfg Config) (*fixture, *Reader, *faults.Store) {
	f := newFixture(t)
	f.epoch(meta.Express, 1, expressBuckets...)
	var slots []absorb.Slot
	for range 3 {
		slots = append(slots, f.flight(meta.Express, 1, expressBuckets, f.batch("e", 6)))
	}
	f.absorb(meta.Express, 1, slots...)
	fs := faults.Wrap(f.objs)
	fs.SetDown(expressBuckets[0], faults.Down{Hang: true})
	cfg.Meta, cfg.Objects, cfg.SettledBucket = f.meta, fs, settledBkt
	cfg.Registerer, cfg.Logger = f.reg, slog.New(slog.DiscardHandler)
	r, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, r, fs
}

// readSlot reads slot k's six records with a client's deadline, and how
// long it took.
func readSlot(t *testing.T, f *fixture, r *Reader, k int) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(f.ctx, 3*time.Second)
	defer cancel()
	t0 := time.Now()
	res, err := r.Read(ctx, Stream{ID: "e", Basin: testBasin}, AtSeq(uint64(6*k)), Limits{Count: 6}, nil)
	took := time.Since(t0)
	if err != nil {
		t.Fatalf("read of slot %d with x-az1 black-holed: %v after %v", k, err, took)
	}
	f.want("e", res.Records, uint64(6*k), uint64(6*k+6))
	return took
}

// A black-holed first bucket costs one read a hedge delay, not every read
// the client's timeout: the first read asks x-az2 once x-az1 has not
// answered for the hedge delay, and later reads ask x-az1 last.
func TestReadHedgesPastHangingBucket(t *testing.T) {
	f, r, _ := hangingReader(t, Config{})
	if took := readSlot(t, f, r, 0); took > DefaultHedgeAfter+time.Second {
		t.Fatalf("first read took %v", took)
	}
	asked := f.objs.count(expressBuckets[0])
	for k := 1; k < 3; k++ {
		if took := readSlot(t, f, r, k); took >= DefaultHedgeAfter {
			t.Fatalf("read %d took %v: the black-holed bucket was not asked last", k, took)
		}
	}
	if n := f.objs.count(expressBuckets[0]); n != asked {
		t.Fatalf("x-az1 asked %d more times after it hung", n-asked)
	}
	if got := f.counter("starlog_reader_bucket_hedges_total"); got != 1 {
		t.Fatalf("hedges %v, want 1", got)
	}
}

// Without hedging, the per-attempt bound moves a read on; a suspect bucket
// is asked first again once SuspectFor has passed.
func TestReadBoundsEachBucketAttempt(t *testing.T) {
	const bound = 200 * time.Millisecond
	f, r, fs := hangingReader(t, Config{BucketAttemptTimeout: bound, HedgeAfter: time.Hour, SuspectFor: 300 * time.Millisecond})
	if took := readSlot(t, f, r, 0); took < bound || took > bound+time.Second {
		t.Fatalf("first read took %v, want about the attempt bound %v", took, bound)
	}
	if got := f.counter("starlog_reader_object_get_errors_total", "kind", "extent"); got != 1 {
		t.Fatalf("extent GET errors %v, want the one timeout", got)
	}
	if took := readSlot(t, f, r, 1); took >= bound {
		t.Fatalf("second read took %v: x-az1 was not asked last", took)
	}
	fs.SetUp(expressBuckets[0])
	poll.Until(t, 5*time.Second, "x-az1's suspicion to run out", func() bool {
		return r.health.order(expressBuckets, time.Now())[0] == expressBuckets[0]
	})
	asked := f.objs.count(expressBuckets[0])
	readSlot(t, f, r, 2)
	if n := f.objs.count(expressBuckets[0]); n != asked+1 {
		t.Fatalf("x-az1 asked %d times after its suspicion ran out, want first", n-asked)
	}
	if n := f.objs.count(expressBuckets[1]); n != 2 {
		t.Fatalf("x-az2 asked %d times, want 2 (slots 0 and 1)", n)
	}
}

// The last bucket left is asked without the per-attempt bound: with every
// other bucket missing the copy, a slow one is waited for (up to the
// caller's context), not failed.
func TestReadWaitsForTheLastBucket(t *testing.T) {
	f, r, fs := hangingReader(t, Config{BucketAttemptTimeout: 50 * time.Millisecond, HedgeAfter: time.Hour})
	fs.SetUp(expressBuckets[0])
	key := chain.SlotKey(testStar, meta.Express, 1, 0)
	for _, b := range expressBuckets[:2] {
		if err := f.mem.Bucket(b).Delete(f.ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	fs.SetSlow(expressBuckets[2], 150*time.Millisecond)
	readSlot(t, f, r, 0)
}

// A catalog row marked Trimmed (retention or a trim took every record of
// a stream's greatest catalog row: docs/settle.md, "Retention and trims")
// keeps only the stream's tail: a read below it starts at its end, never
// reads its object (reclaimed a grace later), and reads on into the rows
// that follow.
func TestReadSkipsTrimmedRow(t *testing.T) {
	f := newFixture(t)
	f.recs("s", 30)
	husk := f.settled("s", 1, 0, 10, 4, 0)
	husk.Settled.Sealed, husk.Settled.Trimmed = true, true
	f.putRef("s", husk)
	if err := f.mem.Bucket(settledBkt).Delete(f.ctx, SettledKey(testBasin, "s", 1, 0, 0)); err != nil {
		t.Fatal(err)
	}
	r := f.reader(Config{})
	// An emptied stream: nothing below its tail, and the read ends there.
	res := f.read(r, "s", AtSeq(3), Limits{}, nil)
	if len(res.Records) != 0 || res.Start != 10 || res.Stop != StopFrontier {
		t.Fatalf("read of an emptied stream: %d records (%s), start %d, stop %s; want none, start 10, at the frontier",
			len(res.Records), seqRange(res.Records), res.Start, res.Stop)
	}
	// Appended to since: the read starts at the trimmed row's end.
	f.putRef("s", f.settled("s", 1, 10, 30, 4, 0))
	res = f.read(r, "s", AtSeq(0), Limits{}, nil)
	f.want("s", res.Records, 10, 30)
	if res.Start != 10 {
		t.Fatalf("start %d, want 10", res.Start)
	}
}
