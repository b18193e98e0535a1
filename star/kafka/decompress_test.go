package kafka_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"testing"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/pierrec/lz4/v4"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/star/kafka"
)

// Kafka's numbering of a batch's compression attribute.
const (
	codecGzip, codecSnappy, codecLz4, codecZstd int8 = 1, 2, 3, 4
)

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// recordPrefix is the encoding of one record with a null key, no
// headers and a value of n bytes, up to the value (the value, then the
// headers' count, a zero byte, follow it).
func recordPrefix(n int) []byte {
	body := []byte{0, 0, 0, 1} // attributes, timestamp delta, offset delta, key length -1
	body = binary.AppendVarint(body, int64(n))
	out := binary.AppendVarint(nil, int64(len(body)+n+1))
	return append(out, body...)
}

// compress streams prefix, n zero bytes and suffix through codec's
// writer: a bomb of len(prefix)+n+len(suffix) bytes.
func compress(t *testing.T, codec int8, prefix []byte, n int, suffix []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch codec {
	case codecGzip:
		w, _ = gzip.NewWriterLevel(&buf, gzip.BestSpeed)
	case codecLz4:
		w = lz4.NewWriter(&buf)
	case codecZstd:
		zw, err := zstd.NewWriter(&buf, zstd.WithEncoderConcurrency(1))
		if err != nil {
			t.Fatal(err)
		}
		w = zw
	case codecSnappy: // Kafka's snappy is a raw block (or xerial framed): no stream writer
		raw := make([]byte, 0, len(prefix)+n+len(suffix))
		raw = append(append(append(raw, prefix...), make([]byte, n)...), suffix...)
		return s2.EncodeSnappy(nil, raw)
	}
	if _, err := w.Write(prefix); err != nil {
		t.Fatal(err)
	}
	if _, err := io.CopyN(struct{ io.Writer }{w}, zeros{}, int64(n)); err != nil { // Write, never ReadFrom
		t.Fatal(err)
	}
	if _, err := w.Write(suffix); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A produced batch that decompresses to far more than a produce may
// carry (one record of hundreds of MiB of zeros) is refused as
// MESSAGE_TOO_LARGE with nothing appended, and the star stops
// decompressing at the bound: its allocations during the request stay
// far under the bomb's size.
func TestProduceDecompressionBombRefused(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	for _, tc := range []struct {
		name  string
		codec int8
		size  int // decompressed value bytes
	}{
		{"gzip", codecGzip, 128 << 20}, {"lz4", codecLz4, 128 << 20},
		{"zstd", codecZstd, 128 << 20}, {"snappy", codecSnappy, 64 << 20}, // snappy: ~21:1 at most
	} {
		t.Run(tc.name, func(t *testing.T) {
			topic := "bomb-" + tc.name
			createTopic(t, c, topic, 1)
			bomb := compress(t, tc.codec, recordPrefix(tc.size), tc.size, []byte{0})
			batch := kafka.EncodeTestCompressedBatch(tc.codec, 1, bomb)
			if len(batch) > kafka.MaxFrameBytes-1024 {
				t.Fatalf("the bomb is %d bytes: over a frame", len(batch))
			}
			req := produceReq(topic, -1, batch)
			t.Logf("%s: %d compressed bytes, %d decompressed", tc.name, len(bomb), tc.size)
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			resp, err := req.RequestWith(ctxT(t), c)
			runtime.ReadMemStats(&after)
			if err != nil {
				t.Fatal(err)
			}
			grew := after.TotalAlloc - before.TotalAlloc
			t.Logf("%d MiB allocated during the request", grew>>20)
			if rp := resp.Topics[0].Partitions[0]; rp.ErrorCode != kerr.MessageTooLarge.Code {
				t.Errorf("code %d (%s), want MESSAGE_TOO_LARGE", rp.ErrorCode, deref(rp.ErrorMessage))
			}
			if grew > uint64(tc.size)/2 {
				t.Errorf("%d MiB allocated for a %d MiB bomb: decompression was not stopped at the bound", grew>>20, tc.size>>20)
			}
			tail, err := s.n.CheckTail(ctxT(t), kafka.DefaultBasin, topic+"/0", nil)
			if err != nil || tail.SeqNum != 0 {
				t.Errorf("after the bomb: tail %d, %v", tail.SeqNum, err)
			}
		})
	}
}

// smallRecords is n records of a value of size bytes, uncompressed.
func smallRecords(n, size int) []byte {
	var out []byte
	for i := range n {
		body := []byte{0, 0}
		body = binary.AppendVarint(body, int64(i)) // offset delta
		body = append(body, 1)                     // null key
		body = binary.AppendVarint(body, int64(size))
		body = append(body, bytes.Repeat([]byte{'x'}, size)...)
		body = append(body, 0)
		out = binary.AppendVarint(out, int64(len(body)))
		out = append(out, body...)
	}
	return out
}

// The bound is per request, summed over its partitions: two partitions
// of 5 MiB each decompressed (each under the bound alone) append the
// first and refuse the second as MESSAGE_TOO_LARGE.
func TestProduceDecompressedBytesBoundPerRequest(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	createTopic(t, c, "sum", 2)
	const n, size = 5 << 10, 1 << 10
	recs := smallRecords(n, size)
	zw, _ := zstd.NewWriter(nil, zstd.WithEncoderConcurrency(1))
	batch := kafka.EncodeTestCompressedBatch(codecZstd, n, zw.EncodeAll(recs, nil))
	req := produceReq("sum", -1, batch)
	req.Topics[0].Partitions = append(req.Topics[0].Partitions, kmsg.ProduceRequestTopicPartition{Partition: 1, Records: batch})
	resp, err := req.RequestWith(ctxT(t), c)
	if err != nil {
		t.Fatal(err)
	}
	ps := resp.Topics[0].Partitions
	if ps[0].ErrorCode != 0 || ps[1].ErrorCode != kerr.MessageTooLarge.Code {
		t.Fatalf("codes %d (%s), %d (%s): want 0 and MESSAGE_TOO_LARGE", ps[0].ErrorCode, deref(ps[0].ErrorMessage),
			ps[1].ErrorCode, deref(ps[1].ErrorMessage))
	}
	for p, want := range []uint64{n, 0} {
		tail, err := s.n.CheckTail(ctxT(t), kafka.DefaultBasin, fmt.Sprintf("sum/%d", p), nil)
		if err != nil || tail.SeqNum != want {
			t.Errorf("partition %d: tail %d, %v; want %d", p, tail.SeqNum, err, want)
		}
	}
}
