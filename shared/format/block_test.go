package format

import (
	"bytes"
	"errors"
	"math"
	"testing"

	"pgregory.net/rapid"
)

func TestBlockRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		recs := genRecords(t, "recs", 40)
		prefix := rapid.SliceOfN(rapid.Byte(), 0, 16).Draw(t, "prefix")
		if err := CheckBlock(recs); err != nil {
			t.Fatalf("CheckBlock: %v", err)
		}
		out := AppendBlock(bytes.Clone(prefix), recs)
		if !bytes.Equal(out[:len(prefix)], prefix) {
			t.Fatalf("AppendBlock changed the prefix")
		}
		blk := out[len(prefix):]
		if len(blk) != BlockSize(recs) {
			t.Fatalf("block is %d bytes, BlockSize says %d", len(blk), BlockSize(recs))
		}
		got, info, err := DecodeBlock(blk)
		if err != nil {
			t.Fatalf("DecodeBlock: %v", err)
		}
		if err := recordsEqual(got, recs); err != nil {
			t.Fatal(err)
		}
		want := BlockInfo{FirstSeq: recs[0].SeqNum, Count: uint32(len(recs)), MinTimestamp: recs[0].Timestamp,
			MaxTimestamp: recs[len(recs)-1].Timestamp, Length: uint32(len(blk))}
		if info != want {
			t.Fatalf("info %+v, want %+v", info, want)
		}
		if peek, err := PeekBlock(blk[:BlockHeaderSize]); err != nil || peek != want {
			t.Fatalf("PeekBlock = %+v, %v; want %+v", peek, err, want)
		}
		if v, err := VerifyBlock(blk); err != nil || v != want {
			t.Fatalf("VerifyBlock = %+v, %v", v, err)
		}
	})
}

func TestDecodeBlocksRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 6).Draw(t, "blocks")
		var all []Record
		var buf []byte
		ends := map[int]int{} // block boundary -> records before it
		for range n {
			recs := genRecords(t, "recs", 10)
			all = append(all, recs...)
			buf = AppendBlock(buf, recs)
			ends[len(buf)] = len(all)
		}
		got, err := DecodeBlocks(buf)
		if err != nil {
			t.Fatalf("DecodeBlocks: %v", err)
		}
		if err := recordsEqual(got, all); err != nil {
			t.Fatal(err)
		}
		// A prefix ending on a block boundary is a shorter valid range; any
		// other prefix is a torn range and must fail.
		cut := rapid.IntRange(0, len(buf)-1).Draw(t, "cut")
		got, err = DecodeBlocks(buf[:cut])
		if n, ok := ends[cut]; ok {
			if err != nil {
				t.Fatalf("DecodeBlocks of the first %d bytes: %v", cut, err)
			}
			if err := recordsEqual(got, all[:n]); err != nil {
				t.Fatal(err)
			}
		} else if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("DecodeBlocks of %d/%d bytes: %v, want ErrCorrupt", cut, len(buf), err)
		}
	})
}

func TestDecodeBlockAliasingIsClipped(t *testing.T) {
	recs := []Record{
		{SeqNum: 5, Timestamp: 1, Headers: []Header{{Name: []byte("n"), Value: []byte("v")}}, Body: []byte("first")},
		{SeqNum: 6, Timestamp: 2, Body: []byte("second")},
	}
	blk := AppendBlock(nil, recs)
	got, _, err := DecodeBlock(blk)
	if err != nil {
		t.Fatal(err)
	}
	_ = append(got[0].Body, "XXXXXXXX"...)
	_ = append(got[0].Headers[0].Name, 'X')
	_ = append(got[0].Headers[0].Value, 'X')
	_ = append(got[0].Headers, Header{Name: []byte("X")})
	if _, err := VerifyBlock(blk); err != nil {
		t.Fatalf("appending to decoded fields corrupted the block: %v", err)
	}
	if string(got[1].Body) != "second" {
		t.Fatalf("neighbour body changed to %q", got[1].Body)
	}
	if got[1].Headers != nil {
		t.Fatalf("record without headers decoded %d headers", len(got[1].Headers))
	}
}

