package kafka

import (
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
)

type testRec struct {
	seq     uint64
	key     string // "" with noKey: none
	noKey   bool
	headers [][2]string
	body    string
	ts      uint64
}

type testRecs []testRec

func (rs testRecs) records() []api.Record {
	var out []api.Record
	for _, r := range rs {
		rec := api.Record{SeqNum: r.seq, Body: []byte(r.body), Timestamp: api.Uint64(r.ts)}
		if !r.noKey {
			rec.Headers = append(rec.Headers, api.Header{Name: []byte(HeaderKey), Value: []byte(r.key)})
		}
		for _, h := range r.headers {
			rec.Headers = append(rec.Headers, api.Header{Name: []byte(h[0]), Value: []byte(h[1])})
		}
		out = append(out, rec)
	}
	return out
}

// A batch written for a fetch reads back as the records it holds: key,
// headers, body and timestamp; a fence command among them is a gap in the
// offsets, and the batch still ends at the last seq read.
func TestBatchRoundTrip(t *testing.T) {
	in := testRecs{
		{seq: 10, key: "k1", headers: [][2]string{{"h", "v"}}, body: "one", ts: 1000},
		{seq: 11, noKey: true, body: "two", ts: 1005},
		{seq: 12, key: "", body: "", ts: 1005},
	}.records()
	fence := api.FenceRecord("tok")
	fence.SeqNum, fence.Timestamp = 13, api.Uint64(1006)
	in = append(in, fence)
	raw := appendBatch(nil, in)
	var b kmsg.RecordBatch
	if err := b.ReadFrom(raw); err != nil {
		t.Fatal(err)
	}
	if b.FirstOffset != 10 || b.LastOffsetDelta != 3 || b.NumRecords != 3 || b.FirstTimestamp != 1000 || b.MaxTimestamp != 1005 {
		t.Fatalf("batch header %+v", b)
	}
	out, err := decodeBatches(raw, new(int64(MaxProduceRecordBytes)))
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != 3 {
		t.Fatalf("%d records, want 3 (the fence left out)", len(out))
	}
	for i := range out {
		w := in[i]
		if !slices.EqualFunc(out[i].Headers, w.Headers, func(a, b api.Header) bool {
			return string(a.Name) == string(b.Name) && string(a.Value) == string(b.Value)
		}) || string(out[i].Body) != string(w.Body) || *out[i].Timestamp != *w.Timestamp {
			t.Errorf("record %d: %+v, want %+v", i, out[i], w)
		}
	}
	// A batch of commands alone is an empty batch that still moves a
	// consumer past them.
	raw = appendBatch(nil, []api.Record{fence})
	if err := b.ReadFrom(raw); err != nil || b.NumRecords != 0 || b.FirstOffset != 13 || b.LastOffsetDelta != 0 {
		t.Fatalf("a batch of a command: %+v, %v", b, err)
	}
}

// What a produce may not carry is refused, with its code, before
// anything is appended.
func TestDecodeBatchesRefusals(t *testing.T) {
	good := appendBatch(nil, testRecs{{seq: 0, key: "k", body: "v", ts: 1}}.records())
	mutate := func(f func(b []byte)) []byte {
		b := slices.Clone(good)
		f(b)
		return b
	}
	withHeader := func(name string) []byte {
		kr := kmsg.Record{Value: []byte("v"), Headers: []kmsg.Header{{Key: name, Value: []byte("x")}}}
		tmp := kr.AppendTo(nil)
		body := append(binary.AppendVarint(nil, int64(len(tmp)-1)), tmp[1:]...)
		b := kmsg.RecordBatch{Magic: 2, NumRecords: 1, ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, Records: body}
		raw := b.AppendTo(nil)
		binary.BigEndian.PutUint32(raw[batchLengthAt:], uint32(len(raw)-12))
		binary.BigEndian.PutUint32(raw[batchCRCAt:], crcOf(raw))
		return raw
	}
	recrc := func(b []byte) { binary.BigEndian.PutUint32(b[batchCRCAt:], crcOf(b)) }
	cases := []struct {
		name string
		in   []byte
		code int16
	}{
		{"crc", mutate(func(b []byte) { b[len(b)-1] ^= 1 }), kerr.CorruptMessage.Code},
		{"magic 1", mutate(func(b []byte) { b[16] = 1 }), kerr.UnsupportedForMessageFormat.Code},
		{"transactional", mutate(func(b []byte) { b[batchAttrsAt+1] |= attrTransactional; recrc(b) }), kerr.UnsupportedVersion.Code},
		{"truncated", good[:len(good)-3], kerr.CorruptMessage.Code},
		{"record count", mutate(func(b []byte) { binary.BigEndian.PutUint32(b[57:], 2); recrc(b) }), kerr.CorruptMessage.Code},
		// A Kafka header would be taken for the key, or make a command.
		{"header named kafka.key", withHeader(HeaderKey), kerr.InvalidRecord.Code},
		{"header with no name", withHeader(""), kerr.InvalidRecord.Code},
	}
	for _, tc := range cases {
		_, err := decodeBatches(tc.in, new(int64(MaxProduceRecordBytes)))
		var re *recordError
		if !errors.As(err, &re) || re.code != tc.code {
			t.Errorf("%s: %v, want code %d", tc.name, err, tc.code)
		}
	}
}
