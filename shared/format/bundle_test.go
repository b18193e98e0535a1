package format

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

func TestBundleRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		batches := genBatches(t, 8)
		epoch, slot, nonce := rapid.Uint64().Draw(t, "epoch"), rapid.Uint64().Draw(t, "slot"), genNonce(t)
		obj, err := EncodeBundle(epoch, slot, nonce, batches)
		if err != nil {
			t.Fatalf("EncodeBundle: %v", err)
		}
		env, f, err := DecodeBundle(obj)
		if err != nil {
			t.Fatalf("DecodeBundle: %v", err)
		}
		if _, _, err := VerifyBundle(obj); err != nil {
			t.Fatalf("VerifyBundle: %v", err)
		}
		if env.Kind != KindFlight || env.Epoch != epoch || env.Slot != slot || env.Nonce != nonce || env.ObjectSize != uint64(len(obj)) {
			t.Fatalf("envelope %+v", env)
		}
		if len(f.Extents) != len(batches) {
			t.Fatalf("%d extents for %d batches", len(f.Extents), len(batches))
		}
		for i, x := range f.Extents {
			b := batches[i]
			if x.StreamID != b.StreamID || x.FencingToken != b.FencingToken || x.FirstSeq != b.Records[0].SeqNum ||
				x.Count != uint32(len(b.Records)) || x.MinTimestamp != b.Records[0].Timestamp ||
				x.MaxTimestamp != b.Records[len(b.Records)-1].Timestamp || int(x.Length) != BlockSize(b.Records) {
				t.Fatalf("extent %d = %+v for batch %+v", i, x, b)
			}
			recs, _, err := DecodeBlock(obj[x.Offset : x.Offset+uint64(x.Length)])
			if err != nil {
				t.Fatalf("extent %d: %v", i, err)
			}
			if err := recordsEqual(recs, b.Records); err != nil {
				t.Fatalf("extent %d: %v", i, err)
			}
		}
		footer := obj[env.FooterOffset:]
		f2, err := DecodeBundleFooter(footer)
		if err != nil {
			t.Fatalf("DecodeBundleFooter: %v", err)
		}
		if !bytes.Equal(encodeBundleFooter(f2), footer) {
			t.Fatal("footer does not re-encode to the same bytes")
		}
		// Appending to a buffer gives the same bytes after the prefix, and
		// the envelope's coordinates stay object-relative.
		prefix := rapid.SliceOfN(rapid.Byte(), 0, 100).Draw(t, "prefix")
		out, err := AppendBundle(bytes.Clone(prefix), epoch, slot, nonce, batches)
		if err != nil {
			t.Fatalf("AppendBundle: %v", err)
		}
		if !bytes.Equal(out[:len(prefix)], prefix) || !bytes.Equal(out[len(prefix):], obj) {
			t.Fatal("AppendBundle differs from EncodeBundle")
		}
	})
}

func TestBundleSharesStreamIDs(t *testing.T) {
	obj := sampleBundle(t)
	env, f, err := DecodeBundle(obj)
	if err != nil {
		t.Fatal(err)
	}
	// Two streams in the table, three extents: 16 + 2×(2+len) + 3×45 + tokens + 4.
	want := 16 + (2 + len("s-alpha")) + (2 + len("s-beta")) + 3*45 + len("w1") + len("tok-1") + 4
	if int(env.FooterLen) != want {
		t.Fatalf("footer is %d bytes, want %d", env.FooterLen, want)
	}
	if f.Extents[0].StreamID != "s-alpha" || f.Extents[2].StreamID != "s-alpha" || f.Extents[1].StreamID != "s-beta" {
		t.Fatalf("extents %+v", f.Extents)
	}
}

func TestEmptyBundle(t *testing.T) {
	obj, err := EncodeBundle(1, 0, sampleNonce, nil)
	if err != nil {
		t.Fatal(err)
	}
	env, f, err := DecodeBundle(obj)
	if err != nil {
		t.Fatal(err)
	}
	if len(obj) != EnvelopeSize+bundleFooterMinLen || env.FooterOffset != EnvelopeSize || len(f.Extents) != 0 {
		t.Fatalf("empty bundle: %d bytes, %+v, %+v", len(obj), env, f)
	}
}

