package loglet

import (
	"errors"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/reader"
)

// A read starting inside an extent returns max records when the index
// holds them: the records below the start do not count against max.
func TestIndexReadFromInsideAnExtent(t *testing.T) {
	x := newIndex("star", "standard", 1<<20, nil)
	var seq uint64
	for slot := range uint64(3) {
		var recs []format.Record
		for range 10 {
			recs = append(recs, format.Record{SeqNum: seq, Timestamp: 1, Body: []byte("r")})
			seq++
		}
		x.Add(testFlight(t, slot, recs))
	}
	for _, c := range []struct{ from, max, want uint64 }{{4, 17, 17}, {9, 1, 1}, {0, 30, 30}, {25, 17, 5}, {14, 16, 16}} {
		xs, first, ok := x.Read("s", c.from, int(c.max))
		recs := heldRecords(t, xs, int(c.max))
		if !ok || first != 0 {
			t.Fatalf("read(%d,%d): ok %v first %d", c.from, c.max, ok, first)
		}
		if uint64(len(recs)) != c.want {
			t.Fatalf("read(%d,%d) returned %d records, want %d", c.from, c.max, len(recs), c.want)
		}
		for i, r := range recs {
			if r.SeqNum != c.from+uint64(i) {
				t.Fatalf("read(%d,%d)[%d] = seq %d", c.from, c.max, i, r.SeqNum)
			}
		}
	}
}

// Defect 5: the flight index lets go of what the absorb took. A stream
// that keeps live entries must not keep its absorbed flights (and their
// bundles) reachable: each absorbed flight's bundle is collected.
func TestAbsorbedFlightsAreCollected(t *testing.T) {
	x := newIndex("star", "standard", 1<<30, nil)
	var collected atomic.Int64
	add := func(slot uint64) {
		f := testFlight(t, slot, []format.Record{{SeqNum: slot, Timestamp: 1, Body: make([]byte, 1<<10)}})
		runtime.AddCleanup(&f.body[0], func(int) { collected.Add(1) }, 0)
		x.Add(f)
	}
	const absorbed = 100
	for slot := range uint64(absorbed + 1) {
		add(slot)
	}
	x.Absorbed(absorbed) // the stream still has one live entry
	// The check below says what is missing after the wait.
	_ = poll.Wait(500*time.Millisecond, func() error {
		runtime.GC()
		if collected.Load() != absorbed {
			return errors.New("not collected yet")
		}
		return nil
	})
	if got := collected.Load(); got != absorbed {
		t.Fatalf("%d of %d absorbed flights collected while the stream has a live entry", got, absorbed)
	}
	if xs, first, ok := x.Read("s", 0, 10); !ok || first != absorbed || len(heldRecords(t, xs, 10)) != 1 {
		t.Fatalf("live entry: %d extents from %d (%v)", len(xs), first, ok)
	}
}

// The index keeps the newest bundles within its cache bound and lets go of
// the older ones: their extents stay indexed and a read names their slot
// objects (slot, seqs, byte range, bucket set) instead of records; the
// evicted bundles are collected; absorbing flights returns their backlog
// bytes whether held or not, and the held bytes follow.
func TestIndexEvictsOldestBundlesBeyondTheCache(t *testing.T) {
	var fs []*flight
	var seq uint64
	for slot := range uint64(5) {
		var recs []format.Record
		for range 4 {
			recs = append(recs, format.Record{SeqNum: seq, Timestamp: 1, Body: make([]byte, 1000)})
			seq++
		}
		f := testFlight(t, slot, recs)
		f.buckets = []string{"z1", "z2", "z3"}
		fs = append(fs, f)
	}
	size := int64(len(fs[0].body))
	x := newIndex("star", "express", 2*size+size/2, nil) // room for two bundles
	var collected atomic.Int64
	for _, f := range fs {
		runtime.AddCleanup(&f.body[0], func(int) { collected.Add(1) }, 0)
		x.Add(f)
	}
	if n, b := x.Cached(); n != 2 || b != 2*size {
		t.Fatalf("cached %d flights (%d bytes), want the newest 2 (%d bytes)", n, b, 2*size)
	}
	xs, first, ok := x.Read("s", 2, 100)
	if !ok || first != 0 || len(xs) != 5 {
		t.Fatalf("read from 2: %d extents, first %d (%v)", len(xs), first, ok)
	}
	for i, e := range xs[:3] {
		fx := fs[i].extents[0]
		want := meta.SlotRef{Slot: uint64(i), FirstSeq: fx.FirstSeq, Count: uint64(fx.Count), Offset: fx.Offset, Length: uint64(fx.Length)}
		if e.Records != nil || e.Span == nil || e.Span.Star != "star" || e.Span.Class != "express" || e.Span.Epoch != 1 || e.Slot != want || len(e.Buckets) != 3 {
			t.Fatalf("extent %d: %d records, span %+v, slot %+v, buckets %v; want evicted, slot %+v", i, len(e.Records), e.Span, e.Slot, e.Buckets, want)
		}
	}
	for i, e := range xs[3:] {
		if len(e.Records) != 4 || e.Records[0].SeqNum != uint64(4*(i+3)) {
			t.Fatalf("held extent %d: %d records", i+3, len(e.Records))
		}
	}
	fs = nil
	// The check below says what is missing after the wait.
	_ = poll.Wait(500*time.Millisecond, func() error {
		runtime.GC()
		if collected.Load() != 3 {
			return errors.New("not collected yet")
		}
		return nil
	})
	if got := collected.Load(); got != 3 {
		t.Fatalf("%d of 3 evicted bundles collected", got)
	}
	if got := x.Absorbed(4); got != 4*size {
		t.Fatalf("absorbing 4 flights returned %d backlog bytes, want %d", got, 4*size)
	}
	if n, b := x.Cached(); n != 1 || b != size {
		t.Fatalf("after the absorb: cached %d flights (%d bytes), want 1 (%d)", n, b, size)
	}
	if !x.Holds("s") || x.Absorbed(1) != size || x.Holds("s") {
		t.Fatal("Holds: the stream is held until its last extent is absorbed")
	}
}

// heldRecords flattens the records of held extents, failing on an
// evicted one, and applies the read's limit.
func heldRecords(t *testing.T, xs []reader.TailExtent, limit int) []format.Record {
	t.Helper()
	var out []format.Record
	for _, x := range xs {
		if x.Records == nil {
			t.Fatalf("extent of slot %d evicted", x.Slot.Slot)
		}
		out = append(out, x.Records...)
	}
	return out[:min(len(out), limit)]
}

// testFlight renders recs of stream "s" as a released flight of epoch 1.
func testFlight(t *testing.T, slot uint64, recs []format.Record) *flight {
	t.Helper()
	body, err := format.EncodeBundle(1, slot, format.Nonce{}, []format.Batch{{StreamID: "s", Records: recs}})
	if err != nil {
		t.Fatal(err)
	}
	_, footer, err := format.DecodeBundle(body)
	if err != nil {
		t.Fatal(err)
	}
	return &flight{epoch: 1, slot: slot, body: body, bodyLen: int64(len(body)), extents: footer.Extents}
}
