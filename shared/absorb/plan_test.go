package absorb

import (
	"fmt"
	"slices"
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
	mk := meta.MarkerKey("s", meta.Standard, 1, 0)
	j := rip.Jitter(mk.PK + "/" + mk.SK)
	if j < 0 || j >= rip.Linger/2 {
		t.Fatalf("jitter %v out of [0, linger/2)", j)
	}
	if p.Marker.Cause != "linger" || p.Marker.Ripen != birth.Add(rip.Linger+j).UnixMilli() {
		t.Fatalf("marker = %+v, want linger at +%v", p.Marker, rip.Linger+j)
	}
	if rip.Jitter(mk.PK+"/"+mk.SK) != j {
		t.Fatal("jitter is not deterministic")
	}
	if len(p.Crossed) != 1 || p.Totals["hot"].Crossed != 1300 {
		t.Fatalf("crossed %v, totals %+v", p.Crossed, p.Totals["hot"])
	}
}

// At density a pass carries many crossing streams: the markers' jitter
// must still spread over the half linger, not collapse to the minimum over
// their streams (which for 1,000 streams is about linger/2000).
func TestPlanJitterSpreadsAtDensity(t *testing.T) {
	rip := Ripening{Trigger: 1000, Linger: 60 * time.Second, AgeCap: 15 * time.Minute}
	birth := time.UnixMilli(9_000_000)
	const passes, streams = 40, 1000
	var lo, hi time.Duration = rip.Linger, 0
	for pass := range uint64(passes) {
		var xs []format.Extent
		prev := map[string]StreamTotals{}
		for i := range streams {
			id := fmt.Sprintf("s%04d", i)
			xs = append(xs, ext(id, pass, 1, 60+uint64(i)*10, 10, 1))
			prev[id] = StreamTotals{CumBytes: 995}
		}
		p, err := Plan("s", meta.Standard, 1, []Slot{{Slot: pass, Extents: xs}}, prev, rip, birth)
		if err != nil {
			t.Fatal(err)
		}
		if len(p.Crossed) != streams || p.Marker.Cause != "linger" {
			t.Fatalf("pass %d: %d crossed, cause %s", pass, len(p.Crossed), p.Marker.Cause)
		}
		j := time.UnixMilli(p.Marker.Ripen).Sub(birth) - rip.Linger
		lo, hi = min(lo, j), max(hi, j)
	}
	// 40 uniform draws over [0, 30 s) span less than 15 s with
	// probability about 40 × 2^-39: never, for a deterministic hash.
	if hi-lo < rip.Linger/4 {
		t.Fatalf("jitters of %d markers span [%v, %v]: the jitter is lost at %d streams a marker", passes, lo, hi, streams)
	}
}

// The trigger counts un-settled bytes (cumulative minus settled), not
// multiples of the trigger from the stream's origin.
func TestPlanTriggerCountsUnsettledBytes(t *testing.T) {
	rip := Ripening{Trigger: 1000, Linger: 10 * time.Second, AgeCap: time.Minute}
	birth := time.UnixMilli(5_000_000)
	cases := []struct {
		name  string
		prev  StreamTotals
		add   uint32
		cross bool
	}{
		// 7,900 → 8,100 passes a multiple of 1,000, but only 600 bytes
		// stand above the settled point at 7,500.
		{"multiple passed, below trigger", StreamTotals{CumBytes: 7900, Settled: 7500}, 200, false},
		// 8,100 → 8,600 passes no multiple, yet 1,100 bytes stand above
		// the settled point.
		{"no multiple, above trigger", StreamTotals{CumBytes: 8100, Settled: 7500}, 500, true},
		// A crossing lingering (at 8,600) is not made again by the next
		// pass, only a whole trigger later.
		{"lingering crossing", StreamTotals{CumBytes: 8600, Settled: 7500, Crossed: 8600}, 500, false},
		{"a trigger after the crossing", StreamTotals{CumBytes: 9100, Settled: 7500, Crossed: 8600}, 500, true},
		// A settle at the crossing re-arms it.
		{"settled at the crossing", StreamTotals{CumBytes: 9000, Settled: 8600, Crossed: 8600}, 700, true},
	}
	for _, c := range cases {
		slots := []Slot{{Slot: 3, Extents: []format.Extent{ext("x", 50, 1, 60, c.add, 1)}}}
		p, err := Plan("s", meta.Standard, 1, slots, map[string]StreamTotals{"x": c.prev}, rip, birth)
		if err != nil {
			t.Fatal(err)
		}
		if got := p.Marker.Cause == "linger"; got != c.cross {
			t.Errorf("%s: cause %s, want crossing %v", c.name, p.Marker.Cause, c.cross)
		}
		if got := p.Totals["x"]; got.Settled != c.prev.Settled {
			t.Errorf("%s: totals %+v lost the settled point", c.name, got)
		}
	}
}

// A pass's stream set never makes one item grow with the stream count.
func TestPlanShardsLargeStreamSets(t *testing.T) {
	rip := Ripening{Trigger: 1 << 30, Linger: time.Second, AgeCap: time.Minute}
	var xs []format.Extent
	for i := range 20_000 {
		xs = append(xs, ext(fmt.Sprintf("%032x", i), 0, 1, 60+uint64(i)*10, 10, 1))
	}
	p, err := Plan("s", meta.Standard, 1, []Slot{{Slot: 0, Extents: xs}}, nil, rip, time.UnixMilli(1))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(p.Marker.Streams, []string{meta.MarkerShardedStream}) || p.Marker.Shards != len(p.Shards) || len(p.Shards) < 2 {
		t.Fatalf("marker streams %d, shards %d of %d", len(p.Marker.Streams), p.Marker.Shards, len(p.Shards))
	}
	if n := len(meta.Encode(p.Marker)); n > 1024 {
		t.Fatalf("marker is %d bytes", n)
	}
	var all []string
	for _, sh := range p.Shards {
		if n := len(meta.Encode(meta.MarkerShard{Streams: sh})); n > meta.MarkerShardBytes+64 {
			t.Fatalf("shard of %d ids is %d bytes", len(sh), n)
		}
		all = append(all, sh...)
	}
	if len(all) != 20_000 || !slices.IsSorted(all) {
		t.Fatalf("shards hold %d ids (sorted %v)", len(all), slices.IsSorted(all))
	}
	// A small set stays inline.
	p, err = Plan("s", meta.Standard, 1, []Slot{{Slot: 0, Extents: xs[:3]}}, nil, rip, time.UnixMilli(1))
	if err != nil || len(p.Marker.Streams) != 3 || p.Marker.Shards != 0 || p.Shards != nil {
		t.Fatalf("small set: %+v %v", p.Marker, err)
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
