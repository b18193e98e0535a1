package sdk

import (
	"context"
	"sync"

	"github.com/starlog/starlog/shared/api"
)

// IdempotentAppender appends batches as one idempotent producer of a
// stream (docs/api.md "Idempotent producers"): each batch's first record
// gets the starlog-producer headers, with the producer's id, its epoch and
// a seq that starts at 0 and grows by one per acknowledged batch. The star
// applies each (id, epoch, seq) at most once and answers a retry with the
// original ack, so every failure the client's RetryPolicy retries is
// retried, indefinite ones included, whatever its AppendRetry. It is safe
// for concurrent use; batches are appended one at a time, in call order.
type IdempotentAppender struct {
	s         *Stream
	id        string
	epoch     uint64
	mu        sync.Mutex
	next      uint64
	unsettled int // records of the batch whose last attempt failed indefinitely
}

// IdempotentAppender returns an appender for producer id in epoch (id 1–128
// bytes). Start each process's producer at an epoch above any earlier one
// of the same id (a stale epoch is refused with 409 producer_epoch_stale):
// a time or a counter kept elsewhere will do.
func (s *Stream) IdempotentAppender(id string, epoch uint64) (*IdempotentAppender, error) {
	if len(id) == 0 || len(id) > api.MaxProducerIDBytes {
		return nil, api.Invalid("a producer id must be 1 to %d bytes, got %d", api.MaxProducerIDBytes, len(id))
	}
	return &IdempotentAppender{s: s, id: id, epoch: epoch}, nil
}

// Append appends in as the producer's next batch. The producer headers
// replace any the first record had; in is not modified.
//
// On success the seq moves on. On a definite failure it stays and
// nothing was appended. On an indefinite one (the batch may have been
// applied) it stays too, and the next Append must carry the same records:
// it is the retry, answered with the original ack if the batch was
// applied. A batch with another record count is refused locally (422)
// until then.
func (p *IdempotentAppender) Append(ctx context.Context, in *api.AppendInput) (api.AppendAck, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(in.Records) == 0 {
		return api.AppendAck{}, api.Invalid("a batch must hold at least one record")
	}
	if p.unsettled != 0 && len(in.Records) != p.unsettled {
		return api.AppendAck{}, api.Invalid("producer %q seq %d failed indefinitely: the next append must retry its %d records, not %d",
			p.id, p.next, p.unsettled, len(in.Records))
	}
	out := *in
	out.Records = append([]api.Record(nil), in.Records...)
	first := out.Records[0]
	first.Headers = api.ProducerHeaders(api.ProducerMark{ID: p.id, Epoch: p.epoch, Seq: p.next})
	for _, h := range in.Records[0].Headers {
		switch string(h.Name) {
		case api.HeaderProducer, api.HeaderProducerEpoch, api.HeaderProducerSeq:
		default:
			first.Headers = append(first.Headers, h)
		}
	}
	out.Records[0] = first
	ack, err := p.s.Append(ctx, &out)
	switch {
	case err == nil:
		p.next++
		p.unsettled = 0
	case IsDefinite(err):
		p.unsettled = 0
	default:
		p.unsettled = len(in.Records)
	}
	return ack, err
}

// Next is the seq the next batch gets.
func (p *IdempotentAppender) Next() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.next
}
