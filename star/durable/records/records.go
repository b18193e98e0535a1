// Package records is how a Durable Streams stream is laid out in starlog
// records and what folding them yields, pure (no I/O): the protocol's
// record headers (producer, Stream-Seq, batch, close marker, fork pad),
// the records of one append (Batch), the JSON messages of a body, what a
// fork copies, the fold of a stream's records (State, fold.go) and its
// stored form (Checkpoint, checkpoint.go). star/durable writes, reads
// and folds streams with it; it imports nothing of the handler.
package records

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"

	"github.com/starlog/starlog/shared/api"
)

// How the protocol maps to records (docs/durable-streams.md, "Records").
// Header names are lowercase ASCII and prefixed so an S2 reader can tell
// protocol metadata from application headers.
const (
	hdrProducerID    = "ds-producer-id"
	hdrProducerEpoch = "ds-producer-epoch"
	hdrProducerSeq   = "ds-producer-seq"
	HdrStreamSeq     = "ds-stream-seq"
	// hdrClose marks the record (empty body) that closes the stream.
	hdrClose = "ds-close"
	// hdrBatch on the first record of a JSON batch of several messages
	// counts them (fork sub-offsets stop at a batch's end).
	hdrBatch = "ds-batch"
	// HdrPad marks a record (empty body) a fork copies in place of a
	// source's control record, so the fork keeps the source's offsets.
	HdrPad = "ds-pad"
)

// Producer is an idempotent producer's claim on one append.
type Producer struct {
	ID         string
	Epoch, Seq uint64
}

// Kind classifies a stored record for Durable Streams readers.
type Kind uint8

const (
	KindData    Kind = iota // payload: bytes or one JSON message
	KindClose               // the closing marker
	KindControl             // a command record or a fork's pad: skipped
)

func HeaderValue(rec *api.Record, name string) ([]byte, bool) {
	for _, h := range rec.Headers {
		if string(h.Name) == name {
			return h.Value, true
		}
	}
	return nil, false
}

func KindOf(rec *api.Record) Kind {
	if len(rec.Headers) == 1 && len(rec.Headers[0].Name) == 0 {
		return KindControl // an S2 command record (fence, trim)
	}
	if _, ok := HeaderValue(rec, hdrClose); ok {
		return KindClose
	}
	if _, ok := HeaderValue(rec, HdrPad); ok {
		return KindControl
	}
	return KindData
}

// ProducerOf reads the producer headers of a batch's first record.
func ProducerOf(rec *api.Record) (Producer, bool) {
	id, ok := HeaderValue(rec, hdrProducerID)
	if !ok {
		return Producer{}, false
	}
	ev, _ := HeaderValue(rec, hdrProducerEpoch)
	sv, _ := HeaderValue(rec, hdrProducerSeq)
	e, err1 := strconv.ParseUint(string(ev), 10, 64)
	s, err2 := strconv.ParseUint(string(sv), 10, 64)
	if err1 != nil || err2 != nil {
		return Producer{}, false
	}
	return Producer{ID: string(id), Epoch: e, Seq: s}, true
}

// Batch builds the records of one append: the payload records, with the
// producer and Stream-Seq headers on the first record, and the closing
// marker last when close is set (a close-only append is the marker alone,
// carrying the headers).
func Batch(payload [][]byte, p *Producer, streamSeq string, close bool) []api.Record {
	recs := make([]api.Record, 0, len(payload)+1)
	for _, b := range payload {
		recs = append(recs, api.Record{Body: b})
	}
	if close {
		recs = append(recs, api.Record{Headers: []api.Header{{Name: []byte(hdrClose), Value: []byte("true")}}})
	}
	first := &recs[0]
	if len(payload) > 1 {
		first.Headers = append(first.Headers, api.Header{Name: []byte(hdrBatch), Value: []byte(strconv.Itoa(len(payload)))})
	}
	if p != nil {
		first.Headers = append(first.Headers,
			api.Header{Name: []byte(hdrProducerID), Value: []byte(p.ID)},
			api.Header{Name: []byte(hdrProducerEpoch), Value: []byte(strconv.FormatUint(p.Epoch, 10))},
			api.Header{Name: []byte(hdrProducerSeq), Value: []byte(strconv.FormatUint(p.Seq, 10))})
	}
	if streamSeq != "" {
		first.Headers = append(first.Headers, api.Header{Name: []byte(HdrStreamSeq), Value: []byte(streamSeq)})
	}
	return recs
}

// JSONMessages splits a JSON-mode body into messages: an array is
// flattened one level, anything else is one message. Each message is
// compacted, so it holds no newline (SSE data lines) and reads back as
// the same JSON value. Text that is not UTF-8, or escapes a lone UTF-16
// surrogate, is refused: stored, it would read back as U+FFFD (or not as
// JSON at all), not as what was sent.
func JSONMessages(body []byte, allowEmpty bool) ([][]byte, error) {
	if !json.Valid(body) {
		return nil, fmt.Errorf("body is not valid JSON")
	}
	if err := api.CheckJSONText(body); err != nil {
		return nil, fmt.Errorf("body is not valid JSON text: %v", err)
	}
	trimmed := bytes.TrimSpace(body)
	var raw []json.RawMessage
	if len(trimmed) > 0 && trimmed[0] == '[' {
		if err := json.Unmarshal(trimmed, &raw); err != nil {
			return nil, fmt.Errorf("body is not valid JSON: %v", err)
		}
		if len(raw) == 0 && !allowEmpty {
			return nil, fmt.Errorf("an empty JSON array appends nothing")
		}
	} else {
		raw = []json.RawMessage{trimmed}
	}
	out := make([][]byte, len(raw))
	for i, m := range raw {
		var b bytes.Buffer
		if err := json.Compact(&b, m); err != nil {
			return nil, fmt.Errorf("body is not valid JSON: %v", err)
		}
		out[i] = b.Bytes()
	}
	return out, nil
}

// BatchLen is how many records the append that wrote rec holds from rec
// (1 unless rec opens a JSON batch).
func BatchLen(rec *api.Record) int {
	if v, ok := HeaderValue(rec, hdrBatch); ok {
		if n, err := strconv.Atoi(string(v)); err == nil && n > 0 {
			return n
		}
	}
	return 1
}

// ForkCopy is what a fork stores for a source record: data with the
// application's headers but none of the protocol's writer state (a fork
// inherits no producer or Stream-Seq state), and a pad for anything else
// (a close, a fence, a trim), so offsets stay the source's.
func ForkCopy(rec *api.Record) api.Record {
	if KindOf(rec) != KindData {
		return api.Record{Headers: []api.Header{{Name: []byte(HdrPad), Value: []byte("1")}}}
	}
	out := api.Record{Body: rec.Body}
	for _, h := range rec.Headers {
		switch string(h.Name) {
		case hdrProducerID, hdrProducerEpoch, hdrProducerSeq, HdrStreamSeq, hdrBatch:
			continue
		}
		out.Headers = append(out.Headers, h)
	}
	return out
}
