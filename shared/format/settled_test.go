package format

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

// genSettled draws a settled object: 1..maxBlocks seq-contiguous blocks of
// one stream with non-decreasing timestamps across blocks.
func genSettled(t *rapid.T, maxBlocks int) ([]byte, SettledFooter, []Record) {
	n := rapid.IntRange(1, maxBlocks).Draw(t, "blocks")
	seq := rapid.Uint64Range(0, 1<<40).Draw(t, "first")
	ts := rapid.Uint64Range(0, 1<<45).Draw(t, "ts")
	var obj []byte
	var infos []BlockInfo
	var all []Record
	for range n {
		recs := genRecords(t, "recs", 6)
		// Rebase onto the stream's running seq and timestamp.
		base := recs[0].Timestamp
		for i := range recs {
			recs[i].SeqNum = seq + uint64(i)
			recs[i].Timestamp = ts + min(recs[i].Timestamp-base, 1<<20)
		}
		start := len(obj)
		obj = AppendBlock(obj, recs)
		info, err := PeekBlock(obj[start:])
		if err != nil {
			t.Fatal(err)
		}
		infos = append(infos, info)
		all = append(all, recs...)
		seq = info.EndSeq()
		ts = info.MaxTimestamp + rapid.Uint64Range(0, 5).Draw(t, "gap")
	}
	f, err := NewSettledFooter(genStreamID(t, "stream"), infos)
	if err != nil {
		t.Fatalf("NewSettledFooter: %v", err)
	}
	return append(obj, EncodeSettledFooter(f)...), f, all
}

func TestSettledRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		obj, f, all := genSettled(t, 12)
		got, err := VerifySettledObject(obj)
		if err != nil {
			t.Fatalf("VerifySettledObject: %v", err)
		}
		if got.StreamID != f.StreamID || got.FirstSeq != f.FirstSeq || got.EndSeq != f.EndSeq ||
			len(got.Entries) != len(f.Entries) {
			t.Fatalf("got %+v, want %+v", got, f)
		}
		for i := range f.Entries {
			if got.Entries[i] != f.Entries[i] {
				t.Fatalf("entry %d: %+v, want %+v", i, got.Entries[i], f.Entries[i])
			}
		}
		// A reader's path: suffix -> trailer -> footer -> blocks.
		suffix := obj[len(obj)-min(len(obj), rapid.IntRange(SettledTrailerSize, 4096).Draw(t, "suffix")):]
		off, n, err := LocateSettledFooter(uint64(len(obj)), suffix)
		if err != nil {
			t.Fatalf("LocateSettledFooter: %v", err)
		}
		if off != f.BlocksLen() || off+uint64(n)+SettledTrailerSize != uint64(len(obj)) {
			t.Fatalf("footer at [%d,+%d) in %d bytes, blocks end at %d", off, n, len(obj), f.BlocksLen())
		}
		footer := obj[off : off+uint64(n)]
		if _, err := DecodeSettledFooter(footer); err != nil {
			t.Fatalf("DecodeSettledFooter: %v", err)
		}
		if re := EncodeSettledFooter(got); !bytes.Equal(re, obj[off:]) {
			t.Fatal("footer does not re-encode to the same bytes")
		}
		recs, err := DecodeBlocks(obj[:off])
		if err != nil {
			t.Fatalf("DecodeBlocks: %v", err)
		}
		if err := recordsEqual(recs, all); err != nil {
			t.Fatal(err)
		}
		// Find and FindTime agree with a linear scan over the records.
		for _, r := range all {
			e, ok := got.Find(r.SeqNum)
			if !ok || r.SeqNum < e.FirstSeq || r.SeqNum >= e.EndSeq() {
				t.Fatalf("Find(%d) = %+v, %v", r.SeqNum, e, ok)
			}
		}
		for _, s := range []uint64{f.FirstSeq - 1, f.EndSeq, f.EndSeq + 1, math.MaxUint64} {
			if s >= f.FirstSeq && s < f.EndSeq {
				continue
			}
			if e, ok := got.Find(s); ok {
				t.Fatalf("Find(%d) outside [%d,%d) = %+v", s, f.FirstSeq, f.EndSeq, e)
			}
		}
		probe := rapid.Uint64Range(0, all[len(all)-1].Timestamp+2).Draw(t, "probe")
		e, ok := got.FindTime(probe)
		var first *Record
		for i := range all {
			if all[i].Timestamp >= probe {
				first = &all[i]
				break
			}
		}
		switch {
		case first == nil && ok:
			t.Fatalf("FindTime(%d) = %+v, but no record is that late", probe, e)
		case first != nil && (!ok || first.SeqNum < e.FirstSeq || first.SeqNum >= e.EndSeq()):
			t.Fatalf("FindTime(%d) = %+v, %v; first record at or after is seq %d", probe, e, ok, first.SeqNum)
		}
	})
}

