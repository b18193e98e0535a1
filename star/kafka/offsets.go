package kafka

import (
	"context"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/star/auth"
)

// ListOffsets' special timestamps.
const (
	offsetLatest   = -1
	offsetEarliest = -2
)

func (cs *conn) listOffsets(ctx context.Context, r *kmsg.ListOffsetsRequest) kmsg.Response {
	resp := r.ResponseKind().(*kmsg.ListOffsetsResponse)
	for _, t := range r.Topics {
		rt := kmsg.NewListOffsetsResponseTopic()
		rt.Topic = t.Topic
		row, rowErr := cs.s.topic(ctx, t.Topic)
		for _, p := range t.Partitions {
			rp := kmsg.NewListOffsetsResponseTopicPartition()
			rp.Partition, rp.Timestamp, rp.Offset, rp.LeaderEpoch = p.Partition, -1, -1, 0
			rp.ErrorCode = cs.listOffset(ctx, t.Topic, row, rowErr, p, &rp)
			rt.Partitions = append(rt.Partitions, rp)
		}
		resp.Topics = append(resp.Topics, rt)
	}
	return resp
}

func (cs *conn) listOffset(ctx context.Context, topic string, row topicRow, rowErr error, p kmsg.ListOffsetsRequestTopicPartition, rp *kmsg.ListOffsetsResponseTopicPartition) int16 {
	stream := partitionStream(topic, p.Partition)
	op := auth.Read
	if p.Timestamp == offsetLatest {
		op = auth.CheckTail
	}
	switch {
	case cs.authorize(op, stream) != nil:
		return kerr.TopicAuthorizationFailed.Code
	case rowErr != nil:
		return codeOf(rowErr)
	case p.Partition < 0 || p.Partition >= row.Partitions:
		return kerr.UnknownTopicOrPartition.Code
	}
	switch {
	case p.Timestamp == offsetLatest:
		t, err := cs.s.tail(ctx, stream)
		if err != nil {
			return codeOf(err)
		}
		rp.Offset = int64(t.SeqNum)
	case p.Timestamp == offsetEarliest:
		seq, err := cs.s.earliest(ctx, stream)
		if err != nil {
			return codeOf(err)
		}
		rp.Offset = int64(seq)
	case p.Timestamp >= 0:
		seq, at, ok, err := cs.s.atTime(ctx, stream, uint64(p.Timestamp))
		if err != nil {
			return codeOf(err)
		}
		if ok {
			rp.Offset, rp.Timestamp = int64(seq), int64(at)
		}
	default:
		return kerr.InvalidRequest.Code // -3 (max timestamp) and lower are not served
	}
	return 0
}
