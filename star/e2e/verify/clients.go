package verify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// Workload configures the clients of one history.
type Workload struct {
	// Endpoints are the stars' base URLs; every operation picks one at
	// random (a star that does not lead the stream forwards).
	Endpoints []string
	Basin     string
	Streams   []string
	// ClientsPerStream client goroutines run on each stream.
	ClientsPerStream int
	// AppendersPerStream more client goroutines on each stream only
	// append, as producers do: a client that reads waits out a read that
	// hangs (on a black-holed bucket, say) before it appends again, and
	// the write path under test must see appends meanwhile.
	AppendersPerStream int
	// DurablePerStream more client goroutines on every even-numbered
	// stream append through the Durable Streams face as idempotent
	// producers (durable.go), mixed with the S2 clients of that stream,
	// which then never fence it (the protocol's writers hold no token).
	DurablePerStream int
	// ProducersPerStream more client goroutines on each stream append as
	// idempotent producers of the S2 face (producers.go), retrying each
	// batch with its mark until it is answered.
	ProducersPerStream int
	// KafkaPerStream more client goroutines on every even-numbered
	// stream produce through the Kafka face (kafka.go) as idempotent kgo
	// producers, to the partition the stream is (TopicStream: the
	// streams are a topic's); those streams are never fenced (a Kafka
	// produce carries no token). KafkaBrokers are the stars' Kafka
	// addresses.
	KafkaPerStream int
	KafkaBrokers   []string
	// RequestTimeout bounds one call (default 10 s).
	RequestTimeout time.Duration
	// ReadTimeout bounds one read or check-tail (default RequestTimeout).
	// Shorter, a read that hangs (on a black-holed bucket, say) fails
	// sooner and its client goes on appending: every client is
	// sequential, so reads that hang would starve the appends.
	ReadTimeout time.Duration
	Seed        uint64
	Logger      *slog.Logger
	// Catalog, when set, is the basin of the delete and re-create nemesis:
	// Basin must be its basin, every operation passes its gate and is
	// recorded under its stream's current incarnation (Catalog.Key), and
	// a client starts over (no tail, no token) in a new incarnation.
	// Durable Streams clients are not run there.
	Catalog *Catalog
}

