package settle

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// span builds a span ref [first, first+Σcounts) of chain c1/express epoch
// 1, one slot ref per count, in slots from slot on, 100 bytes per record.
func spanRef(first uint64, slot uint64, counts ...uint64) meta.Ref {
	r := meta.Ref{FirstSeq: first, EndSeq: first, Span: &meta.Span{Class: meta.Express, Star: "c1", Epoch: 1}}
	for i, n := range counts {
		r.Span.Slots = append(r.Span.Slots, meta.SlotRef{Slot: slot + uint64(i), FirstSeq: r.EndSeq, Count: n, Offset: 60, Length: 100 * n})
		r.EndSeq += n
		r.CumBytes += 100 * n
	}
	r.MinTimestamp, r.MaxTimestamp = first, r.EndSeq-1
	return r
}

func catalogRef(first, end uint64, bytes uint64) meta.Ref {
	return meta.Ref{FirstSeq: first, EndSeq: end, Settled: &meta.Settled{Epoch: 1, FirstSeq: first, Bytes: bytes}}
}

func rowsOf(refs ...meta.Ref) []refRow {
	out := make([]refRow, len(refs))
	for i, r := range refs {
		out[i] = refRow{Ver: int64(i + 1), Ref: r}
	}
	return out
}

func TestAnalyze(t *testing.T) {
	// Never settled: everything stands.
	v, err := analyze(rowsOf(spanRef(0, 0, 5), spanRef(5, 1, 3)))
	if err != nil || v.base != nil || len(v.standing) != 2 || len(v.leftovers) != 0 {
		t.Fatalf("unsettled: %+v %v", v, err)
	}
	// Settled [0,8) with its covered refs not yet deleted, then more.
	straddler := spanRef(8, 2, 2, 4) // [8,14), slot refs at 8 and 10
	v, err = analyze(rowsOf(catalogRef(0, 10, 900), spanRef(5, 1, 3), straddler, spanRef(14, 4, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if v.base == nil || v.base.Ref.EndSeq != 10 || len(v.leftovers) != 2 || v.remainder == nil {
		t.Fatalf("crash after pivot: %+v", v)
	}
	if r := v.remainder; r.FirstSeq != 10 || r.EndSeq != 14 || len(r.Span.Slots) != 1 || r.Span.Slots[0].Slot != 3 || r.CumBytes != straddler.CumBytes {
		t.Fatalf("remainder %+v", r)
	}
	if len(v.standing) != 2 || v.standing[0].Ver != 0 || v.standing[1].Ref.FirstSeq != 14 {
		t.Fatalf("standing after remainder: %+v", v.standing)
	}
	// The remainder already stands: not needed again.
	rem, _ := remainderOf(straddler, 10, 0)
	v, err = analyze(rowsOf(catalogRef(0, 10, 900), straddler, rem, spanRef(14, 4, 1)))
	if err != nil || v.remainder != nil || len(v.leftovers) != 1 || len(v.standing) != 2 {
		t.Fatalf("remainder standing: %+v %v", v, err)
	}
	// Holes and rows inside other rows are refused.
	for name, rows := range map[string][]refRow{
		"hole":         rowsOf(spanRef(0, 0, 5), spanRef(6, 1, 3)),
		"inside":       rowsOf(spanRef(0, 0, 5), spanRef(3, 1, 3)),
		"two straddle": rowsOf(catalogRef(0, 10, 900), spanRef(5, 1, 7), spanRef(8, 2, 1)),
		"bad split":    rowsOf(catalogRef(0, 9, 900), straddler),
	} {
		if _, err := analyze(rows); !errors.Is(err, ErrRows) {
			t.Errorf("%s: analyze accepted rows that do not chain (err %v)", name, err)
		}
	}
}

func TestRemainderOf(t *testing.T) {
	r := spanRef(10, 5, 2, 3, 4) // slot refs at 10, 12, 15
	got, err := remainderOf(r, 15, 14)
	if err != nil {
		t.Fatal(err)
	}
	if got.FirstSeq != 15 || got.EndSeq != 19 || len(got.Span.Slots) != 1 || got.MinTimestamp != 14 || got.MaxTimestamp != r.MaxTimestamp {
		t.Fatalf("remainder %+v", got)
	}
	if cumAt(r, 15) != r.CumBytes-400 {
		t.Fatalf("cumAt = %d", cumAt(r, 15))
	}
	for _, at := range []uint64{10, 11, 19, 20} {
		if _, err := remainderOf(r, at, 0); err == nil {
			t.Errorf("split at %d accepted", at)
		}
	}
}

func testEra(markers ...meta.Marker) *eraSet {
	e := &eraSet{ch: ChainRef{Star: "c1", Class: meta.Express}, epoch: 1,
		checkpoints: map[epochRef]uint64{{ChainRef{Star: "c1", Class: meta.Express}, 1}: 100}}
	for _, m := range markers {
		e.markers = append(e.markers, liveMarker{M: m, Ver: 1})
	}
	return e
}

func TestEraWindowAndQualify(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	lingerM := meta.Marker{Epoch: 1, FromSlot: 0, EndSlot: 4, Birth: 999_000, Ripen: 999_500, Cause: "linger"}
	capM := meta.Marker{Epoch: 1, FromSlot: 6, EndSlot: 8, Birth: 1, Ripen: 2, Cause: "cap"}
	era := testEra(lingerM, capM)
	standing := rowsOf(spanRef(0, 0, 2, 2), spanRef(4, 2, 1), spanRef(5, 4, 1), spanRef(6, 6, 1))
	w := era.window(standing[:3])
	if len(w) != 2 {
		t.Fatalf("window of %d refs, want 2 (slot 4 is outside the era)", len(w))
	}
	if !era.qualifies(w, 500, time.Hour, now) || era.qualifies(w, 501, time.Hour, now) {
		t.Fatal("linger window judged against the trigger wrongly")
	}
	if !era.qualifies(w, 1<<30, time.Second, now) {
		t.Fatal("a linger marker older than the age cap must take everything")
	}
	if !era.qualifies(rowsOf(spanRef(6, 6, 1)), 1<<30, time.Hour, now) {
		t.Fatal("a cap marker's window must take everything")
	}
	// A window starts at the first standing ref, wherever it lies, and
	// ends at the last ref the era owns.
	if w := era.window(standing); len(w) != 4 {
		t.Fatalf("window of %d refs, want all 4", len(w))
	}
	if w := era.window(standing[2:3]); len(w) != 0 {
		t.Fatal("a stream with nothing in the era has no window here")
	}
	// Refs of an epoch whose checkpoint is not known (or not past them)
	// stop the window.
	other := spanRef(0, 0, 1)
	other.Span.Epoch = 2
	if era.owns(other.Span) || len(era.window(append(rowsOf(other), standing[3]))) != 0 {
		t.Fatal("a ref of an epoch not known absorbed must stop the window")
	}
	era.checkpoints[epochRef{ChainRef{Star: "c1", Class: meta.Express}, 2}] = 1
	if len(era.window(append(rowsOf(other), standing[3]))) != 2 {
		t.Fatal("an absorbed ref of another epoch belongs in the window before the era's refs")
	}
	res := make([]bool, 2)
	era.residue(standing[2:], res)
	if res[0] || !res[1] {
		t.Fatalf("residue %v, want only the cap marker", res)
	}
}

func TestPlanObject(t *testing.T) {
	// A new object takes its whole first ref even past the cap.
	w := rowsOf(spanRef(0, 0, 3, 3), spanRef(6, 2, 1), spanRef(7, 3, 1))
	p := planObject(nil, w, 100)
	if p.end != 6 || len(p.items) != 2 || p.first != 0 || p.rev != 0 || p.pivot.Ref.FirstSeq != 0 {
		t.Fatalf("new object: %+v", p)
	}
	// Then whole slot refs until the blocks reach the cap.
	for capBytes, end := range map[uint64]uint64{600: 6, 601: 7, 700: 7, 701: 8} {
		if p = planObject(nil, w, capBytes); p.end != end {
			t.Fatalf("new object under a %d-byte cap ends at %d, want %d", capBytes, p.end, end)
		}
	}
	// An extension keeps the tail's key and cuts inside a ref at a slot ref.
	tailRow := refRow{Ver: 7, Ref: catalogRef(0, 4, 500)}
	tailRow.Ref.Settled.Revision = 2
	f, err := format.NewSettledFooter("s", []format.BlockInfo{{FirstSeq: 0, Count: 4, Length: 400, MinTimestamp: 1, MaxTimestamp: 2}})
	if err != nil {
		t.Fatal(err)
	}
	tail := &tailObj{row: tailRow, footer: f}
	w = rowsOf(spanRef(4, 0, 1, 1, 1))
	p = planObject(tail, w, 550)
	if p.rev != 3 || p.first != 0 || p.pivot.Ver != 7 || p.end != 6 || len(p.items) != 2 {
		t.Fatalf("extension: %+v", p)
	}
}

func TestConfig(t *testing.T) {
	c := Config{}.WithDefaults()
	if c.Trigger != 8<<20 || c.Standard.Linger != time.Minute || c.Express.Linger != 10*time.Second ||
		c.Standard.AgeCap != 15*time.Minute || c.Express.AgeCap != 2*time.Minute || c.OutputCap != 256<<20 || c.ReadGrace != 5*time.Minute {
		t.Fatalf("defaults %+v", c)
	}
	if r := c.Ripening(meta.Express); r.Trigger != c.Trigger || r.Linger != 10*time.Second || r.AgeCap != 2*time.Minute {
		t.Fatalf("express ripening %+v", r)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	c.Express.Linger = time.Hour
	if c.Validate() == nil {
		t.Fatal("a linger above the age cap was accepted")
	}
}

// analyze over arbitrary rows never panics, and whatever it accepts is a
// view the settle can act on: leftovers keyed inside the base, standing
// refs chained from the base's end (or the lowest row), a remainder only
// for a leftover reaching past the base.
func TestAnalyzeProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 8).Draw(t, "rows")
		var rows []refRow
		seq := uint64(rapid.IntRange(0, 3).Draw(t, "start"))
		for i := range n {
			seq += uint64(rapid.IntRange(0, 2).Draw(t, fmt.Sprint("skip", i)))
			if i > 0 && seq <= rows[i-1].Ref.FirstSeq {
				seq = rows[i-1].Ref.FirstSeq + 1 // one row per key
			}
			var r meta.Ref
			if rapid.IntRange(0, 3).Draw(t, fmt.Sprint("kind", i)) == 0 {
				r = catalogRef(seq, seq+uint64(rapid.IntRange(1, 9).Draw(t, fmt.Sprint("len", i))), 100)
			} else {
				k := rapid.IntRange(1, 3).Draw(t, fmt.Sprint("slots", i))
				counts := make([]uint64, k)
				for j := range counts {
					counts[j] = uint64(rapid.IntRange(1, 3).Draw(t, fmt.Sprint("n", i, j)))
				}
				r = spanRef(seq, uint64(i*4), counts...)
			}
			rows = append(rows, refRow{Ver: int64(i + 1), Ref: r})
			seq += uint64(rapid.IntRange(0, 4).Draw(t, fmt.Sprint("advance", i)))
		}
		v, err := analyze(rows)
		if err != nil {
			if !errors.Is(err, ErrRows) {
				t.Fatalf("error outside ErrRows: %v", err)
			}
			return
		}
		pos := uint64(0)
		if v.base != nil {
			pos = v.base.Ref.EndSeq
			for _, l := range v.leftovers {
				if l.Ref.FirstSeq <= v.base.Ref.FirstSeq || l.Ref.FirstSeq >= pos || l.Ref.Span == nil {
					t.Fatalf("leftover [%d,%d) outside base [%d,%d)", l.Ref.FirstSeq, l.Ref.EndSeq, v.base.Ref.FirstSeq, pos)
				}
			}
		} else if len(v.standing) > 0 {
			pos = v.standing[0].Ref.FirstSeq
		}
		if v.remainder != nil && (len(v.standing) == 0 || v.standing[0].Ver != 0 || v.remainder.FirstSeq != pos) {
			t.Fatalf("remainder %+v not at the head of standing", v.remainder)
		}
		for _, r := range v.standing {
			if r.Ref.Span == nil || r.Ref.FirstSeq != pos {
				t.Fatalf("standing ref [%d,%d) does not continue %d", r.Ref.FirstSeq, r.Ref.EndSeq, pos)
			}
			pos = r.Ref.EndSeq
		}
	})
}
