package sdk

import (
	"context"
	"fmt"
	"net/http"

	"github.com/starlog/starlog/shared/api"
)

// Stream is a handle on one stream: appends, reads, check-tail and
// sessions. It is cheap and safe for concurrent use.
type Stream struct {
	b    *Basin
	name string
}

// Name is the stream's name.
func (s *Stream) Name() string { return s.name }

// Basin is the stream's basin.
func (s *Stream) Basin() *Basin { return s.b }

func (s *Stream) recordsPath() string { return streamPath(s.name) + "/records" }

// Append appends one batch in a unary call and returns its ack once the
// batch is durable. The batch is checked locally first (1–1000 records, at
// most 1 MiB metered, well-formed commands): such failures are definite
// 422s. Failures are retried under the client's RetryPolicy (see the
// package doc for when an append is retried).
func (s *Stream) Append(ctx context.Context, in *api.AppendInput) (api.AppendAck, error) {
	if err := api.ValidateAppendInput(in); err != nil {
		return api.AppendAck{}, err
	}
	c := s.b.c
	r := &request{method: http.MethodPost, basin: s.b.name, path: s.recordsPath()}
	var err error
	switch c.encoding {
	case EncodingJSON:
		r.body, err = api.EncodeAppendJSON(in, api.FormatBase64)
		r.contentType, r.accept = api.ContentTypeJSON, api.ContentTypeJSON
		r.header = http.Header{api.HeaderFormat: {api.FormatBase64.String()}}
	default:
		r.body, err = api.EncodeAppendProto(in)
		r.contentType, r.accept = api.ContentTypeProto, api.ContentTypeProto
	}
	if err != nil {
		return api.AppendAck{}, fmt.Errorf("append to %s: encode: %w", s.name, err)
	}
	resp, err := c.do(ctx, r, opKind{append: true, matchSeqNum: in.MatchSeqNum != nil, producer: producerMarked(in)})
	if err != nil {
		return api.AppendAck{}, err
	}
	var ack api.AppendAck
	var derr *api.Error
	if api.ParseMediaType(resp.header.Get("Content-Type")) == api.MediaProto {
		ack, derr = api.DecodeAppendAckProto(resp.body)
	} else {
		ack, derr = api.DecodeAppendAckJSON(resp.body)
	}
	if derr != nil {
		return api.AppendAck{}, &ProtocolError{Msg: "append to " + s.name + ": decode ack", Err: derr}
	}
	if err := checkAck(ack, uint64(len(in.Records))); err != nil {
		return api.AppendAck{}, err
	}
	return ack, nil
}

// checkAck checks an ack against its batch: it covers exactly n records
// and the tail is not behind its end.
func checkAck(a api.AppendAck, n uint64) error {
	if a.End.SeqNum < a.Start.SeqNum || a.End.SeqNum-a.Start.SeqNum != n {
		return &ProtocolError{Msg: fmt.Sprintf("ack [%d, %d) does not cover the batch of %d records", a.Start.SeqNum, a.End.SeqNum, n)}
	}
	if a.Tail.SeqNum < a.End.SeqNum {
		return &ProtocolError{Msg: fmt.Sprintf("ack tail %d is behind its end %d", a.Tail.SeqNum, a.End.SeqNum)}
	}
	return nil
}

// Read reads one batch in a unary call. The server caps count at 1000,
// bytes at 1 MiB and wait at 60 s. A start past the tail (or at it, when
// the read cannot wait) fails with a 416 *api.Error whose Tail() is the
// stream's tail.
func (s *Stream) Read(ctx context.Context, req api.ReadRequest) (*api.ReadBatch, error) {
	c := s.b.c
	r := &request{method: http.MethodGet, basin: s.b.name, path: s.recordsPath(), query: req.Query()}
	if req.Wait != nil {
		r.wait = min(*req.Wait, api.MaxUnaryReadWait)
	}
	switch c.encoding {
	case EncodingJSON:
		r.accept = api.ContentTypeJSON
		r.header = http.Header{api.HeaderFormat: {api.FormatBase64.String()}}
	default:
		r.accept = api.ContentTypeProto
	}
	resp, err := c.do(ctx, r, idempotent)
	if err != nil {
		return nil, err
	}
	var b *api.ReadBatch
	var derr *api.Error
	if api.ParseMediaType(resp.header.Get("Content-Type")) == api.MediaProto {
		b, derr = api.DecodeReadBatchProto(resp.body)
	} else {
		f := api.FormatRaw
		if c.encoding == EncodingJSON {
			f = api.FormatBase64
		}
		b, derr = api.DecodeReadBatchJSON(resp.body, f)
	}
	if derr != nil {
		return nil, &ProtocolError{Msg: "read " + s.name + ": decode batch", Err: derr}
	}
	if err := checkSeqOrder(b.Records, nil); err != nil {
		return nil, err
	}
	return b, nil
}

// checkSeqOrder checks that records have strictly increasing seq nums,
// all at or past *next when next is set.
func checkSeqOrder(recs []api.Record, next *uint64) error {
	for i := range recs {
		sn := recs[i].SeqNum
		if next != nil && sn < *next {
			return &ProtocolError{Msg: fmt.Sprintf("record seq num %d goes back (expected ≥ %d)", sn, *next)}
		}
		if i > 0 && sn <= recs[i-1].SeqNum {
			return &ProtocolError{Msg: fmt.Sprintf("record seq nums out of order: %d after %d", sn, recs[i-1].SeqNum)}
		}
	}
	return nil
}

// CheckTail returns the stream's tail: the seq num the next record will
// get and the timestamp of the last one (0, 0 for an empty stream).
func (s *Stream) CheckTail(ctx context.Context) (api.StreamPosition, error) {
	r := &request{method: http.MethodGet, basin: s.b.name, path: s.recordsPath() + "/tail", accept: api.ContentTypeJSON}
	resp, err := s.b.c.do(ctx, r, idempotent)
	if err != nil {
		return api.StreamPosition{}, err
	}
	tail, derr := api.DecodeTailJSON(resp.body)
	if derr != nil {
		return api.StreamPosition{}, &ProtocolError{Msg: "check tail of " + s.name, Err: derr}
	}
	return tail, nil
}