// NewClients builds one SDK client per endpoint that never retries: each
// call in the history is exactly one attempt, so its outcome is precise.
func NewClients(endpoints []string, timeout time.Duration, log *slog.Logger) ([]*sdk.Client, error) {
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	var cs []*sdk.Client
	for _, ep := range endpoints {
		c, err := sdk.New(sdk.Config{
			AccountEndpoint: ep,
			Token:           AdminToken,
			RequestTimeout:  timeout,
			Retry:           sdk.RetryPolicy{MaxAttempts: 1, AppendRetry: sdk.AppendRetryNone},
			Logger:          log,
		})
		if err != nil {
			return nil, fmt.Errorf("sdk client for %s: %w", ep, err)
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// Run drives the clients until ctx is done, recording into h.
func (w *Workload) Run(ctx context.Context, h *History) error {
	log := w.Logger
	if log == nil {
		log = slog.Default()
	}
	cs, err := NewClients(w.Endpoints, w.RequestTimeout, log)
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	var wg sync.WaitGroup
	id := 0
	for si, name := range w.Streams {
		for k := range w.ClientsPerStream + w.AppendersPerStream {
			c := &client{
				id: id, stream: name, basin: w.Basin, clients: cs, h: h, readTimeout: w.ReadTimeout,
				rng:        rand.New(rand.NewPCG(w.Seed, uint64(id)<<32|uint64(si))),
				appendOnly: k >= w.ClientsPerStream, cat: w.Catalog, key: name,
			}
			c.noFence = (w.DurablePerStream > 0 || w.KafkaPerStream > 0) && si%2 == 0
			id++
			wg.Go(func() { c.run(ctx) })
		}
		if w.Catalog == nil {
			for range w.ProducersPerStream {
				p := newProducerClient(id, w.Basin, name, cs, h, rand.New(rand.NewPCG(w.Seed, uint64(id)<<32|uint64(si))))
				id++
				wg.Go(func() { p.run(ctx) })
			}
		}
		if si%2 != 0 || w.Catalog != nil {
			continue
		}
		for range w.KafkaPerStream {
			k, err := newKafkaClient(id, w.KafkaBrokers, name, h, rand.New(rand.NewPCG(w.Seed, uint64(id)<<32|uint64(si))))
			if err != nil {
				stop() // the clients started end, then Run fails
				wg.Wait()
				return err
			}
			id++
			wg.Go(func() { k.run(ctx) })
		}
		for range w.DurablePerStream {
			d := newDurableClient(id, name, w.Endpoints, h, rand.New(rand.NewPCG(w.Seed, uint64(id)<<32|uint64(si))))
			id++
			wg.Go(func() { d.run(ctx) })
		}
	}
	wg.Wait()
	return nil
}

// client is one sequential client of one stream. Its beliefs (tail,
// token) come from its own results and steer it towards conditions that
// sometimes hold and sometimes fail.
type client struct {
	id      int
	stream  string
	basin   string
	clients []*sdk.Client
	h       *History
	rng     *rand.Rand
	// readTimeout bounds a read or check-tail (0: opTimeout).
	readTimeout time.Duration
	// appendOnly: the client only appends (a producer).
	appendOnly bool
	// noFence: the client sends no fence command (a stream shared with
	// Durable Streams writers).
	noFence bool
	// cat is the delete and re-create nemesis's catalog, if the stream is
	// in its basin; key is the history's name of the stream's incarnation
	// the current operation meets (the stream's name without cat).
	cat *Catalog
	key string

	ops  int
	tail uint64
	// visible is the highest end of a record the client saw acknowledged
	// or read (a lower bound of the stream's tail, unlike tail, which a
	// 412 may set from batches not yet durable).
	visible   uint64
	token     string
	haveToken bool
}

func (c *client) handle() *sdk.Stream {
	return c.clients[c.rng.IntN(len(c.clients))].Basin(c.basin).Stream(c.stream)
}

func (c *client) run(ctx context.Context) {
	for ctx.Err() == nil {
		c.ops++
		leave := func() {}
		if c.cat != nil {
			var key string
			key, leave = c.cat.enter(c.stream)
			if key != c.key {
				// A new incarnation: what the client knew of the old one
				// (tail, token) does not hold.
				c.key, c.tail, c.visible, c.token, c.haveToken = key, 0, 0, "", false
			}
		}
		var failed bool
		p := c.rng.IntN(100)
		if c.appendOnly {
			// Plain appends, some with match_seq_num (its tail comes from
			// its own acks and 412s).
			p = p * 50 / 100
		}
		switch {
		case p < 30:
			failed = c.append(ctx, false, false, false)
		case p < 50:
			failed = c.append(ctx, true, false, false)
		case p < 60:
			failed = c.append(ctx, c.rng.IntN(2) == 0, c.haveToken, false)
		case p < 65 && !c.noFence:
			failed = c.append(ctx, false, c.haveToken, true)
		case p < 65:
			failed = c.append(ctx, false, false, false)
		case p < 85:
			failed = c.read(ctx)
		default:
			failed = c.checkTail(ctx)
		}
		leave()
		if failed {
			// The star is down or restarting: do not spin.
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(20+c.rng.IntN(40)) * time.Millisecond):
			}
		}
	}
}

// opTimeout bounds an append (the SDK's request timeout, 10 s, too).
const opTimeout = 10 * time.Second

// opCtx bounds one call by the run's end: the run stopping cancels calls
// in flight (they then count as indefinite), so a history ends promptly.
func (c *client) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, opTimeout)
}

// readCtx bounds one read or check-tail.
func (c *client) readCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.readTimeout > 0 && c.readTimeout < opTimeout {
		return context.WithTimeout(ctx, c.readTimeout)
	}
	return c.opCtx(ctx)
}

