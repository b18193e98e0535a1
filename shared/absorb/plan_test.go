package absorb

import (
	"testing"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

func ext(stream string, first uint64, n uint32, off uint64, length uint32, ts uint64) format.Extent {
	return format.Extent{StreamID: stream, FirstSeq: first, Count: n, Offset: off, Length: length, MinTimestamp: ts, MaxTimestamp: ts + 1}
}

func TestPlanOneRefPerStreamPerPass(t *testing.T) {
	rip := Ripening{Trigger: 1000, Linger: 10 * time.Second, AgeCap: time.Minute}
	birth := time.UnixMilli(1_000_000)
	slots := []Slot{
		{Slot: 7, Extents: []format.Extent{ext("a", 10, 2, 60, 100, 5), ext("a", 12, 1, 160, 50, 6), ext("b", 0, 3, 210, 90, 4)}},
		{Slot: 8, Extents: []format.Extent{ext("b", 3, 1, 60, 30, 9), ext("a", 13, 4, 90, 200, 7)}},
	}
	prev := map[string]StreamTotals{"a": {CumBytes: 500, FencingToken: "t"}}
	p, err := Plan("s1", meta.Express, 3, slots, prev, rip, birth)
	if err != nil {
		t.Fatal(err)
	}
	if p.From != 7 || p.End != 9 || len(p.Refs) != 2 {
		t.Fatalf("pass [%d,%d) with %d refs", p.From, p.End, len(p.Refs))
	}
	a := p.Refs[0].Ref
	if p.Refs[0].StreamID != "a" || a.FirstSeq != 10 || a.EndSeq != 17 || a.CumBytes != 850 || a.FencingToken != "" {
		t.Fatalf("ref a = %+v", a)
	}
	// Adjacent extents of one stream in one slot merge into one slot ref.
	if len(a.Span.Slots) != 2 || a.Span.Slots[0] != (meta.SlotRef{Slot: 7, FirstSeq: 10, Count: 3, Offset: 60, Length: 150}) {
		t.Fatalf("slots of a = %+v", a.Span.Slots)
	}
	if a.MinTimestamp != 5 || a.MaxTimestamp != 8 || a.Span.Epoch != 3 || a.Span.Class != meta.Express {
		t.Fatalf("bounds of a = %+v", a)
	}
	b := p.Refs[1].Ref
	if b.FirstSeq != 0 || b.EndSeq != 4 || b.CumBytes != 120 {
		t.Fatalf("ref b = %+v", b)
	}
	// a crossed 1000 bytes (500 → 850? no) — b did not; nobody crossed.
	if p.Marker.Cause != "cap" || p.Marker.Ripen != birth.Add(time.Minute).UnixMilli() {
		t.Fatalf("marker = %+v", p.Marker)
	}
	if p.Totals["a"].CumBytes != 850 || len(p.Marker.Streams) != 2 {
		t.Fatalf("totals %+v marker %+v", p.Totals, p.Marker)
	}
}

func TestPlanCrossingRipensAtLingerWithJitter(t *testing.T) {
	rip := Ripening{Trigger: 1000, Linger: 10 * time.Second, AgeCap: time.Minute}
	birth := time.UnixMilli(5_000_000)
	slots := []Slot{{Slot: 0, Extents: []format.Extent{ext("hot", 0, 1, 60, 600, 1)}}}
	p, err := Plan("s", meta.Standard, 1, slots, map[string]StreamTotals{"hot": {CumBytes: 700}}, rip, birth)
	if err != nil {
		t.Fatal(err)
	}
	j := rip.Jitter("hot")
	if j < 0 || j >= rip.Linger/2 {
		t.Fatalf("jitter %v out of [0, linger/2)", j)
	}
	if p.Marker.Cause != "linger" || p.Marker.Ripen != birth.Add(rip.Linger+j).UnixMilli() {
		t.Fatalf("marker = %+v, want linger at +%v", p.Marker, rip.Linger+j)
	}
	if rip.Jitter("hot") != j {
		t.Fatal("jitter is not deterministic")
	}
}

func TestPlanRejectsGaps(t *testing.T) {
	rip := Ripening{AgeCap: time.Minute}
	if _, err := Plan("s", meta.Standard, 1, []Slot{{Slot: 0}, {Slot: 2}}, nil, rip, time.Now()); err == nil {
		t.Fatal("non-consecutive slots accepted")
	}
	slots := []Slot{{Slot: 0, Extents: []format.Extent{ext("a", 0, 1, 60, 10, 1), ext("a", 5, 1, 70, 10, 1)}}}
	if _, err := Plan("s", meta.Standard, 1, slots, nil, rip, time.Now()); err == nil {
		t.Fatal("a seq gap inside a stream accepted")
	}
}
