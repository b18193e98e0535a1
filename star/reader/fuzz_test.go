package reader

import (
	"errors"
	"testing"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// FuzzDecodeRef: any row value either decodes into a row the walk can
// trust (non-empty extent; slot refs tiling it) or fails with
// ErrCorruptRow; never a panic.
func FuzzDecodeRef(f *testing.F) {
	f.Add(uint64(10), []byte(`{"first":10,"end":20,"span":{"class":"express","star":"s","epoch":1,"slots":[{"slot":3,"first":10,"n":4,"off":60,"len":70},{"slot":4,"first":14,"n":6,"off":60,"len":80}]}}`))
	f.Add(uint64(10), []byte(`{"first":10,"end":20,"settled":{"epoch":1,"first":0,"bytes":100}}`))
	f.Add(uint64(0), []byte(`{"first":0,"end":18446744073709551615,"span":{"class":"standard","star":"s","slots":[{"first":0,"n":18446744073709551615,"len":1}]}}`))
	f.Add(uint64(5), []byte(`{"first":5,"end":4}`))
	f.Add(uint64(0), []byte(`null`))
	f.Fuzz(func(t *testing.T, first uint64, val []byte) {
		ref, err := decodeRef("x", refItem("x", first, string(val)))
		if err != nil {
			if !errors.Is(err, ErrCorruptRow) {
				t.Fatalf("error without ErrCorruptRow: %v", err)
			}
			return
		}
		if ref.FirstSeq != first || ref.EndSeq <= ref.FirstSeq || (ref.Span == nil) == (ref.Settled == nil) {
			t.Fatalf("accepted %+v", ref)
		}
		if ref.Span != nil {
			seq := ref.FirstSeq
			for _, sl := range ref.Span.Slots {
				if sl.FirstSeq != seq || sl.Count == 0 {
					t.Fatalf("accepted untiled slots %+v", ref.Span.Slots)
				}
				seq += sl.Count
			}
			if seq != ref.EndSeq {
				t.Fatalf("slots end at %d, row at %d", seq, ref.EndSeq)
			}
		}
	})
}

// FuzzDecodeExtent: bytes served for a slot ref either decode into exactly
// the ref's seqs or fail with an error; never a panic.
func FuzzDecodeExtent(f *testing.F) {
	recs := recsOf(7, 20, 30, 40)
	b := format.AppendBlock(nil, recs[:2])
	b = format.AppendBlock(b, recs[2:])
	f.Add(b, uint64(7), uint64(3))
	f.Add(b[:len(b)-1], uint64(7), uint64(3))
	f.Add(format.AppendBlock(nil, recsOf(0, 8)), uint64(0), uint64(1))
	f.Add([]byte{}, uint64(0), uint64(0))
	f.Fuzz(func(t *testing.T, b []byte, first, n uint64) {
		got, err := decodeExtent(b, meta.SlotRef{FirstSeq: first, Count: n, Length: uint64(len(b))})
		if err != nil {
			return
		}
		if uint64(len(got)) != n {
			t.Fatalf("%d records for a ref of %d", len(got), n)
		}
		for i, r := range got {
			if r.SeqNum != first+uint64(i) {
				t.Fatalf("record %d has seq %d", i, r.SeqNum)
			}
		}
	})
}
