package format

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"pgregory.net/rapid"
)

// genRecords draws 1..maxN records with dense seqs and non-decreasing
// timestamps, including seqs and timestamps near the top of the u64 range.
func genRecords(t *rapid.T, label string, maxN int) []Record {
	n := rapid.IntRange(1, maxN).Draw(t, label+".n")
	first := rapid.OneOf(
		rapid.Uint64Range(0, 1<<20),
		rapid.Uint64Range(math.MaxUint64-uint64(n)-1<<10, math.MaxUint64-uint64(n)),
	).Draw(t, label+".first")
	ts := rapid.OneOf(rapid.Uint64Range(0, 1<<45), rapid.Uint64()).Draw(t, label+".ts0")
	recs := make([]Record, n)
	for i := range recs {
		if i > 0 {
			step := rapid.OneOf(rapid.Just(uint64(0)), rapid.Uint64Range(0, 1<<12), rapid.Uint64()).Draw(t, label+".step")
			if step > math.MaxUint64-ts {
				step = math.MaxUint64 - ts
			}
			ts += step
		}
		r := Record{SeqNum: first + uint64(i), Timestamp: ts}
		nh := rapid.IntRange(0, 3).Draw(t, label+".nh")
		for range nh {
			r.Headers = append(r.Headers, Header{
				Name:  rapid.SliceOfN(rapid.Byte(), 0, 12).Draw(t, label+".name"),
				Value: rapid.SliceOfN(rapid.Byte(), 0, 40).Draw(t, label+".value"),
			})
		}
		r.Body = rapid.SliceOfN(rapid.Byte(), 0, 300).Draw(t, label+".body")
		recs[i] = r
	}
	return recs
}

func genStreamID(t *rapid.T, label string) string {
	return rapid.OneOf(
		rapid.SampledFrom([]string{"a", "stream-1", "stream-2", "x/y"}),
		rapid.StringN(1, 40, MaxStreamIDLen),
	).Draw(t, label)
}

// genBatches draws 0..maxB batches over a few streams.
func genBatches(t *rapid.T, maxB int) []Batch {
	nb := rapid.IntRange(0, maxB).Draw(t, "batches")
	out := make([]Batch, nb)
	for i := range out {
		out[i] = Batch{
			StreamID:     genStreamID(t, "stream"),
			FencingToken: rapid.StringN(0, MaxFencingTokenLen, MaxFencingTokenLen).Draw(t, "token"),
			Records:      genRecords(t, "recs", 8),
		}
	}
	return out
}

func genNonce(t *rapid.T) Nonce {
	var n Nonce
	copy(n[:], rapid.SliceOfN(rapid.Byte(), 16, 16).Draw(t, "nonce"))
	return n
}

// recordsEqual compares records by content: nil and empty byte slices are
// the same value in the layout.
func recordsEqual(a, b []Record) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d records, want %d", len(a), len(b))
	}
	for i := range a {
		x, y := a[i], b[i]
		if x.SeqNum != y.SeqNum || x.Timestamp != y.Timestamp || !bytes.Equal(x.Body, y.Body) || len(x.Headers) != len(y.Headers) {
			return fmt.Errorf("record %d: got %+v, want %+v", i, x, y)
		}
		for j := range x.Headers {
			if !bytes.Equal(x.Headers[j].Name, y.Headers[j].Name) || !bytes.Equal(x.Headers[j].Value, y.Headers[j].Value) {
				return fmt.Errorf("record %d header %d: got %q=%q, want %q=%q", i, j,
					x.Headers[j].Name, x.Headers[j].Value, y.Headers[j].Name, y.Headers[j].Value)
			}
		}
	}
	return nil
}

// Fixed samples shared by golden vectors, fuzz seeds and corruption tests.

func sampleRecords(first uint64, n int, ts uint64) []Record {
	recs := make([]Record, n)
	for i := range recs {
		r := Record{SeqNum: first + uint64(i), Timestamp: ts + uint64(i/2)*7}
		if i%2 == 1 {
			r.Headers = []Header{{Name: []byte("ct"), Value: []byte("text/plain")}}
		}
		if i%3 == 2 {
			r.Headers = append(r.Headers, Header{Name: nil, Value: []byte("fence")})
		}
		if i%4 != 3 {
			r.Body = []byte(fmt.Sprintf("record %d body", first+uint64(i)))
		}
		recs[i] = r
	}
	return recs
}

