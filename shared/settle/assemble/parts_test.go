package assemble

import (
	"bytes"
	"fmt"
	"testing"

	"pgregory.net/rapid"
)

// planParts over the pieces publish gives it (stored extents, then the
// footer): every part but the last reaches the minimum, the segments cover
// every piece once in order, copies are single segments of copyable
// pieces, uploads stay bounded, and large pieces are mostly copied.
func TestPlanPartsProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		min := rapid.Int64Range(1, 64).Draw(t, "min")
		n := rapid.IntRange(1, 12).Draw(t, "pieces")
		pieces := make([]piece, n)
		for i := range pieces {
			pieces[i] = piece{n: rapid.Int64Range(0, 4*min).Draw(t, fmt.Sprint("n", i)), copyable: i < n-1}
		}
		pieces[n-1].n++ // the footer is never empty
		parts := planParts(pieces, min)
		var want, got []byte
		for i, p := range pieces {
			for j := range p.n {
				want = append(want, byte(i), byte(j))
			}
		}
		var copied int64
		for i, pt := range parts {
			if i < len(parts)-1 && pt.size() < min {
				t.Fatalf("part %d of %d is %d bytes, below %d", i, len(parts), pt.size(), min)
			}
			if pt.copy {
				if len(pt.segs) != 1 || !pieces[pt.segs[0].piece].copyable {
					t.Fatalf("copy part %d: %+v", i, pt)
				}
				copied += pt.size()
			} else if pt.size() >= 3*min && pt.segs[len(pt.segs)-1].piece != n-1 {
				// (the last piece, the footer, is uploaded whole however large)
				t.Fatalf("upload part %d of %d bytes (min %d)", i, pt.size(), min)
			}
			for _, s := range pt.segs {
				if s.off < 0 || s.n <= 0 || s.off+s.n > pieces[s.piece].n {
					t.Fatalf("segment %+v outside its piece", s)
				}
				for j := s.off; j < s.off+s.n; j++ {
					got = append(got, byte(s.piece), byte(j))
				}
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatal("segments do not cover the pieces once, in order")
		}
		var bound int64
		for _, p := range pieces {
			if p.copyable && p.n >= 2*min {
				bound += p.n - min
			}
		}
		if copied < bound {
			t.Fatalf("copied %d bytes, want at least %d", copied, bound)
		}
	})
}
