package format

import (
	"fmt"
	"testing"
)

// benchFlight is a 4 MiB flight: 4096 records of 1 KiB bodies (one small
// header each), in 128 batches of 32 records over 16 streams.
func benchFlight() []Batch {
	const (
		records   = 4096
		perBatch  = 32
		streams   = 16
		bodyBytes = 1024
	)
	body := make([]byte, bodyBytes)
	for i := range body {
		body[i] = byte(i * 7)
	}
	hdr := []Header{{Name: []byte("ct"), Value: []byte("json")}}
	next := make([]uint64, streams)
	var out []Batch
	for b := 0; b < records/perBatch; b++ {
		s := b % streams
		recs := make([]Record, perBatch)
		for i := range recs {
			recs[i] = Record{SeqNum: next[s] + uint64(i), Timestamp: 1_700_000_000_000 + uint64(b), Headers: hdr, Body: body}
		}
		next[s] += perBatch
		out = append(out, Batch{StreamID: fmt.Sprintf("stream-%02d-0123456789abcdef", s), FencingToken: "writer-1", Records: recs})
	}
	return out
}

func BenchmarkEncodeBundle4MiB(b *testing.B) {
	batches := benchFlight()
	obj, err := EncodeBundle(1, 1, sampleNonce, batches)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(obj)))
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		if _, err := EncodeBundle(1, 1, sampleNonce, batches); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start, len(obj))
}

// BenchmarkAppendBundle4MiB reuses one buffer, as a flusher would.
func BenchmarkAppendBundle4MiB(b *testing.B) {
	batches := benchFlight()
	buf, err := EncodeBundle(1, 1, sampleNonce, batches)
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(buf)))
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		if buf, err = AppendBundle(buf[:0], 1, 1, sampleNonce, batches); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start, len(buf))
}

// BenchmarkDecodeBundle4MiB is the read path over a whole flight: envelope
// and footer (DecodeBundle, which also checks every block header against its
// extent), then every block's records (DecodeBlock, which checks the payload
// CRC). Every byte is checksummed once.
func BenchmarkDecodeBundle4MiB(b *testing.B) {
	obj, err := EncodeBundle(1, 1, sampleNonce, benchFlight())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(obj)))
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		_, f, err := DecodeBundle(obj)
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for _, x := range f.Extents {
			recs, _, err := DecodeBlock(obj[x.Offset : x.Offset+uint64(x.Length)])
			if err != nil {
				b.Fatal(err)
			}
			n += len(recs)
		}
		if n != 4096 {
			b.Fatalf("%d records", n)
		}
	}
	reportCPU(b, start, len(obj))
}

// BenchmarkVerifyBundle4MiB checks every CRC of a flight without decoding
// records (what a settler does before copying extents verbatim).
func BenchmarkVerifyBundle4MiB(b *testing.B) {
	obj, err := EncodeBundle(1, 1, sampleNonce, benchFlight())
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(obj)))
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		if _, _, err := VerifyBundle(obj); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, start, len(obj))
}

// BenchmarkDecodeSettled4MiB reads a 4 MiB settled object as a cold reader
// would: trailer, footer, then every block's records in one DecodeBlocks.
func BenchmarkDecodeSettled4MiB(b *testing.B) {
	var obj []byte
	var infos []BlockInfo
	for _, bt := range benchFlight() {
		if bt.StreamID != "stream-00-0123456789abcdef" {
			continue
		}
		for range 16 { // one stream's 8 batches, repeated with rebased seqs to reach 4 MiB
			recs := make([]Record, len(bt.Records))
			copy(recs, bt.Records)
			for i := range recs {
				recs[i].SeqNum = uint64(len(infos))*32 + uint64(i)
			}
			start := len(obj)
			obj = AppendBlock(obj, recs)
			info, _ := PeekBlock(obj[start:])
			infos = append(infos, info)
		}
	}
	f, err := NewSettledFooter("stream-00", infos)
	if err != nil {
		b.Fatal(err)
	}
	obj = append(obj, EncodeSettledFooter(f)...)
	b.SetBytes(int64(len(obj)))
	b.ReportAllocs()
	start := cpuTime()
	for b.Loop() {
		off, n, err := LocateSettledFooter(uint64(len(obj)), obj[len(obj)-SettledTrailerSize:])
		if err != nil {
			b.Fatal(err)
		}
		if _, err := DecodeSettledFooter(obj[off : off+uint64(n)]); err != nil {
			b.Fatal(err)
		}
		recs, err := DecodeBlocks(obj[:off])
		if err != nil || len(recs) != 4096 {
			b.Fatalf("%d records, %v", len(recs), err)
		}
	}
	reportCPU(b, start, len(obj))
}