func TestCheckBlockRejects(t *testing.T) {
	ok := func() []Record { return sampleRecords(10, 3, 100) }
	tooMany := make([]Record, MaxBlockRecords+1)
	for i := range tooMany {
		tooMany[i].SeqNum = uint64(i)
	}
	cases := map[string][]Record{
		"empty":    nil,
		"too many": tooMany,
		"gap": func() []Record {
			r := ok()
			r[2].SeqNum++
			return r
		}(),
		"decreasing timestamp": func() []Record {
			r := ok()
			r[1].Timestamp = 99
			return r
		}(),
		"seq overflow": {{SeqNum: math.MaxUint64}},
		"too large":    {{Body: make([]byte, MaxBlockSize)}},
	}
	for name, recs := range cases {
		t.Run(name, func(t *testing.T) {
			if err := CheckBlock(recs); !errors.Is(err, ErrInvalid) {
				t.Fatalf("CheckBlock = %v, want ErrInvalid", err)
			}
			defer func() {
				if recover() == nil {
					t.Fatal("AppendBlock did not panic")
				}
			}()
			AppendBlock(nil, recs)
		})
	}
	if err := CheckBlock(ok()); err != nil {
		t.Fatalf("valid records: %v", err)
	}
	// The last seq may be MaxUint64-1: EndSeq must stay representable.
	if err := CheckBlock([]Record{{SeqNum: math.MaxUint64 - 1}}); err != nil {
		t.Fatalf("seq MaxUint64-1: %v", err)
	}
}

// TestBlockCorruption flips every byte of a small block, and truncates it at
// every length: each must give an error, never a panic.
func TestBlockCorruption(t *testing.T) {
	blk := AppendBlock(nil, sampleRecords(3, 5, 1000))
	for i := range blk {
		for _, mask := range []byte{0xff, 0x01, 0x80} {
			b := bytes.Clone(blk)
			b[i] ^= mask
			if _, _, err := DecodeBlock(b); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("byte %d ^%02x: DecodeBlock = %v", i, mask, err)
			}
			if _, err := DecodeBlocks(b); err == nil {
				t.Fatalf("byte %d ^%02x: DecodeBlocks accepted", i, mask)
			}
		}
	}
	for n := range len(blk) {
		if _, _, err := DecodeBlock(blk[:n]); err == nil {
			t.Fatalf("DecodeBlock accepted %d/%d bytes", n, len(blk))
		}
	}
	if _, _, err := DecodeBlock(append(bytes.Clone(blk), 0)); err == nil {
		t.Fatal("DecodeBlock accepted a trailing byte")
	}
}