func TestEncodeBundleRejects(t *testing.T) {
	recs := sampleRecords(0, 2, 10)
	cases := map[string][]Batch{
		"empty stream id": {{StreamID: "", Records: recs}},
		"long stream id":  {{StreamID: strings.Repeat("s", MaxStreamIDLen+1), Records: recs}},
		"long token":      {{StreamID: "s", FencingToken: strings.Repeat("t", MaxFencingTokenLen+1), Records: recs}},
		"no records":      {{StreamID: "s"}},
		"sparse seqs":     {{StreamID: "s", Records: []Record{{SeqNum: 1}, {SeqNum: 3}}}},
		"second batch bad": {
			{StreamID: "s", Records: recs},
			{StreamID: "t", Records: []Record{{SeqNum: 1, Timestamp: 5}, {SeqNum: 2, Timestamp: 4}}},
		},
	}
	for name, batches := range cases {
		t.Run(name, func(t *testing.T) {
			if _, err := EncodeBundle(1, 1, sampleNonce, batches); !errors.Is(err, ErrInvalid) {
				t.Fatalf("EncodeBundle = %v, want ErrInvalid", err)
			}
			dst := []byte("keep")
			out, err := AppendBundle(dst, 1, 1, sampleNonce, batches)
			if err == nil || string(out) != "keep" {
				t.Fatalf("AppendBundle = %q, %v", out, err)
			}
		})
	}
	ok := []Batch{{StreamID: strings.Repeat("s", MaxStreamIDLen), FencingToken: strings.Repeat("t", MaxFencingTokenLen), Records: recs}}
	if _, err := EncodeBundle(1, 1, sampleNonce, ok); err != nil {
		t.Fatalf("limits exactly: %v", err)
	}
}

// TestBundleCorruption flips every byte of a small bundle: VerifyBundle, and
// the read path (DecodeBundle, then DecodeBlocks of every extent), must each
// reject every flip with an error, never a panic.
func TestBundleCorruption(t *testing.T) {
	obj := sampleBundle(t)
	readPath := func(b []byte) error {
		_, f, err := DecodeBundle(b)
		if err != nil {
			return err
		}
		for _, x := range f.Extents {
			if _, err := DecodeBlocks(b[x.Offset : x.Offset+uint64(x.Length)]); err != nil {
				return err
			}
		}
		return nil
	}
	if err := readPath(obj); err != nil {
		t.Fatal(err)
	}
	for i := range obj {
		for _, mask := range []byte{0xff, 0x01, 0x40} {
			b := bytes.Clone(obj)
			b[i] ^= mask
			if _, _, err := VerifyBundle(b); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("byte %d ^%02x: VerifyBundle = %v", i, mask, err)
			}
			if err := readPath(b); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrVersion) {
				t.Fatalf("byte %d ^%02x: read path = %v", i, mask, err)
			}
		}
	}
	for n := range len(obj) {
		if _, _, err := DecodeBundle(obj[:n]); err == nil {
			t.Fatalf("DecodeBundle accepted %d/%d bytes", n, len(obj))
		}
	}
	if _, _, err := DecodeBundle(append(bytes.Clone(obj), 0)); err == nil {
		t.Fatal("DecodeBundle accepted a trailing byte")
	}
	// A payload flip passes DecodeBundle (headers only) but not VerifyBundle.
	_, f, _ := DecodeBundle(obj)
	b := bytes.Clone(obj)
	b[f.Extents[0].Offset+BlockHeaderSize] ^= 1
	if _, _, err := DecodeBundle(b); err != nil {
		t.Fatalf("DecodeBundle checked a payload byte: %v", err)
	}
	if _, _, err := VerifyBundle(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("VerifyBundle missed a payload flip: %v", err)
	}
}

