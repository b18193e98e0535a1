package format

import (
	"bytes"
	"testing"
)

// Every fuzz target checks: no panic, and whatever decodes re-encodes to the
// same bytes (all layouts are canonical). Each target also decodes a copy of
// the input with its checksums recomputed, so the fuzzer exercises the
// structural checks behind the CRCs instead of stopping at them. Seeds are
// valid encodings, so `go test` alone runs them.

func seedBlocks(f *testing.F) {
	f.Add(AppendBlock(nil, sampleRecords(0, 1, 0)))
	f.Add(AppendBlock(nil, sampleRecords(1000, 6, 1_700_000_000_000)))
	f.Add(AppendBlock(nil, []Record{{SeqNum: 1<<64 - 2, Timestamp: 1<<64 - 1}}))
	f.Add(AppendBlock(nil, []Record{{SeqNum: 3, Timestamp: 1, Headers: []Header{{}, {Name: []byte("a")}}}, {SeqNum: 4, Timestamp: 300}}))
}

func FuzzDecodeEnvelope(f *testing.F) {
	f.Add(EncodePoison(1, 2, sampleNonce))
	f.Add(sampleBundle(f)[:EnvelopeSize])
	f.Add(make([]byte, EnvelopeSize))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, resealEnvelope(b)} {
			e, err := DecodeEnvelope(in)
			if err != nil {
				continue
			}
			if m := e.Marshal(); !bytes.Equal(m[:], in[:EnvelopeSize]) {
				t.Fatalf("%+v re-encodes to %x, decoded from %x", e, m, in[:EnvelopeSize])
			}
		}
	})
}

func FuzzPeekBlock(f *testing.F) {
	seedBlocks(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, resealBlock(b)} {
			info, err := PeekBlock(in)
			if err != nil {
				continue
			}
			v, verr := VerifyBlock(in)
			if verr == nil && v != info {
				t.Fatalf("VerifyBlock %+v, PeekBlock %+v", v, info)
			}
			if _, dinfo, derr := DecodeBlock(in); derr == nil && dinfo != info {
				t.Fatalf("DecodeBlock %+v, PeekBlock %+v", dinfo, info)
			}
		}
	})
}

func FuzzDecodeBlock(f *testing.F) {
	seedBlocks(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, resealBlock(b)} {
			recs, info, err := DecodeBlock(in)
			if err != nil {
				continue
			}
			if err := CheckBlock(recs); err != nil {
				t.Fatalf("decoded records fail CheckBlock: %v", err)
			}
			if re := AppendBlock(nil, recs); !bytes.Equal(re, in) {
				t.Fatalf("block re-encodes differently:\n got %x\nwant %x", re, in)
			}
			if int(info.Length) != len(in) || info.Count != uint32(len(recs)) {
				t.Fatalf("info %+v for %d bytes, %d records", info, len(in), len(recs))
			}
		}
	})
}

func FuzzDecodeBlocks(f *testing.F) {
	seedBlocks(f)
	f.Add(AppendBlock(AppendBlock(nil, sampleRecords(0, 2, 5)), sampleRecords(2, 3, 9)))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, resealBlock(b)} {
			recs, err := DecodeBlocks(in)
			if err != nil {
				continue
			}
			// Re-encode block by block, splitting the records as the
			// headers did.
			var re []byte
			for off := 0; off < len(in); {
				info, err := PeekBlock(in[off:])
				if err != nil {
					t.Fatalf("DecodeBlocks accepted what PeekBlock rejects at %d: %v", off, err)
				}
				re = AppendBlock(re, recs[:info.Count])
				recs = recs[info.Count:]
				off += int(info.Length)
			}
			if len(recs) != 0 || !bytes.Equal(re, in) {
				t.Fatalf("blocks re-encode differently (%d records left over)", len(recs))
			}
		}
	})
}

func FuzzDecodeBundleFooter(f *testing.F) {
	obj := sampleBundle(f)
	env, _ := DecodeEnvelope(obj)
	f.Add(obj[env.FooterOffset:])
	empty, _ := EncodeBundle(0, 0, Nonce{}, nil)
	f.Add(empty[EnvelopeSize:])
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, resealTail(b)} {
			foot, err := DecodeBundleFooter(in)
			if err != nil {
				continue
			}
			if re := encodeBundleFooter(foot); !bytes.Equal(re, in) {
				t.Fatalf("footer re-encodes differently:\n got %x\nwant %x", re, in)
			}
		}
	})
}

