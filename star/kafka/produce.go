package kafka

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/node"
)

// admitTimeout bounds the wait for the star's write buffer of one
// submitted chunk (node.Config.AdmitTimeout's role for a unary append).
const admitTimeout = 5 * time.Second

// pendingPart is one produce partition on its way: the batches submitted
// to its stream, waited on after every partition is submitted, so the
// partitions of one request become durable together, not one by one.
type pendingPart struct {
	rp      *kmsg.ProduceResponseTopicPartition
	a       *node.Appender // nil: appended at the stream's leader
	pending []ackWaiter
}

// ackWaiter is one submitted chunk: a *node.PendingAppend here, a
// *remoteAppend at the leader.
type ackWaiter interface {
	Wait(ctx context.Context) (api.AppendAck, error)
}

// produceWait is how long a produce with timeout ms (its TimeoutMillis)
// waits for durability: that, at most RequestTimeout; no wait when it is
// zero or negative (Kafka times such a produce out at once).
func produceWait(ms int32) time.Duration {
	return min(time.Duration(max(ms, 0))*time.Millisecond, RequestTimeout)
}

// produce appends each partition's records to its stream and answers
// once every one is durable: the S2 face's acknowledgement, for acks=-1
// and acks=1 alike (a star has nothing less durable to acknowledge).
// The wait for durability ends at the request's own timeout (from its
// arrival; produceWait), after which a partition not yet durable is
// REQUEST_TIMED_OUT. acks=0 is appended the same way and answered with
// nothing, as Kafka answers it.
func (cs *conn) produce(ctx context.Context, r *kmsg.ProduceRequest) kmsg.Response {
	waitCtx := ctx
	if r.Acks != 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(ctx, produceWait(r.TimeoutMillis))
		defer cancel()
	}
	resp := r.ResponseKind().(*kmsg.ProduceResponse)
	badAcks := r.Acks != -1 && r.Acks != 0 && r.Acks != 1
	var parts []*pendingPart
	budget := int64(MaxProduceRecordBytes)
	for _, t := range r.Topics {
		rt := kmsg.NewProduceResponseTopic()
		rt.Topic = t.Topic
		row, rowErr := cs.s.topic(ctx, t.Topic)
		rt.Partitions = make([]kmsg.ProduceResponseTopicPartition, len(t.Partitions))
		for i, p := range t.Partitions {
			rp := &rt.Partitions[i]
			*rp = kmsg.NewProduceResponseTopicPartition()
			rp.Partition, rp.BaseOffset, rp.LogAppendTime, rp.LogStartOffset = p.Partition, -1, -1, -1
			stream := partitionStream(t.Topic, p.Partition)
			switch {
			case badAcks:
				rp.ErrorCode = kerr.InvalidRequiredAcks.Code
				continue
			case r.TransactionID != nil:
				rp.ErrorCode = kerr.TransactionalIDAuthorizationFailed.Code
				rp.ErrorMessage = new("transactions are not served (docs/kafka.md)")
				continue
			case cs.authorize(auth.Append, stream) != nil:
				rp.ErrorCode = kerr.TopicAuthorizationFailed.Code
				continue
			case rowErr != nil:
				rp.ErrorCode = codeOf(rowErr)
				continue
			case p.Partition < 0 || p.Partition >= row.Partitions:
				rp.ErrorCode = kerr.UnknownTopicOrPartition.Code
				continue
			}
			pp, err := cs.s.submit(ctx, t.Topic, p.Partition, p.Records, row.MaxMessageBytes, &budget)
			if pp != nil {
				pp.rp = rp
				parts = append(parts, pp)
			}
			if err != nil {
				rp.ErrorCode, rp.ErrorMessage = produceCode(err), msgOf(err)
			}
		}
		resp.Topics = append(resp.Topics, rt)
	}
	for _, pp := range parts {
		for i, p := range pp.pending {
			ack, err := p.Wait(waitCtx)
			if err != nil {
				if pp.rp.ErrorCode == 0 {
					pp.rp.ErrorCode, pp.rp.ErrorMessage = produceCode(err), msgOf(err)
				}
				continue
			}
			if i == 0 && pp.rp.ErrorCode == 0 {
				pp.rp.BaseOffset = int64(ack.Start.SeqNum)
			}
		}
		if pp.a != nil {
			pp.a.Close()
		}
	}
	if r.Acks == 0 {
		return nil
	}
	return resp
}