// TestBlockStructuralChecks reseals the CRCs after each mutation, so the
// checks behind the checksums are what must reject it.
func TestBlockStructuralChecks(t *testing.T) {
	recs := []Record{
		{SeqNum: 9, Timestamp: 50, Headers: []Header{{Name: []byte("k"), Value: []byte("v")}}, Body: []byte("ab")},
		{SeqNum: 10, Timestamp: 60, Body: []byte("c")},
	}
	blk := AppendBlock(nil, recs)
	p := BlockHeaderSize // payload: 00 01 01 'k' 01 'v' 02 'a' 'b' | 0a 00 01 'c'
	mutate := map[string]func(b []byte) []byte{
		"version 2":           func(b []byte) []byte { b[blkOffVersion] = 2; return b },
		"flags":               func(b []byte) []byte { b[blkOffFlags] = 1; return b },
		"reserved":            func(b []byte) []byte { b[blkOffReserved] = 1; return b },
		"zero count":          func(b []byte) []byte { le.PutUint32(b[blkOffCount:], 0); return b },
		"count too large":     func(b []byte) []byte { le.PutUint32(b[blkOffCount:], MaxBlockRecords+1); return b },
		"count 3":             func(b []byte) []byte { le.PutUint32(b[blkOffCount:], 3); return b },
		"count 1":             func(b []byte) []byte { le.PutUint32(b[blkOffCount:], 1); return b },
		"min above max":       func(b []byte) []byte { le.PutUint64(b[blkOffMinTs:], 61); return b },
		"max too high":        func(b []byte) []byte { le.PutUint64(b[blkOffMaxTs:], 61); return b },
		"max too low":         func(b []byte) []byte { le.PutUint64(b[blkOffMaxTs:], 59); return b },
		"header count high":   func(b []byte) []byte { le.PutUint32(b[blkOffHeaders:], 2); return b },
		"header count low":    func(b []byte) []byte { le.PutUint32(b[blkOffHeaders:], 0); return b },
		"header count absurd": func(b []byte) []byte { le.PutUint32(b[blkOffHeaders:], math.MaxUint32); return b },
		"length short":        func(b []byte) []byte { le.PutUint32(b[blkOffLength:], uint32(len(b)-1)); return b },
		"length absurd":       func(b []byte) []byte { le.PutUint32(b[blkOffLength:], math.MaxUint32); return b },
		"first delta nonzero": func(b []byte) []byte { b[p], b[p+9] = 1, 9; return b }, // still ends at max
		"body overruns":       func(b []byte) []byte { b[p+6] = 0x7f; return b },
		"name overruns":       func(b []byte) []byte { b[p+2] = 0x7f; return b },
		"seq overflow":        func(b []byte) []byte { le.PutUint64(b[blkOffFirstSeq:], math.MaxUint64-1); return b },
		"non-minimal varint": func(b []byte) []byte {
			// Re-frame the last body length (01) as 81 00: same value, two bytes.
			n := len(b)
			b = append(b[:n-2:n-2], 0x81, 0x00, 'c')
			le.PutUint32(b[blkOffLength:], uint32(len(b)))
			return b
		},
	}
	for name, m := range mutate {
		t.Run(name, func(t *testing.T) {
			b := resealBlock(m(bytes.Clone(blk)))
			_, _, err := DecodeBlock(b)
			if err == nil {
				t.Fatal("accepted")
			}
			t.Log(err)
		})
	}
	if _, _, err := DecodeBlock(resealBlock(blk)); err != nil {
		t.Fatalf("resealing alone broke the block: %v", err)
	}
	b := bytes.Clone(blk)
	b[blkOffVersion] = 2
	if _, _, err := DecodeBlock(resealBlock(b)); !errors.Is(err, ErrVersion) {
		t.Fatalf("version 2: %v, want ErrVersion", err)
	}
}

func TestDecodeBlocksEmpty(t *testing.T) {
	if _, err := DecodeBlocks(nil); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("DecodeBlocks(nil) = %v", err)
	}
}

func TestReadUvarint(t *testing.T) {
	cases := []struct {
		in   []byte
		v    uint64
		n    int
		good bool
	}{
		{[]byte{0}, 0, 1, true},
		{[]byte{0x7f}, 127, 1, true},
		{[]byte{0x80, 0x01}, 128, 2, true},
		{[]byte{0x80, 0x00}, 0, 0, false},
		{[]byte{0x80}, 0, 0, false},
		{nil, 0, 0, false},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, math.MaxUint64, 10, true},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02}, 0, 0, false},
		{[]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x81, 0x00}, 0, 0, false},
	}
	for _, c := range cases {
		v, n, ok := readUvarint(c.in, 0)
		if ok != c.good || (ok && (v != c.v || n != c.n)) {
			t.Errorf("readUvarint(%x) = %d, %d, %v; want %d, %d, %v", c.in, v, n, ok, c.v, c.n, c.good)
		}
	}
	for _, x := range []uint64{0, 1, 127, 128, 1<<14 - 1, 1 << 14, 1<<63 - 1, 1 << 63, math.MaxUint64} {
		if got, want := uvarintLen(x), len(binaryUvarint(x)); got != want {
			t.Errorf("uvarintLen(%d) = %d, want %d", x, got, want)
		}
	}
}