// TestBundleFooterStructuralChecks mutates the footer and reseals its CRC, so
// the checks behind the checksum are what must reject it.
func TestBundleFooterStructuralChecks(t *testing.T) {
	obj := sampleBundle(t)
	env, _, err := DecodeBundle(obj)
	if err != nil {
		t.Fatal(err)
	}
	footer := obj[env.FooterOffset:]
	const tbl = bundleFooterHeaderLen
	ext0 := tbl + 2 + len("s-alpha") + 2 + len("s-beta") // first extent
	ext1 := ext0 + extentFixedLen                        // token-less first extent
	mutate := map[string]func(b []byte) []byte{
		"version":           func(b []byte) []byte { b[4] = 9; return b },
		"reserved":          func(b []byte) []byte { b[7] = 1; return b },
		"streams > extents": func(b []byte) []byte { le.PutUint32(b[8:], 4); return b },
		"stream unused":     func(b []byte) []byte { le.PutUint32(b[8:], 3); return b },
		"extent count":      func(b []byte) []byte { le.PutUint32(b[12:], 0xffffffff); return b },
		"extent missing":    func(b []byte) []byte { le.PutUint32(b[12:], 2); return b },
		"empty stream id":   func(b []byte) []byte { le.PutUint16(b[tbl:], 0); return b },
		"long stream id":    func(b []byte) []byte { le.PutUint16(b[tbl:], 600); return b },
		"index order":       func(b []byte) []byte { le.PutUint32(b[ext0:], 1); return b },
		"index range":       func(b []byte) []byte { le.PutUint32(b[ext1:], 7); return b },
		"offset":            func(b []byte) []byte { le.PutUint64(b[ext0+16:], 61); return b },
		"zero count":        func(b []byte) []byte { le.PutUint32(b[ext0+12:], 0); return b },
		"min above max":     func(b []byte) []byte { le.PutUint64(b[ext0+28:], 1<<62); return b },
		"token too long":    func(b []byte) []byte { b[ext0+44] = MaxFencingTokenLen + 1; return b },
		"token overruns":    func(b []byte) []byte { b[ext1+44] = 30; return b },
		"trailing byte":     func(b []byte) []byte { return append(b[:len(b)-4:len(b)-4], 0, 0, 0, 0, 0) },
	}
	for name, m := range mutate {
		t.Run(name, func(t *testing.T) {
			b := resealTail(m(bytes.Clone(footer)))
			_, err := DecodeBundleFooter(b)
			if err == nil {
				t.Fatal("accepted")
			}
			t.Log(err)
		})
	}
	if _, err := DecodeBundleFooter(resealTail(footer)); err != nil {
		t.Fatalf("resealing alone broke the footer: %v", err)
	}
	// Two table entries with one id: rename stream "bb" to "aa".
	dup := encodeBundleFooter(BundleFooter{Extents: []Extent{
		{StreamID: "aa", FirstSeq: 0, Count: 1, Offset: EnvelopeSize, Length: 55},
		{StreamID: "bb", FirstSeq: 0, Count: 1, Offset: EnvelopeSize + 55, Length: 55},
	}})
	if _, err := DecodeBundleFooter(dup); err != nil {
		t.Fatalf("two-stream footer: %v", err)
	}
	unused := bytes.Clone(dup)
	le.PutUint32(unused[tbl+2*(2+2)+extentFixedLen:], 0) // second extent names stream 0
	if _, err := DecodeBundleFooter(resealTail(unused)); err == nil || !strings.Contains(err.Error(), "unused") {
		t.Fatalf("unused stream: %v", err)
	}
	copy(dup[tbl+2+2+2:], "aa")
	if _, err := DecodeBundleFooter(resealTail(dup)); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("duplicate stream id: %v", err)
	}
	// An extent whose footer fields disagree with its block is caught by
	// DecodeBundle's cross-check even with a valid footer CRC.
	b := bytes.Clone(obj)
	fb := b[env.FooterOffset:]
	le.PutUint64(fb[ext0+36:], le.Uint64(fb[ext0+36:])+1) // max timestamp
	copy(fb, resealTail(fb))
	if _, _, err := DecodeBundle(b); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("extent/block mismatch: %v", err)
	}
}
