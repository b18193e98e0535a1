package kafka

import (
	"context"
	"errors"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// The read path of one partition, shared by ListOffsets and Fetch.

// isStatus reports whether err is an *api.Error of status code.
func isStatus(err error, code int) (*api.Error, bool) {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Status == code {
		return ae, true
	}
	return nil, false
}

// asCode reports whether err is an *api.Error of the given code.
func asCode(err error, code string) (*api.Error, bool) {
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == code {
		return ae, true
	}
	return nil, false
}

// tail is a partition's durable tail: its high watermark. A partition
// whose stream is missing (a create cut short, see createTopic) is empty.
func (s *Server) tail(ctx context.Context, stream string) (api.StreamPosition, error) {
	t, err := s.checkTail(ctx, stream)
	if _, ok := isStatus(err, 404); ok {
		return api.StreamPosition{}, nil
	}
	return t, err
}

// readFrom reads up to maxBytes (metered; at least one record whatever
// its size, as Kafka returns at least one batch) from seq, waiting up to
// wait for a first record when seq is the tail. Nothing at the tail (or a
// missing stream) is no records and no error.
func (s *Server) readFrom(ctx context.Context, stream string, seq uint64, maxBytes int, wait time.Duration) ([]api.Record, error) {
	req := api.ReadRequest{From: api.FromSeqNum, Value: seq,
		Count: api.Uint64(api.MaxBatchRecords), Bytes: api.Uint64(uint64(max(maxBytes, 1))), Wait: &wait}
	b, err := s.read(ctx, stream, req)
	if err == nil && len(b.Records) == 0 && wait == 0 {
		// The first record is larger than maxBytes: return it alone.
		req.Bytes, req.Count = nil, api.Uint64(1)
		b, err = s.read(ctx, stream, req)
	}
	if _, ok := isStatus(err, 416); ok {
		return nil, nil
	}
	if _, ok := isStatus(err, 404); ok {
		return nil, nil
	}
	return b.Records, err
}

// earliest is a partition's first offset: its first retained record, or
// the tail when it has none.
func (s *Server) earliest(ctx context.Context, stream string) (uint64, error) {
	zero := time.Duration(0)
	b, err := s.read(ctx, stream, api.ReadRequest{From: api.FromSeqNum, Value: 0, Clamp: true,
		Count: api.Uint64(1), Wait: &zero})
	if ae, ok := isStatus(err, 416); ok {
		t, _ := ae.Tail()
		return t.SeqNum, nil
	}
	if _, ok := isStatus(err, 404); ok {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if len(b.Records) == 0 {
		t, err := s.tail(ctx, stream)
		return t.SeqNum, err
	}
	return b.Records[0].SeqNum, nil
}

// atTime is the first record at or after timestamp ts (ms): its offset
// and timestamp, or ok false when there is none.
func (s *Server) atTime(ctx context.Context, stream string, ts uint64) (seq, at uint64, ok bool, err error) {
	zero := time.Duration(0)
	b, err := s.read(ctx, stream, api.ReadRequest{From: api.FromTimestamp, Value: ts,
		Count: api.Uint64(1), Wait: &zero})
	if _, is := isStatus(err, 416); is {
		return 0, 0, false, nil
	}
	if _, is := isStatus(err, 404); is {
		return 0, 0, false, nil
	}
	if err != nil || len(b.Records) == 0 {
		return 0, 0, false, err
	}
	r := b.Records[0]
	if r.Timestamp != nil {
		at = *r.Timestamp
	}
	return r.SeqNum, at, true, nil
}