func FuzzDecodeBundle(f *testing.F) {
	f.Add(sampleBundle(f))
	empty, _ := EncodeBundle(0, 0, Nonce{}, nil)
	f.Add(empty)
	f.Add(EncodePoison(1, 1, sampleNonce))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, resealBundle(b)} {
			env, foot, err := DecodeBundle(in)
			if err != nil {
				continue
			}
			batches := make([]Batch, len(foot.Extents))
			payloadOK := true
			for i, x := range foot.Extents {
				recs, _, err := DecodeBlock(in[x.Offset : x.Offset+uint64(x.Length)])
				if err != nil {
					payloadOK = false
					break
				}
				batches[i] = Batch{StreamID: x.StreamID, FencingToken: x.FencingToken, Records: recs}
			}
			// DecodeBlock checks the payload CRC and more, so what it accepts
			// VerifyBundle must accept.
			if _, _, err := VerifyBundle(in); err != nil && payloadOK {
				t.Fatalf("VerifyBundle = %v, but every block decodes", err)
			}
			if !payloadOK {
				continue
			}
			re, err := EncodeBundle(env.Epoch, env.Slot, env.Nonce, batches)
			if err != nil {
				t.Fatalf("decoded bundle does not re-encode: %v", err)
			}
			if !bytes.Equal(re, in) {
				t.Fatalf("bundle re-encodes differently:\n got %x\nwant %x", re, in)
			}
		}
	})
}

// resealBundle recomputes the envelope and footer CRCs when the envelope's
// footer coordinates fit the input.
func resealBundle(b []byte) []byte {
	b = resealEnvelope(b)
	if len(b) < EnvelopeSize {
		return b
	}
	off, n := uint64(le.Uint32(b[envOffFooter:])), uint64(le.Uint32(b[envOffFootLen:]))
	if off >= EnvelopeSize && off+n == uint64(len(b)) && n >= 4 {
		copy(b[off:], resealTail(b[off:]))
	}
	return b
}

func FuzzDecodeSettledFooter(f *testing.F) {
	obj, foot := sampleSettled(f)
	f.Add(obj[foot.BlocksLen() : len(obj)-SettledTrailerSize])
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, in := range [][]byte{b, resealTail(b)} {
			got, err := DecodeSettledFooter(in)
			if err != nil {
				continue
			}
			re, err := AppendSettledFooter(nil, got)
			if err != nil {
				t.Fatalf("decoded footer fails Validate: %v", err)
			}
			if !bytes.Equal(re[:len(re)-SettledTrailerSize], in) {
				t.Fatalf("footer re-encodes differently:\n got %x\nwant %x", re, in)
			}
			if n, err := DecodeSettledTrailer(re); err != nil || int(n) != len(in) {
				t.Fatalf("trailer of re-encoded footer: %d, %v", n, err)
			}
		}
	})
}

func FuzzDecodeSettledTrailer(f *testing.F) {
	obj, _ := sampleSettled(f)
	f.Add(obj[len(obj)-SettledTrailerSize:], uint64(len(obj)))
	f.Fuzz(func(t *testing.T, b []byte, size uint64) {
		n, err := DecodeSettledTrailer(b)
		if err != nil {
			return
		}
		t8 := b[len(b)-SettledTrailerSize:]
		if le.Uint32(t8) != n || !bytes.Equal(t8[4:], settledTrailerMagic[:]) {
			t.Fatalf("trailer %x decoded to %d", t8, n)
		}
		if off, m, err := LocateSettledFooter(size, b); err == nil && (m != n || off+uint64(m)+SettledTrailerSize != size) {
			t.Fatalf("LocateSettledFooter(%d) = %d, %d", size, off, m)
		}
	})
}

func FuzzVerifySettledObject(f *testing.F) {
	obj, _ := sampleSettled(f)
	f.Add(obj)
	f.Fuzz(func(t *testing.T, b []byte) {
		got, err := VerifySettledObject(b)
		if err != nil {
			return
		}
		re := append(bytes.Clone(b[:got.BlocksLen()]), EncodeSettledFooter(got)...)
		if !bytes.Equal(re, b) {
			t.Fatalf("settled object re-encodes differently")
		}
		if _, err := DecodeBlocks(b[:got.BlocksLen()]); err != nil {
			t.Fatalf("verified object's blocks do not decode: %v", err)
		}
	})
}
