package kafka

import (
	"bytes"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
)

// benchRecords are 1,000 records of 1 KiB bodies with a 16-byte key, as
// one read answers them.
func benchRecords() []api.Record {
	recs := make([]api.Record, 1000)
	body := make([]byte, 1024)
	for i := range body {
		body[i] = byte(i * 131)
	}
	ts := uint64(1_700_000_000_000)
	for i := range recs {
		recs[i] = api.Record{SeqNum: uint64(i), Timestamp: &ts, Body: body,
			Headers: []api.Header{{Name: []byte(HeaderKey), Value: []byte("key-0123456789ab")}}}
	}
	return recs
}

// BenchmarkAppendBatch: one fetch's batch of 1,000 records of 1 KiB
// (the fetch path's encoding).
func BenchmarkAppendBatch(b *testing.B) {
	recs := benchRecords()
	var dst []byte
	b.SetBytes(1000 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		dst = appendBatch(dst[:0], recs)
	}
}

// BenchmarkDecodeBatches: one produce partition's uncompressed batch of
// 1,000 records of 1 KiB (the produce path's decoding).
func BenchmarkDecodeBatches(b *testing.B) {
	data := appendBatch(nil, benchRecords())
	var rb kmsg.RecordBatch
	if err := rb.ReadFrom(data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(1000 * 1024)
	b.ReportAllocs()
	for b.Loop() {
		budget := int64(MaxProduceRecordBytes)
		if _, err := decodeBatches(data, &budget); err != nil {
			b.Fatal(err)
		}
	}
}

// recordLen is what kmsg's Record.AppendTo writes after the Length
// varint, for keys, values and headers null, empty and long (two-byte
// varint lengths), and timestamp deltas negative and large.
func TestAppendBatchRecordLen(t *testing.T) {
	long := make([]byte, 300)
	for _, kr := range []kmsg.Record{
		{},
		{Key: []byte{}, Value: []byte{}},
		{Key: []byte("k"), Value: long, TimestampDelta64: -5, OffsetDelta: 999},
		{Value: long, TimestampDelta64: 1 << 40, OffsetDelta: 1 << 20,
			Headers: []kmsg.Header{{Key: "h", Value: nil}, {Key: string(long), Value: long}}},
	} {
		enc := kr.AppendTo(nil) // Length 0: one byte
		if got, want := recordLen(&kr), int32(len(enc)-1); got != want {
			t.Errorf("recordLen %d, encoded %d: %+v", got, want, kr)
		}
	}
}

// appendBatch encodes each record straight into dst: into a buffer with
// room for the batch it allocates nothing (it allocated a scratch record
// and a growing body buffer per batch before, 27 allocations for 1,000
// records of 1 KiB).
func TestAppendBatchAllocatesNothing(t *testing.T) {
	recs := benchRecords()
	dst := appendBatch(nil, recs)
	want := slices.Clone(dst)
	if allocs := testing.AllocsPerRun(10, func() { dst = appendBatch(dst[:0], recs) }); allocs != 0 {
		t.Fatalf("%v allocations per batch", allocs)
	}
	if !bytes.Equal(dst, want) {
		t.Fatal("the batch differs when encoded again")
	}
	budget := int64(MaxProduceRecordBytes)
	out, err := decodeBatches(dst, &budget)
	if err != nil || len(out) != len(recs) {
		t.Fatalf("decoded %d records, %v", len(out), err)
	}
	for i := range out {
		if !bytes.Equal(out[i].Body, recs[i].Body) || *out[i].Timestamp != *recs[i].Timestamp ||
			string(out[i].Headers[0].Value) != "key-0123456789ab" {
			t.Fatalf("record %d: %+v", i, out[i])
		}
	}
}
