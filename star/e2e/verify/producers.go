package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// Idempotent producers of the S2 face in the history (docs/api.md
// "Idempotent producers"). A producer client appends batches whose first
// record carries the starlog-producer headers through a random star's S2
// API. An attempt without a definite answer (no answer, a 5xx, a 429) is
// sent again, to a random star, with the same producer id, epoch, seq and
// records, a few times: the star answers a retry of an applied batch with
// the original ack, so the history holds one operation for all attempts
// with that ack, and an append the retries applied twice is a record no
// operation explains. A producer whose attempts all went unanswered
// starts a new epoch (its last seq's outcome is unknown).

// producerAttempts bounds the sends of one producer append.
const producerAttempts = 4

type producerClient struct {
	id      int
	stream  string
	basin   string
	clients []*sdk.Client
	h       *History
	rng     *rand.Rand

	ops        int
	epoch, seq uint64
	producer   string
}

func newProducerClient(id int, basin, stream string, clients []*sdk.Client, h *History, rng *rand.Rand) *producerClient {
	return &producerClient{id: id, stream: stream, basin: basin, clients: clients, h: h, rng: rng,
		producer: fmt.Sprintf("verify-p%d", id)}
}

func (c *producerClient) run(ctx context.Context) {
	for ctx.Err() == nil {
		if c.append(ctx) {
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(20+c.rng.IntN(40)) * time.Millisecond):
			}
		}
	}
}

// append makes one producer append (all its attempts); it reports whether
// the append failed.
func (c *producerClient) append(ctx context.Context) (failed bool) {
	c.ops++
	n := 1 + c.rng.IntN(3)
	ai := &api.AppendInput{}
	hashes := make([]uint64, n)
	for i := range n {
		rec := api.Record{Body: fmt.Appendf(nil, "%s/p%d/o%d/%d", c.stream, c.id, c.ops, i)}
		if i == 0 {
			rec.Headers = api.ProducerHeaders(api.ProducerMark{ID: c.producer, Epoch: c.epoch, Seq: c.seq})
		}
		hashes[i] = RecordHash(&rec)
		ai.Records = append(ai.Records, rec)
	}
	in := &Input{Stream: c.stream, Kind: KindAppend, Records: hashes, Label: fmt.Sprintf("p%d/o%d", c.id, c.ops)}
	call := c.h.Now()
	var ack api.AppendAck
	var err error
	retries := 0
	for attempt := 0; attempt < producerAttempts && ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			retries++
			select { // the same batch again, shortly: applied at most once
			case <-ctx.Done():
			case <-time.After(time.Duration(20+c.rng.IntN(40)) * time.Millisecond):
			}
		}
		octx, cancel := context.WithTimeout(ctx, opTimeout)
		ack, err = c.clients[c.rng.IntN(len(c.clients))].Basin(c.basin).Stream(c.stream).Append(octx, ai)
		cancel()
		var ae *api.Error
		if err == nil || errors.As(err, &ae) && ae.Definite() && ae.Status != 429 {
			break
		}
	}
	var ae *api.Error
	switch {
	case err == nil:
		c.h.RecordProducerAppend(c.id, in, call, ack, nil, retries)
		c.seq++
		return false
	case errors.As(err, &ae) && ae.Definite() && ae.Status != 429:
		// Refused before anything was appended (a 409 gap or stale epoch
		// would be a bug the counts show; a fence cannot refuse: the
		// producer sends no token).
		c.h.RecordProducerRefusal(c.id, in, call, err)
	default:
		c.h.RecordProducerAppend(c.id, in, call, api.AppendAck{}, err, retries)
	}
	c.epoch, c.seq = c.epoch+1, 0
	return true
}
