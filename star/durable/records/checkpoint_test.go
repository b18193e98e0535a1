package records

import (
	"encoding/json"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/starlog/starlog/shared/api"
)

// TestFoldFromCheckpoint: folding a stream's records from a checkpoint of
// any prefix (stored as JSON and read back) gives the same state as
// folding them all from the first record.
func TestFoldFromCheckpoint(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		var recs []api.Record
		closed := false
		for i := range rapid.IntRange(0, 40).Draw(t, "batches") {
			var p *Producer
			if rapid.Bool().Draw(t, "producer") {
				p = &Producer{ID: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "id"),
					Epoch: rapid.Uint64Range(0, 3).Draw(t, "epoch"), Seq: rapid.Uint64Range(0, 9).Draw(t, "seq")}
			}
			seq := ""
			if rapid.Bool().Draw(t, "stream-seq") {
				seq = rapid.StringMatching(`[0-9]{1,3}`).Draw(t, "seq-value")
			}
			n := rapid.IntRange(0, 3).Draw(t, "records")
			payload := make([][]byte, n)
			for j := range payload {
				payload[j] = []byte{byte(i), byte(j)}
			}
			closing := !closed && rapid.IntRange(0, 9).Draw(t, "close") == 0
			if n == 0 && !closing {
				continue
			}
			closed = closed || closing
			recs = append(recs, Batch(payload, p, seq, closing)...)
			if rapid.IntRange(0, 9).Draw(t, "command") == 0 { // an S2 command record
				recs = append(recs, api.Record{Headers: []api.Header{{Value: []byte("fence")}}})
			}
		}
		for i := range recs {
			recs[i].SeqNum = uint64(i)
		}
		whole := NewState("inc")
		whole.Apply(recs)

		at := rapid.IntRange(0, len(recs)).Draw(t, "checkpoint at")
		prefix := NewState("inc")
		prefix.Apply(recs[:at])
		raw, err := json.Marshal(CheckpointOf(prefix, "stream-id"))
		if err != nil {
			t.Fatal(err)
		}
		var c Checkpoint
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		resumed := c.State()
		if resumed.Checkpointed != uint64(at) || c.Stream != "stream-id" {
			t.Fatalf("checkpoint %+v of a fold to %d", c, at)
		}
		resumed.Apply(recs[at:])
		resumed.Checkpointed = 0
		if !reflect.DeepEqual(whole, resumed) {
			t.Fatalf("fold from the checkpoint at %d:\n%+v\nwant\n%+v", at, resumed, whole)
		}
	})
}

// TestClosedByAcrossReads: the producer of an append that closed the
// stream is known however the fold's reads split the append's records
// (a JSON append of several messages, its marker last).
func TestClosedByAcrossReads(t *testing.T) {
	p := &Producer{ID: "w", Epoch: 2, Seq: 7}
	recs := append(Batch([][]byte{[]byte("1")}, &Producer{ID: "v"}, "", false),
		Batch([][]byte{[]byte("1"), []byte("2"), []byte("3")}, p, "", true)...)
	for i := range recs {
		recs[i].SeqNum = uint64(i)
	}
	for chunk := 1; chunk <= len(recs); chunk++ {
		s := NewState("i")
		for i := 0; i < len(recs); i += chunk {
			s.Apply(recs[i:min(i+chunk, len(recs))])
		}
		if !s.Closed || s.ClosedBy == nil || *s.ClosedBy != *p {
			t.Fatalf("reads of %d records: closed %v by %v, want by %v", chunk, s.Closed, s.ClosedBy, p)
		}
	}
	// A close of its own by another producer after data without one.
	recs = append(Batch([][]byte{[]byte("a"), []byte("b")}, nil, "", false), Batch(nil, p, "", true)...)
	for i := range recs {
		recs[i].SeqNum = uint64(i)
	}
	s := NewState("i")
	s.Apply(recs)
	if s.ClosedBy == nil || *s.ClosedBy != *p {
		t.Fatalf("close-only append: closed by %v, want %v", s.ClosedBy, p)
	}
	recs = Batch([][]byte{[]byte("a"), []byte("b")}, nil, "", true)
	for i := range recs {
		recs[i].SeqNum = uint64(i)
	}
	s = NewState("i")
	s.Apply(recs)
	if !s.Closed || s.ClosedBy != nil {
		t.Fatalf("closed without a producer: by %v", s.ClosedBy)
	}
}