// append sends 1–5 unique records, with match_seq_num and the fencing
// token if asked, and a fence command record (to a new token) if fence.
func (c *client) append(ctx context.Context, match, withToken, fence bool) (failed bool) {
	n := 1 + c.rng.IntN(5)
	recs := make([]api.Record, 0, n+1)
	in := &Input{Stream: c.key, Kind: KindAppend}
	var newToken string
	if fence {
		if c.rng.IntN(5) == 0 {
			newToken = "" // clears the token
		} else {
			newToken = fmt.Sprintf("t%d.%d", c.id, c.ops)
		}
		recs = append(recs, api.FenceRecord(newToken))
		in.FenceTo = &newToken
	}
	for i := range n {
		r := api.Record{Body: fmt.Appendf(nil, "%s/c%d/o%d/r%d", c.key, c.id, c.ops, i)}
		if i%2 == 1 {
			r.Headers = []api.Header{{Name: []byte("k"), Value: fmt.Appendf(nil, "v%d", i)}}
		}
		recs = append(recs, r)
	}
	in.Label = fmt.Sprintf("c%d/o%d", c.id, c.ops)
	for i := range recs {
		in.Records = append(in.Records, RecordHash(&recs[i]))
	}
	ai := &api.AppendInput{Records: recs}
	if match {
		in.MatchSeqNum = api.Uint64(c.tail)
		ai.MatchSeqNum = in.MatchSeqNum
	}
	if withToken {
		in.FencingToken = api.String(c.token)
		ai.FencingToken = in.FencingToken
	}
	octx, cancel := c.opCtx(ctx)
	call := c.h.Now()
	ack, err := c.handle().Append(octx, ai)
	cancel()
	o := c.h.RecordAppend(c.id, in, call, ack, err)
	switch {
	case err == nil:
		c.tail = ack.End.SeqNum
		c.visible = max(c.visible, ack.End.SeqNum)
		if fence {
			c.token, c.haveToken = newToken, true
		}
	case o == OutSeqMismatch:
		c.tail = outputFromError(o, err).Tail
	case o == OutTokenMismatch:
		c.token, c.haveToken = outputFromError(o, err).Token, true
	default:
		return true
	}
	return false
}

// read reads from a seq at or below the believed tail (at it: a 416).
func (c *client) read(ctx context.Context) (failed bool) {
	from := uint64(0)
	if c.tail > 0 {
		// Mostly near the tail (the flight index), sometimes anywhere
		// (span refs and settled objects).
		if c.rng.IntN(2) == 0 {
			from = c.tail - min(c.tail, uint64(c.rng.IntN(20)))
		} else {
			from = c.rng.Uint64N(c.tail + 1)
		}
	}
	count := uint64(1 + c.rng.IntN(100))
	in := &Input{Stream: c.key, Kind: KindRead, From: from, Count: count}
	octx, cancel := c.readCtx(ctx)
	call := c.h.Now()
	b, err := c.handle().Read(octx, api.ReadRequest{From: api.FromSeqNum, Value: from, Count: &count})
	cancel()
	c.h.RecordRead(c.id, in, call, b, err)
	var ae *api.Error
	switch {
	case err == nil:
		if n := uint64(len(b.Records)); n < count && from+n < c.visible {
			c.h.NoteShortRead(fmt.Sprintf("%s: c%d read(%d, %d) returned %d records though seq %d was acknowledged or read before the call",
				c.key, c.id, from, count, n, c.visible-1))
		}
		if len(b.Records) > 0 {
			end := b.Records[len(b.Records)-1].SeqNum + 1
			c.tail = max(c.tail, end)
			c.visible = max(c.visible, end)
		}
	case errors.As(err, &ae) && ae.Status == 416:
		if t, ok := ae.Tail(); ok {
			c.tail = t.SeqNum
			c.visible = max(c.visible, t.SeqNum)
		}
	default:
		return true
	}
	return false
}

func (c *client) checkTail(ctx context.Context) (failed bool) {
	octx, cancel := c.readCtx(ctx)
	call := c.h.Now()
	t, err := c.handle().CheckTail(octx)
	cancel()
	c.h.RecordCheckTail(c.id, c.key, call, t, err)
	if err != nil {
		return true
	}
	c.tail = t.SeqNum
	c.visible = max(c.visible, t.SeqNum)
	return false
}
