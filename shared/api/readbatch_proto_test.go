package api

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/starlog/starlog/shared/api/s2pb"
)

// oldDecode is the generated decoder the hand-written one replaced.
func oldDecode(body []byte) (*ReadBatch, error) {
	var m s2pb.ReadBatch
	if err := proto.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	b := &ReadBatch{}
	for _, r := range m.Records {
		ts := r.GetTimestamp()
		b.Records = append(b.Records, Record{SeqNum: r.GetSeqNum(), Timestamp: &ts, Headers: headersFromPB(r.Headers), Body: r.GetBody()})
	}
	if m.Tail != nil {
		t := positionFromPB(m.Tail)
		b.Tail = &t
	}
	return b, nil
}

func sameBatch(t *testing.T, got, want *ReadBatch) {
	t.Helper()
	if len(got.Records) != len(want.Records) || (got.Tail == nil) != (want.Tail == nil) || got.Tail != nil && *got.Tail != *want.Tail {
		t.Fatalf("got %d records tail %v, want %d tail %v", len(got.Records), got.Tail, len(want.Records), want.Tail)
	}
	for i := range got.Records {
		g, w := got.Records[i], want.Records[i]
		if g.SeqNum != w.SeqNum || g.ts() != w.ts() || !bytes.Equal(g.Body, w.Body) || len(g.Headers) != len(w.Headers) {
			t.Fatalf("record %d: got %+v, want %+v", i, g, w)
		}
		for j := range g.Headers {
			if !bytes.Equal(g.Headers[j].Name, w.Headers[j].Name) || !bytes.Equal(g.Headers[j].Value, w.Headers[j].Value) {
				t.Fatalf("record %d header %d differs", i, j)
			}
		}
	}
}

func readBatchSeeds() [][]byte {
	ts := uint64(7)
	full := &ReadBatch{Records: []Record{
		{SeqNum: 1, Timestamp: &ts, Body: []byte("a")},
		{SeqNum: 2, Timestamp: &ts, Headers: []Header{{Name: []byte("n"), Value: []byte("v")}, {Name: nil, Value: []byte("cmd")}}},
		{SeqNum: 1 << 40, Timestamp: &ts, Body: bytes.Repeat([]byte{0xff}, 300)},
	}, Tail: &StreamPosition{SeqNum: 9, Timestamp: 3}}
	return [][]byte{
		AppendReadBatchProto(nil, full),
		AppendReadBatchProto(nil, &ReadBatch{Tail: &StreamPosition{SeqNum: 5}}),
		AppendReadBatchProto(nil, &ReadBatch{}),
		{0x0a, 0x02, 0x08},                               // truncated record
		{0x0a, 0x00, 0x0a, 0x00},                         // two empty records
		{0x12, 0x02, 0x08, 0x01, 0x12, 0x02, 0x10, 0x02}, // tail twice: merged
		{0x18, 0x01, 0x0a, 0x02, 0x28, 0x01},             // unknown fields
	}
}

// The hand-written decoder agrees with the generated one on every input
// it accepts, and rejects what the generated one rejects.
func TestDecodeReadBatchProtoMatchesGenerated(t *testing.T) {
	for _, seed := range readBatchSeeds() {
		checkReadBatchDecode(t, seed)
	}
}

func FuzzDecodeReadBatchProto(f *testing.F) {
	for _, seed := range readBatchSeeds() {
		f.Add(seed)
	}
	f.Fuzz(checkReadBatchDecode)
}