// checkBatchSizes refuses a partition's batches when one of them, as
// sent (compressed), is over maxBatch, the topic's max.message.bytes
// (0: no bound): MESSAGE_TOO_LARGE, as Kafka answers it, which clients
// do not retry. A malformed length is left to decodeBatches.
func checkBatchSizes(data []byte, maxBatch int32) error {
	for maxBatch > 0 && len(data) >= batchLengthAt+4 {
		size := 12 + int64(int32(binary.BigEndian.Uint32(data[batchLengthAt:])))
		if size > int64(maxBatch) {
			return &recordError{code: kerr.MessageTooLarge.Code,
				msg: fmt.Sprintf("a record batch of %d bytes is over the topic's %s, %d", size, configMaxMessage, maxBatch)}
		}
		if size < 12 || size > int64(len(data)) {
			return nil
		}
		data = data[size:]
	}
	return nil
}

// produceCode is codeOf for a produce partition: a record the star
// refused is INVALID_RECORD, one over a batch's size MESSAGE_TOO_LARGE,
// and an idempotent producer's refusals are Kafka's (producerCode).
func produceCode(err error) int16 {
	var re *recordError
	if errors.As(err, &re) {
		return re.code
	}
	var ae *api.Error
	if errors.As(err, &ae) {
		if code, ok := producerCode(ae); ok {
			return code
		}
		switch ae.Status {
		case 413:
			return kerr.MessageTooLarge.Code
		case 400, 422:
			return kerr.InvalidRecord.Code
		}
	}
	return codeOf(err)
}

// submit decodes one partition's batches and submits them to its stream
// in chunks of at most one S2 batch (1,000 records, 1 MiB metered): a
// Kafka batch larger than that is appended as consecutive batches, each
// atomic. A decode failure appends nothing. maxBatch is the topic's
// max.message.bytes (0: none); budget is what is left of the request's
// MaxProduceRecordBytes.
func (s *Server) submit(ctx context.Context, topic string, p int32, data []byte, maxBatch int32, budget *int64) (*pendingPart, error) {
	if err := checkBatchSizes(data, maxBatch); err != nil {
		return nil, err
	}
	batches, err := decodeProduce(data, budget)
	if err != nil {
		return nil, err
	}
	for _, b := range batches {
		if b.pid < 0 {
			continue
		}
		if err := s.checkProducerID(ctx, b.pid); err != nil {
			return nil, err
		}
	}
	for _, b := range batches {
		for i := range b.recs {
			if sz := b.recs[i].MeteredSize(); sz > api.MaxBatchMeteredBytes {
				return nil, &recordError{code: kerr.MessageTooLarge.Code,
					msg: fmt.Sprintf("a record of %d metered bytes is over an S2 batch's %d", sz, api.MaxBatchMeteredBytes)}
			}
		}
	}
	chunks, err := chunksOf(batches)
	if err != nil || len(chunks) == 0 {
		return nil, err
	}
	stream := partitionStream(topic, p)
	// A missing stream (its topic being deleted) is a 404: the partition
	// is unknown, and nothing here creates it again.
	a, err := s.star.OpenAppend(ctx, s.basin, stream, nil)
	if addr := s.leaderOf(err); addr != "" {
		// Another star leads the stream: the chunks go there, in order,
		// each once the one before it is acknowledged (an S2 append at
		// the leader per chunk, as a forwarded S2 append).
		return s.submitAt(ctx, addr, stream, chunks), nil
	}
	if err != nil {
		return nil, err
	}
	pp := &pendingPart{a: a}
	for _, c := range chunks {
		sctx, cancel := context.WithTimeout(ctx, admitTimeout)
		pa, err := a.Submit(sctx, &api.AppendInput{Records: c})
		cancel()
		if err != nil {
			return pp, err
		}
		pp.pending = append(pp.pending, pa)
	}
	return pp, nil
}

// chunkLen is how many of recs go in the next S2 batch: at most 1,000
// records, 1 MiB metered, the first record counted with reserve more
// bytes (a producer's mark, yet to be added to it). 0 when the first
// does not fit.
func chunkLen(recs []api.Record, reserve uint64) int {
	n, bytes := 0, reserve
	for n < len(recs) && n < api.MaxBatchRecords && bytes+recs[n].MeteredSize() <= api.MaxBatchMeteredBytes {
		bytes += recs[n].MeteredSize()
		n++
	}
	return n
}

