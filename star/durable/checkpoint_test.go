package durable

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
			var p *producer
			if rapid.Bool().Draw(t, "producer") {
				p = &producer{id: rapid.SampledFrom([]string{"a", "b", "c"}).Draw(t, "id"),
					epoch: rapid.Uint64Range(0, 3).Draw(t, "epoch"), seq: rapid.Uint64Range(0, 9).Draw(t, "seq")}
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
			recs = append(recs, batch(payload, p, seq, closing)...)
			if rapid.IntRange(0, 9).Draw(t, "command") == 0 { // an S2 command record
				recs = append(recs, api.Record{Headers: []api.Header{{Value: []byte("fence")}}})
			}
		}
		for i := range recs {
			recs[i].SeqNum = uint64(i)
		}
		whole := newState("inc")
		whole.apply(recs)

		at := rapid.IntRange(0, len(recs)).Draw(t, "checkpoint at")
		prefix := newState("inc")
		prefix.apply(recs[:at])
		raw, err := json.Marshal(checkpointOf(prefix, "stream-id"))
		if err != nil {
			t.Fatal(err)
		}
		var c foldCheckpoint
		if err := json.Unmarshal(raw, &c); err != nil {
			t.Fatal(err)
		}
		resumed := c.state()
		if resumed.checkpointed != uint64(at) || c.Stream != "stream-id" {
			t.Fatalf("checkpoint %+v of a fold to %d", c, at)
		}
		resumed.apply(recs[at:])
		resumed.checkpointed = 0
		if !reflect.DeepEqual(whole, resumed) {
			t.Fatalf("fold from the checkpoint at %d:\n%+v\nwant\n%+v", at, resumed, whole)
		}
	})
}

// TestClosedByAcrossReads: the producer of an append that closed the
// stream is known however the fold's reads split the append's records
// (a JSON append of several messages, its marker last).
func TestClosedByAcrossReads(t *testing.T) {
	p := &producer{id: "w", epoch: 2, seq: 7}
	recs := append(batch([][]byte{[]byte("1")}, &producer{id: "v"}, "", false),
		batch([][]byte{[]byte("1"), []byte("2"), []byte("3")}, p, "", true)...)
	for i := range recs {
		recs[i].SeqNum = uint64(i)
	}
	for chunk := 1; chunk <= len(recs); chunk++ {
		s := newState("i")
		for i := 0; i < len(recs); i += chunk {
			s.apply(recs[i:min(i+chunk, len(recs))])
		}
		if !s.closed || s.closedBy == nil || *s.closedBy != *p {
			t.Fatalf("reads of %d records: closed %v by %v, want by %v", chunk, s.closed, s.closedBy, p)
		}
	}
	// A close of its own by another producer after data without one.
	recs = append(batch([][]byte{[]byte("a"), []byte("b")}, nil, "", false), batch(nil, p, "", true)...)
	for i := range recs {
		recs[i].SeqNum = uint64(i)
	}
	s := newState("i")
	s.apply(recs)
	if s.closedBy == nil || *s.closedBy != *p {
		t.Fatalf("close-only append: closed by %v, want %v", s.closedBy, p)
	}
	recs = batch([][]byte{[]byte("a"), []byte("b")}, nil, "", true)
	for i := range recs {
		recs[i].SeqNum = uint64(i)
	}
	s = newState("i")
	s.apply(recs)
	if !s.closed || s.closedBy != nil {
		t.Fatalf("closed without a producer: by %v", s.closedBy)
	}
}