var sampleNonce = Nonce{0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef, 0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54, 0x32, 0x10}

func sampleBatches() []Batch {
	return []Batch{
		{StreamID: "s-alpha", Records: sampleRecords(0, 2, 1_700_000_000_000)},
		{StreamID: "s-beta", FencingToken: "w1", Records: sampleRecords(41, 1, 1_700_000_000_005)},
		{StreamID: "s-alpha", FencingToken: "tok-1", Records: sampleRecords(2, 4, 1_700_000_000_010)},
	}
}

func sampleBundle(tb testing.TB) []byte {
	obj, err := EncodeBundle(7, 12, sampleNonce, sampleBatches())
	if err != nil {
		tb.Fatal(err)
	}
	return obj
}

// sampleSettled renders a settled object of three blocks of one stream.
func sampleSettled(tb testing.TB) ([]byte, SettledFooter) {
	var obj []byte
	var infos []BlockInfo
	for i, n := range []int{3, 1, 5} {
		first := uint64(100)
		for _, in := range infos {
			first = in.EndSeq()
		}
		start := len(obj)
		obj = AppendBlock(obj, sampleRecords(first, n, 1_700_000_100_000+uint64(i)*1000))
		info, err := PeekBlock(obj[start:])
		if err != nil {
			tb.Fatal(err)
		}
		infos = append(infos, info)
	}
	f, err := NewSettledFooter("s-alpha", infos)
	if err != nil {
		tb.Fatal(err)
	}
	return append(obj, EncodeSettledFooter(f)...), f
}

// encodeBundleFooter renders a footer from decoded extents, to check that a
// decoded footer re-encodes to the same bytes.
func encodeBundleFooter(f BundleFooter) []byte {
	var streams []string
	index := map[string]uint32{}
	for _, x := range f.Extents {
		if _, ok := index[x.StreamID]; !ok {
			index[x.StreamID] = uint32(len(streams))
			streams = append(streams, x.StreamID)
		}
	}
	b := append([]byte(nil), bundleFooterMagic[:]...)
	b = append(b, Version, 0, 0, 0)
	b = le.AppendUint32(b, uint32(len(streams)))
	b = le.AppendUint32(b, uint32(len(f.Extents)))
	for _, s := range streams {
		b = le.AppendUint16(b, uint16(len(s)))
		b = append(b, s...)
	}
	for _, x := range f.Extents {
		b = le.AppendUint32(b, index[x.StreamID])
		b = le.AppendUint64(b, x.FirstSeq)
		b = le.AppendUint32(b, x.Count)
		b = le.AppendUint64(b, x.Offset)
		b = le.AppendUint32(b, x.Length)
		b = le.AppendUint64(b, x.MinTimestamp)
		b = le.AppendUint64(b, x.MaxTimestamp)
		b = append(b, byte(len(x.FencingToken)))
		b = append(b, x.FencingToken...)
	}
	return le.AppendUint32(b, checksum(b))
}

// Reseal helpers recompute CRCs over (possibly mutated) bytes so that fuzzing
// and corruption tests reach the structural checks behind the checksums.

func resealEnvelope(b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) >= EnvelopeSize {
		le.PutUint32(b[envOffCRC:], checksum(b[:envOffCRC]))
	}
	return b
}

func resealBlock(b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) >= BlockHeaderSize {
		le.PutUint32(b[blkOffDataCRC:], checksum(b[BlockHeaderSize:]))
		le.PutUint32(b[blkOffHeadCRC:], checksum(b[:blkOffHeadCRC]))
	}
	return b
}

func resealTail(b []byte) []byte {
	b = bytes.Clone(b)
	if len(b) >= 4 {
		le.PutUint32(b[len(b)-4:], checksum(b[:len(b)-4]))
	}
	return b
}

func binaryUvarint(x uint64) []byte { return binary.AppendUvarint(nil, x) }
