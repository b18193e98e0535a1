package loglet

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/format"
)

// A read starting inside an extent returns max records when the index
// holds them: the records below the start do not count against max.
func TestIndexReadFromInsideAnExtent(t *testing.T) {
	x := NewIndex()
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
		recs, first, ok := x.Read("s", c.from, int(c.max))
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
	x := NewIndex()
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
	for range 50 {
		runtime.GC()
		if collected.Load() == absorbed {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := collected.Load(); got != absorbed {
		t.Fatalf("%d of %d absorbed flights collected while the stream has a live entry", got, absorbed)
	}
	if recs, first, ok := x.Read("s", 0, 10); !ok || first != absorbed || len(recs) != 1 {
		t.Fatalf("live entry: %d records from %d (%v)", len(recs), first, ok)
	}
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