func TestSettledFooterValidate(t *testing.T) {
	_, good := sampleSettled(t)
	clone := func() SettledFooter {
		f := good
		f.Entries = append([]SettledEntry(nil), good.Entries...)
		return f
	}
	cases := map[string]func(f *SettledFooter){
		"empty stream id":  func(f *SettledFooter) { f.StreamID = "" },
		"long stream id":   func(f *SettledFooter) { f.StreamID = strings.Repeat("x", MaxStreamIDLen+1) },
		"no entries":       func(f *SettledFooter) { f.Entries = nil },
		"first seq":        func(f *SettledFooter) { f.FirstSeq++ },
		"end seq":          func(f *SettledFooter) { f.EndSeq++ },
		"seq gap":          func(f *SettledFooter) { f.Entries[1].FirstSeq++ },
		"offset gap":       func(f *SettledFooter) { f.Entries[2].Offset++ },
		"nonzero start":    func(f *SettledFooter) { f.Entries[0].Offset = 1 },
		"zero count":       func(f *SettledFooter) { f.Entries[1].Count = 0 },
		"short block":      func(f *SettledFooter) { f.Entries[1].Length = BlockHeaderSize },
		"min above max":    func(f *SettledFooter) { f.Entries[0].MinTimestamp = f.Entries[0].MaxTimestamp + 1 },
		"time goes back":   func(f *SettledFooter) { f.Entries[1].MinTimestamp = f.Entries[0].MaxTimestamp - 1 },
		"too many records": func(f *SettledFooter) { f.Entries[2].Count = MaxBlockRecords + 1 },
	}
	for name, m := range cases {
		t.Run(name, func(t *testing.T) {
			f := clone()
			m(&f)
			if err := f.Validate(); !errors.Is(err, ErrInvalid) {
				t.Fatalf("Validate = %v, want ErrInvalid", err)
			}
			if out, err := AppendSettledFooter([]byte("keep"), f); err == nil || string(out) != "keep" {
				t.Fatalf("AppendSettledFooter = %q, %v", out, err)
			}
			defer func() {
				if recover() == nil {
					t.Fatal("EncodeSettledFooter did not panic")
				}
			}()
			EncodeSettledFooter(f)
		})
	}
	if _, err := NewSettledFooter("s", nil); !errors.Is(err, ErrInvalid) {
		t.Fatalf("NewSettledFooter with no blocks: %v", err)
	}
}

// TestSettledCorruption flips every byte of a small settled object:
// VerifySettledObject verifies every byte, so each flip must give an error.
func TestSettledCorruption(t *testing.T) {
	obj, _ := sampleSettled(t)
	for i := range obj {
		for _, mask := range []byte{0xff, 0x01, 0x80} {
			b := bytes.Clone(obj)
			b[i] ^= mask
			if _, err := VerifySettledObject(b); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("byte %d ^%02x: VerifySettledObject = %v", i, mask, err)
			}
		}
	}
	for n := range len(obj) {
		if _, err := VerifySettledObject(obj[n:]); err == nil && n > 0 {
			t.Fatalf("accepted object missing its first %d bytes", n)
		}
		if _, err := VerifySettledObject(obj[:n]); err == nil {
			t.Fatalf("accepted %d/%d bytes", n, len(obj))
		}
	}
}