// submitAt appends a partition's chunks at the star at addr, which
// leads its stream. A request's chunks of one partition are appended one
// after another, so they keep their order; a failed chunk ends the
// partition (the ones after it are not sent).
func (s *Server) submitAt(ctx context.Context, addr, stream string, chunks [][]api.Record) *pendingPart {
	pp := &pendingPart{}
	if len(chunks) == 1 {
		pp.pending = append(pp.pending, s.appendAt(ctx, addr, stream, &api.AppendInput{Records: chunks[0]}))
		return pp
	}
	seq := &remoteAppend{done: make(chan struct{})}
	go func() {
		defer close(seq.done)
		for i, c := range chunks {
			ack, err := s.appendAt(ctx, addr, stream, &api.AppendInput{Records: c}).Wait(context.Background())
			if err != nil {
				seq.err = err
				return
			}
			if i == 0 {
				seq.ack = ack
			}
		}
	}()
	pp.pending = append(pp.pending, seq)
	return pp
}

// chunksOf splits a partition's batches into S2 batches (chunkLen's):
// batches without a producer run together; an idempotent producer's batch
// is split alone, each chunk's first record marked with the producer, its
// epoch, the sequence of the chunk's first record and its record count
// (api.ProducerHeaders, counted in records: docs/kafka.md "Idempotent
// producers"). Kafka's sequence counts records, so the chunks of one
// Kafka batch are consecutive batches of the producer, each applied once,
// and a retry, chunked alike, is judged chunk by chunk.
func chunksOf(bs []producedBatch) ([][]api.Record, error) {
	var out [][]api.Record
	var plain []api.Record
	flush := func() {
		for len(plain) > 0 {
			n := chunkLen(plain, 0) // ≥ 1: every record fits an S2 batch
			out = append(out, plain[:n])
			plain = plain[n:]
		}
	}
	for _, b := range bs {
		if b.pid < 0 {
			plain = append(plain, b.recs...)
			continue
		}
		flush()
		recs := b.recs
		for off := uint64(0); len(recs) > 0; {
			m := api.ProducerMark{ID: producerMarkID(b.pid), Epoch: uint64(b.epoch),
				Seq: (uint64(b.seq) + off) % api.ProducerSeqWrap, Records: api.MaxBatchRecords}
			reserve := (&api.Record{Headers: api.ProducerHeaders(m)}).MeteredSize() - 8
			n := chunkLen(recs, reserve)
			if n == 0 {
				return nil, &recordError{code: kerr.MessageTooLarge.Code,
					msg: fmt.Sprintf("a record of %d metered bytes, with an idempotent producer's headers, is over an S2 batch's %d",
						recs[0].MeteredSize()+reserve, api.MaxBatchMeteredBytes)}
			}
			m.Records = uint64(n)
			recs[0].Headers = append(recs[0].Headers, api.ProducerHeaders(m)...)
			out = append(out, recs[:n])
			recs, off = recs[n:], off+uint64(n)
		}
	}
	flush()
	return out, nil
}

// producerMarkID is the starlog producer id of Kafka producer id pid.
func producerMarkID(pid int64) string { return "kafka-" + strconv.FormatInt(pid, 10) }

// producerCode maps an idempotent producer's refusal (a 409 of
// shared/api's producer codes) to the Kafka error clients expect of it:
//
//   - a seq past the next, or inside the batches remembered:
//     OUT_OF_ORDER_SEQUENCE_NUMBER;
//   - a seq other than 0 where the star expects the producer to start at
//     0 (an id it does not know, or has forgotten): UNKNOWN_PRODUCER_ID,
//     on which clients start over with a new producer id;
//   - an epoch below the producer's: INVALID_PRODUCER_EPOCH;
//   - a retry of a batch applied so long ago that its offset is not
//     remembered: DUPLICATE_SEQUENCE_NUMBER, which franz-go and
//     librdkafka take for success (without an offset).
func producerCode(ae *api.Error) (int16, bool) {
	switch ae.Code {
	case api.CodeProducerSeqGap:
		if next, ok := ae.ProducerExpectedSeq(); ok && next == 0 {
			return kerr.UnknownProducerID.Code, true
		}
		return kerr.OutOfOrderSequenceNumber.Code, true
	case api.CodeProducerEpochStale:
		return kerr.InvalidProducerEpoch.Code, true
	case api.CodeProducerAckForgotten:
		return kerr.DuplicateSequenceNumber.Code, true
	}
	return 0, false
}