func checkReadBatchDecode(t *testing.T, body []byte) {
	got, gerr := DecodeReadBatchProto(body)
	// A ReadBatchDecoder that decoded a bigger batch (with a tail) first
	// decodes the same as DecodeReadBatchProto: nothing of the earlier
	// batch shows through its reused slices.
	var d ReadBatchDecoder
	if _, err := d.Decode(readBatchSeeds()[0]); err != nil {
		t.Fatal(err)
	}
	reused, derr := d.Decode(body)
	if (derr == nil) != (gerr == nil) {
		t.Fatalf("ReadBatchDecoder: error %v, DecodeReadBatchProto: %v", derr, gerr)
	}
	if gerr == nil {
		sameBatch(t, reused, got)
	}
	want, werr := oldDecode(body)
	if werr != nil {
		if gerr == nil {
			t.Fatalf("accepted %x, which the generated decoder rejects: %v", body, werr)
		}
		return
	}
	if gerr != nil {
		// Stricter on a known field of the wrong wire type, which the
		// generated decoder keeps as an unknown field.
		return
	}
	sameBatch(t, got, want)
	// The batch owns its bytes.
	if len(body) > 0 {
		saved := append([]byte(nil), body...)
		for i := range body {
			body[i] ^= 0xff
		}
		again, _ := oldDecode(saved)
		sameBatch(t, got, again)
		copy(body, saved)
	}
}

// A ReadBatchDecoder decodes batch after batch without allocating: the
// records alias the payload, and its slices are reused.
func TestReadBatchDecoderAllocatesNothing(t *testing.T) {
	ts := uint64(1)
	batch := &ReadBatch{Tail: &StreamPosition{SeqNum: 1000, Timestamp: 1}}
	for i := range 1000 {
		batch.Records = append(batch.Records, Record{SeqNum: uint64(i), Timestamp: &ts, Body: bytes.Repeat([]byte("x"), 1016),
			Headers: []Header{{Name: []byte("n"), Value: []byte("v")}}})
	}
	enc := AppendReadBatchProto(nil, batch)
	var d ReadBatchDecoder
	allocs := testing.AllocsPerRun(20, func() {
		got, err := d.Decode(enc)
		if err != nil || len(got.Records) != 1000 || got.Tail == nil || got.Records[999].SeqNum != 999 {
			t.Fatalf("decoded %v, %v", got, err)
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per batch, want 0", allocs)
	}
}

func BenchmarkDecodeReadBatchProto(b *testing.B) {
	ts := uint64(1)
	batch := &ReadBatch{}
	body := bytes.Repeat([]byte("x"), 1016)
	for i := range 1000 {
		batch.Records = append(batch.Records, Record{SeqNum: uint64(i), Timestamp: &ts, Body: body})
	}
	enc := AppendReadBatchProto(nil, batch)
	for _, d := range []struct {
		name string
		fn   func([]byte) error
	}{
		{"handwritten", func(p []byte) error {
			_, err := DecodeReadBatchProto(p)
			if err != nil {
				return err
			}
			return nil
		}},
		{"decoder", func() func([]byte) error {
			var d ReadBatchDecoder
			return func(p []byte) error {
				if _, err := d.Decode(p); err != nil {
					return err
				}
				return nil
			}
		}()},
		{"generated", func(p []byte) error { _, err := oldDecode(p); return err }},
	} {
		b.Run(d.name, func(b *testing.B) {
			b.SetBytes(int64(len(enc)))
			b.ReportAllocs()
			for b.Loop() {
				if err := d.fn(enc); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A payload written in place (past directWrite) reads back as one frame,
// with its flags, between small ones.
func TestFrameWriterDirectPayload(t *testing.T) {
	var buf bytes.Buffer
	fw := NewFrameWriter(&buf, CompressionNone)
	big := bytes.Repeat([]byte("0123456789"), directWrite/5)
	fw.SetReconnectAdvised(true)
	for _, p := range [][]byte{[]byte("small"), big, []byte("after")} {
		if err := fw.WriteMessage(p); err != nil {
			t.Fatal(err)
		}
	}
	fr := NewFrameReader(&buf)
	for _, want := range [][]byte{[]byte("small"), big, []byte("after")} {
		f, err := fr.Next()
		if err != nil || !bytes.Equal(f.Payload, want) || !f.ReconnectAdvised || f.Terminal {
			t.Fatalf("frame of %d bytes (reconnect %v): %v, want %d bytes", len(f.Payload), f.ReconnectAdvised, err, len(want))
		}
	}
}