func TestSettledFooterStructuralChecks(t *testing.T) {
	obj, f := sampleSettled(t)
	footer := obj[f.BlocksLen() : len(obj)-SettledTrailerSize]
	h := settledFooterHeaderLen + len(f.StreamID) // first entry
	mutate := map[string]func(b []byte) []byte{
		"version":         func(b []byte) []byte { b[4] = 2; return b },
		"reserved":        func(b []byte) []byte { b[5] = 1; return b },
		"empty id":        func(b []byte) []byte { le.PutUint16(b[6:], 0); return b },
		"id overruns":     func(b []byte) []byte { le.PutUint16(b[6:], 500); return b },
		"end seq":         func(b []byte) []byte { le.PutUint64(b[16:], le.Uint64(b[16:])+1); return b },
		"no entries":      func(b []byte) []byte { le.PutUint32(b[24:], 0); return b },
		"entries absurd":  func(b []byte) []byte { le.PutUint32(b[24:], math.MaxUint32); return b },
		"entry missing":   func(b []byte) []byte { le.PutUint32(b[24:], 2); return b },
		"extra entry":     func(b []byte) []byte { le.PutUint32(b[24:], 4); return b },
		"count zero":      func(b []byte) []byte { b[h] = 0; return b },
		"count continues": func(b []byte) []byte { b[h] |= 0x80; return b },
		"trailing bytes":  func(b []byte) []byte { return append(b[:len(b)-4:len(b)-4], 0, 0, 0, 0, 0) },
		"seq overflow":    func(b []byte) []byte { le.PutUint64(b[8:], math.MaxUint64-2); return b },
		"truncated entry": func(b []byte) []byte { return append(b[:len(b)-5:len(b)-5], 0, 0, 0, 0) },
	}
	for name, m := range mutate {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeSettledFooter(resealTail(m(bytes.Clone(footer))))
			if err == nil {
				t.Fatal("accepted")
			}
			t.Log(err)
		})
	}
	if _, err := DecodeSettledFooter(resealTail(footer)); err != nil {
		t.Fatalf("resealing alone broke the footer: %v", err)
	}
	// Timestamp deltas that overflow u64.
	huge := EncodeSettledFooter(SettledFooter{StreamID: "s", FirstSeq: 0, EndSeq: 1,
		Entries: []SettledEntry{{FirstSeq: 0, Count: 1, Length: 55, MinTimestamp: math.MaxUint64, MaxTimestamp: math.MaxUint64}}})
	b := huge[:len(huge)-SettledTrailerSize]
	if _, err := DecodeSettledFooter(b); err != nil {
		t.Fatalf("max timestamps: %v", err)
	}
	b = bytes.Clone(b)
	b[len(b)-5] = 1 // span uvarint: max = min + 1 overflows
	if _, err := DecodeSettledFooter(resealTail(b)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("overflowing timestamp: %v", err)
	}
}

func TestSettledTrailer(t *testing.T) {
	obj, f := sampleSettled(t)
	n, err := DecodeSettledTrailer(obj)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(n)+SettledTrailerSize+f.BlocksLen() != uint64(len(obj)) {
		t.Fatalf("trailer says footer of %d bytes", n)
	}
	if _, err := DecodeSettledTrailer(obj[len(obj)-SettledTrailerSize+1:]); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short trailer: %v", err)
	}
	small := bytes.Clone(obj[len(obj)-SettledTrailerSize:])
	le.PutUint32(small, settledFooterMinLen-1)
	if _, err := DecodeSettledTrailer(small); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("tiny footer length: %v", err)
	}
	if _, _, err := LocateSettledFooter(uint64(n)+SettledTrailerSize-1, obj); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("footer larger than object: %v", err)
	}
	if off, _, err := LocateSettledFooter(uint64(n)+SettledTrailerSize, obj); err != nil || off != 0 {
		t.Fatalf("footer filling object: %d, %v", off, err)
	}
}

func TestFindEdges(t *testing.T) {
	var empty SettledFooter
	if _, ok := empty.Find(0); ok {
		t.Fatal("Find on an empty footer")
	}
	if _, ok := empty.FindTime(0); ok {
		t.Fatal("FindTime on an empty footer")
	}
	_, f := sampleSettled(t)
	if e, ok := f.FindTime(0); !ok || e != f.Entries[0] {
		t.Fatalf("FindTime(0) = %+v, %v", e, ok)
	}
	last := f.Entries[len(f.Entries)-1]
	if _, ok := f.FindTime(last.MaxTimestamp + 1); ok {
		t.Fatal("FindTime past the end")
	}
	if e, ok := f.Find(f.EndSeq - 1); !ok || e != last {
		t.Fatalf("Find(last) = %+v, %v", e, ok)
	}
}
