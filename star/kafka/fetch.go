package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
)

// fetchWait is a fetch's long-poll bound: MaxWaitMs, at most MaxFetchWait.
func fetchWait(r *kmsg.FetchRequest) time.Duration {
	return min(time.Duration(max(r.MaxWaitMillis, 0))*time.Millisecond, MaxFetchWait)
}

// fetchPart is one partition of a fetch: where it reads, and what the
// response says of it.
type fetchPart struct {
	stream string
	offset uint64
	limit  int // PartitionMaxBytes
	rp     *kmsg.FetchResponseTopicPartition
	ok     bool   // authorized and known: read it
	next   uint64 // past what it answers: where a wait for more follows
}

// fetch answers from each partition what its stream holds from the fetch
// offset on, within the byte limits. While nothing has reached MinBytes
// it waits (up to MaxWaitMs) for an append to any partition it reads at
// the tail, then reads again. No fetch session is created (SessionID 0:
// the client keeps sending full fetches).
func (cs *conn) fetch(ctx context.Context, r *kmsg.FetchRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.FetchResponse)
	if r.SessionID != 0 || r.SessionEpoch > 0 {
		resp.ErrorCode = kerr.FetchSessionIDNotFound.Code
		return resp
	}
	var parts []*fetchPart
	for _, t := range r.Topics {
		rt := kmsg.NewFetchResponseTopic()
		rt.Topic, rt.TopicID = t.Topic, t.TopicID
		row, rowErr := cs.s.topic(ctx, t.Topic)
		rt.Partitions = make([]kmsg.FetchResponseTopicPartition, len(t.Partitions))
		for i, p := range t.Partitions {
			rp := &rt.Partitions[i]
			*rp = kmsg.NewFetchResponseTopicPartition()
			rp.Partition, rp.HighWatermark, rp.LastStableOffset, rp.LogStartOffset = p.Partition, -1, -1, -1
			rp.PreferredReadReplica = -1
			// Empty, not null: librdkafka fails a fetch whose record set
			// is null (before v12, where it is nullable).
			rp.RecordBatches = []byte{}
			fp := &fetchPart{stream: partitionStream(t.Topic, p.Partition), offset: uint64(max(p.FetchOffset, 0)),
				limit: int(max(p.PartitionMaxBytes, 1)), rp: rp}
			switch {
			case cs.authorize(auth.Read, fp.stream) != nil:
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
			case rowErr != nil:
				rp.ErrorCode = codeOf(rowErr)
			case p.Partition < 0 || p.Partition >= row.Partitions:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
			case p.FetchOffset < 0:
				rp.ErrorCode = kerr.OffsetOutOfRange.Code
			default:
				fp.ok = true
			}
			parts = append(parts, fp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	maxBytes := min(int(r.MaxBytes), MaxFetchBytes)
	if maxBytes <= 0 {
		maxBytes = api.MaxBatchMeteredBytes
	}
	deadline := time.Now().Add(fetchWait(r))
	for {
		got, waitOn := cs.s.fetchOnce(ctx, parts, maxBytes)
		left := time.Until(deadline)
		if got >= int(max(r.MinBytes, 1)) || left <= 0 || len(waitOn) == 0 || ctx.Err() != nil {
			return resp
		}
		// Short of MinBytes: wait for an append past what any partition
		// answers, then read them all again.
		cs.s.waitAny(ctx, waitOn, left)
		if time.Until(deadline) <= 0 {
			cs.s.fetchOnce(ctx, parts, maxBytes)
			return resp
		}
	}
}

// fetchOnce reads every partition without waiting: the bytes answered in
// all, and the partitions a wait for more may follow (every one read
// without an error).
func (s *Server) fetchOnce(ctx context.Context, parts []*fetchPart, maxBytes int) (int, []*fetchPart) {
	total := 0
	var waitOn []*fetchPart
	for _, fp := range parts {
		if !fp.ok {
			continue
		}
		fp.rp.RecordBatches = []byte{}
		t, err := s.tail(ctx, fp.stream)
		if err != nil {
			fp.rp.ErrorCode = codeOf(err)
			continue
		}
		fp.rp.HighWatermark, fp.rp.LastStableOffset, fp.rp.ErrorCode = int64(t.SeqNum), int64(t.SeqNum), 0
		fp.next = t.SeqNum
		switch {
		case fp.offset > t.SeqNum:
			fp.rp.ErrorCode = kerr.OffsetOutOfRange.Code
			continue
		case fp.offset == t.SeqNum || total >= maxBytes:
			// Nothing to read, or the response is full (the next fetch
			// reads it).
			waitOn = append(waitOn, fp)
			continue
		}
		recs, err := s.readFrom(ctx, fp.stream, fp.offset, min(fp.limit, maxBytes-total), 0)
		if err != nil {
			fp.rp.ErrorCode = codeOf(err)
			continue
		}
		if len(recs) > 0 {
			fp.next = recs[len(recs)-1].SeqNum + 1
		}
		fp.rp.RecordBatches = appendBatch([]byte{}, recs)
		total += len(fp.rp.RecordBatches)
		waitOn = append(waitOn, fp)
	}
	return total, waitOn
}

// waitAny returns once any of parts has a record at or past its next, or
// wait has passed, or ctx ends: one follow-read per partition, the first
// to see a record ending the others.
func (s *Server) waitAny(ctx context.Context, parts []*fetchPart, wait time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if s.fetchWaiting != nil {
		s.fetchWaiting()
	}
	woke := make(chan struct{}, len(parts))
	for _, fp := range parts {
		go func() {
			// A follow-read of one record; one that ends empty before the
			// wait is over (the star's own bound) is made again.
			for ctx.Err() == nil {
				left := time.Until(deadlineOf(ctx))
				b, err := s.read(ctx, fp.stream, api.ReadRequest{From: api.FromSeqNum, Value: fp.next,
					Count: api.Uint64(1), Wait: &left})
				if err == nil && len(b.Records) > 0 {
					woke <- struct{}{}
					return
				}
				if err != nil {
					return // the next fetch reports it
				}
			}
		}()
	}
	select {
	case <-woke:
	case <-ctx.Done():
	}
}

// deadlineOf is ctx's deadline (waitAny's context always has one).
func deadlineOf(ctx context.Context) time.Time {
	d, _ := ctx.Deadline()
	return d
}
