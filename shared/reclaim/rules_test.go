package reclaim

import (
	"testing"

	"pgregory.net/rapid"

	"github.com/starlog/starlog/shared/meta"
)

func spanRef(first, end uint64) meta.Ref {
	return meta.Ref{FirstSeq: first, EndSeq: end, Span: &meta.Span{Class: meta.Express, Star: "c1", Epoch: 1}}
}

func catalogRef(first, end uint64, bytes uint64) meta.Ref {
	return meta.Ref{FirstSeq: first, EndSeq: end, Settled: &meta.Settled{Epoch: 1, FirstSeq: first, Bytes: bytes}}
}

// Only a prefix of catalog rows goes: a row is trimmable only with a
// catalog row chained after it, and only when it is wholly below the trim
// point or wholly older than the cut.
func TestTrimmable(t *testing.T) {
	row := func(first, end, maxTS uint64) meta.Ref {
		r := catalogRef(first, end, 10)
		r.MaxTimestamp = maxTS
		return r
	}
	r, next := row(0, 10, 500), row(10, 20, 900)
	for _, c := range []struct {
		name      string
		r, next   meta.Ref
		trim, cut uint64
		want      bool
	}{
		{"below the trim point", r, next, 10, 0, true},
		{"the trim point inside", r, next, 9, 0, false},
		{"older than the cut", r, next, 0, 501, true},
		{"its last record at the cut", r, next, 0, 500, false},
		{"infinite retention, no trim", r, next, 0, 0, false},
		{"a span ref follows", r, spanRef(10, 20), 10, 501, false},
		{"a span ref itself", spanRef(0, 10), next, 10, 501, false},
		{"a hole after it", r, row(11, 20, 900), 10, 501, false},
	} {
		if got := trimmable(c.r, c.next, c.trim, c.cut); got != c.want {
			t.Errorf("%s: trimmable %v, want %v", c.name, got, c.want)
		}
	}
}

// The trim rule keeps stored ≤ 1.1 × retained + cap: an object moves from
// retained to waiting only while everything waiting fits a tenth of what
// is retained after it plus one cap, or when nothing else waits.
func TestTrimFits(t *testing.T) {
	for _, c := range []struct {
		pending, b, retained, cap uint64
		want                      bool
	}{
		{0, 500, 500, 100, true},        // nothing waits: always progresses
		{50, 50, 1000, 100, true},       // 100 ≤ 100 + 95
		{100, 100, 1100, 100, true},     // 200 ≤ 100 + 100
		{100, 101, 1100, 100, false},    // 201 > 100 + 99
		{1, 100, 100, 100, false},       // 101 > 100 + 0
		{900, 100, 10_100, 100, true},   // 1000 ≤ 100 + 1000
		{1001, 100, 10_100, 100, false}, // 1101 > 1100
	} {
		if got := trimFits(c.pending, c.b, c.retained, c.cap); got != c.want {
			t.Errorf("trimFits(%d, %d, %d, %d) = %v, want %v", c.pending, c.b, c.retained, c.cap, got, c.want)
		}
	}
	rapid.Check(t, func(t *rapid.T) {
		outputCap := uint64(rapid.IntRange(1, 1000).Draw(t, "cap"))
		retained := uint64(rapid.IntRange(0, 100_000).Draw(t, "retained"))
		waiting := uint64(rapid.IntRange(0, 2000).Draw(t, "waiting"))
		if waiting > outputCap+retained/10 {
			return // already beyond the bound: not a state the rules reach
		}
		b := uint64(rapid.IntRange(0, int(retained)).Draw(t, "b"))
		if waiting > 0 && trimFits(waiting, b, retained, outputCap) {
			stored, kept := retained+waiting, retained-b
			if stored > kept+kept/10+outputCap {
				t.Fatalf("trim of %d B: %d stored > 1.1 × %d + %d", b, stored, kept, outputCap)
			}
		}
	})
}
