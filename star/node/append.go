package node

import (
	"context"
	"errors"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/catalog"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/ratelimit"
	"github.com/starlog/starlog/star/streams"
)

// Appender appends to one stream this star leads: a unary append or an
// append session. Close it when done: a stream with an open appender is
// not released as idle.
type Appender struct {
	n *Node
	l *ledStream // nil until the stream exists (see OpenAppend)

	basin, name string
	create      *api.StreamConfig
	closed      bool
}

// OpenAppend resolves a stream for an append session and leads it. A
// missing stream the basin creates on append (with create as its config,
// from the s2-stream-config header) is created by the first Submit whose
// input a new stream accepts, not here: a session that never appends
// leaves nothing behind.
func (n *Node) OpenAppend(ctx context.Context, basin, name string, create *api.StreamConfig) (*Appender, error) {
	return n.openAppend(ctx, basin, name, create, catalog.AutoCreate{OnAppend: true, Config: create, Lazy: true})
}

func (n *Node) openAppend(ctx context.Context, basin, name string, create *api.StreamConfig, ac catalog.AutoCreate) (*Appender, error) {
	b, e, err := n.cat.LiveStream(ctx, basin, name, ac)
	if err != nil {
		return nil, err
	}
	n.quota.Observe(basin, b.Row.ID, b.Row.Config.Quotas)
	a := &Appender{n: n, basin: basin, name: name, create: create}
	if e == nil {
		return a, nil // created by the first accepted Submit
	}
	if a.l, err = n.lead(ctx, b, e); err != nil {
		return nil, err
	}
	a.l.acquire()
	return a, nil
}

// createFor creates and leads the stream of a lazily opened appender, if
// a new stream accepts in.
func (a *Appender) createFor(ctx context.Context, in *api.AppendInput) error {
	b, e, err := a.n.cat.LiveStream(ctx, a.basin, a.name, catalog.AutoCreate{OnAppend: true, Config: a.create, Admit: a.n.admitNew(in)})
	if err != nil {
		return err
	}
	l, err := a.n.lead(ctx, b, e)
	if err != nil {
		return err
	}
	l.acquire()
	a.l = l
	return nil
}

// Close releases the appender's hold on the stream (idempotent).
func (a *Appender) Close() {
	if !a.closed && a.l != nil {
		a.l.release()
	}
	a.closed = true
}

// PendingAppend is a sequenced batch waiting for its ack.
type PendingAppend struct {
	a *Appender
	t *streams.Ticket
}

// Submit validates and sequences in and hands it to the loglet without
// waiting for the ack: batches submitted one after another are acked in
// that order (pipelining). ctx bounds only the wait for pool budget.
// Every error is definite: nothing was sequenced.
func (a *Appender) Submit(ctx context.Context, in *api.AppendInput) (*PendingAppend, error) {
	if err := api.ValidateAppendInput(in); err != nil {
		return nil, err
	}
	if a.l == nil {
		if err := a.createFor(ctx, in); err != nil {
			return nil, err
		}
	}
	a.l.touch()
	// The rate limits before the admit lock: a throttled session input
	// must not hold up a handoff (admit's write side). A stream created
	// just now has fresh buckets, so its first batch is always within them.
	if err := a.n.limits.Admit(ctx, a.l.s.ID, in); err != nil {
		return nil, err
	}
	if err := a.n.quota.Take(a.basin, api.MeteredBytes(in.Records)); err != nil {
		return nil, err
	}
	// A marked batch needs the stream's producers: loaded once, before
	// the admit lock, as the fold reads records.
	if marked(in) {
		if err := a.loadProducers(ctx); err != nil {
			return nil, err
		}
	}
	a.l.admit.RLock()
	defer a.l.admit.RUnlock()
	if err := a.l.gone(); err != nil {
		return nil, err
	}
	t, err := a.l.s.Submit(ctx, facadeRequest(in))
	if err != nil {
		return nil, a.n.appendErr(a.l.class, err, false)
	}
	end := t.Sequenced().End.SeqNum
	for cur := a.l.maxEnd.Load(); end > cur && !a.l.maxEnd.CompareAndSwap(cur, end); cur = a.l.maxEnd.Load() {
	}
	return &PendingAppend{a: a, t: t}, nil
}

// Sequenced is the batch's assigned range [start, end).
func (p *PendingAppend) Sequenced() (start, end uint64) {
	s := p.t.Sequenced()
	return s.Start.SeqNum, s.End.SeqNum
}

// Wait blocks until the batch is durable and released, or failed. A
// failure here is indefinite (503 unavailable): the batch may yet be
// durable.
func (p *PendingAppend) Wait(ctx context.Context) (api.AppendAck, error) {
	ack, err := p.t.Wait(ctx)
	if err != nil {
		return api.AppendAck{}, p.a.n.appendErr(p.a.l.class, err, true)
	}
	if ack.EndTimestampUnknown {
		// A retry of a batch rebuilt from the records: its last record
		// tells the end's timestamp.
		ts, err := p.a.n.endTimestamp(ctx, p.a.basin, p.a.name, ack.End.SeqNum)
		if err != nil {
			p.a.n.log.Warn("a retry's end timestamp is not readable", "stream", p.a.l.s.ID, "err", err)
			return api.AppendAck{}, api.Unavailable("the batch was already applied, but its acknowledgement cannot be read back now; retry")
		}
		ack.End.Timestamp = ts
	}
	if p.t.Duplicate() == nil {
		p.a.n.maybeCheckpointProducers(p.a.l)
	}
	return api.AppendAck{Start: position(ack.Start), End: position(ack.End), Tail: position(ack.Tail)}, nil
}

// Tail is the stream's durable tail (zero while it does not exist yet).
func (a *Appender) Tail() api.StreamPosition {
	if a.l == nil {
		return api.StreamPosition{}
	}
	return position(a.l.s.Tail())
}

// Append appends one batch and waits for its ack (POST …/records). It
// waits for pool budget at most Config.AdmitTimeout. A missing stream the
// basin creates on append is created only for a batch it would accept.
func (n *Node) Append(ctx context.Context, basin, name string, in *api.AppendInput, create *api.StreamConfig) (api.AppendAck, error) {
	if err := api.ValidateAppendInput(in); err != nil {
		return api.AppendAck{}, err
	}
	a, err := n.openAppend(ctx, basin, name, create, catalog.AutoCreate{OnAppend: true, Config: create, Admit: n.admitNew(in)})
	if err != nil {
		return api.AppendAck{}, err
	}
	defer a.Close()
	actx, cancel := context.WithTimeout(ratelimit.WithUnary(ctx), n.cfg.AdmitTimeout)
	p, err := a.Submit(actx, in)
	cancel()
	if err != nil {
		return api.AppendAck{}, err
	}
	return p.Wait(ctx)
}

// appendErr maps a failure of the write path to the API: the facade's
// rejections to 412 (under the clock guard: fromMemory) and 422, the
// loglet's unavailability (deposed, closed, no pool budget in time, an ack
// no longer awaited) to a retryable 503. sequenced says the batch was
// already sequenced: its outcome is unknown.
func (n *Node) appendErr(class meta.Class, err error, sequenced bool) error {
	var (
		seq   facade.SeqNumMismatchError
		fence facade.FencingTokenMismatchError
		inv   facade.InvalidError
		prod  facade.ProducerError
	)
	switch {
	case errors.As(err, &prod):
		// Judged on this star's memory of the producer, like a 412.
		return n.fromMemory(prod.Err)
	case errors.Is(err, facade.ErrProducersNotLoaded):
		return api.Unavailable("the stream's producer state is being rebuilt; nothing was sequenced; retry")
	case errors.Is(err, streams.ErrOriginalFailed):
		return api.Unavailable("the original of this retried batch failed before it was acknowledged; it may or may not be durable; retry")
	case errors.As(err, &seq):
		return n.fromMemory(api.SeqNumMismatch(seq.Expected))
	case errors.As(err, &fence):
		return n.fromMemory(api.FencingTokenMismatch(fence.Current))
	case errors.As(err, &inv):
		return api.Invalid("%s", inv.Reason)
	case errors.Is(err, loglet.ErrOverShare):
		n.CountRateLimited(ratelimit.ReasonPoolShare)
		return api.RateLimitedAfter(ratelimit.PoolShareRetry, "this stream holds more than its share of the star's write buffer; retry after %v", ratelimit.PoolShareRetry)
	case errors.Is(err, loglet.ErrDeposed), errors.Is(err, loglet.ErrClosed):
		if sequenced {
			return api.Unavailable("the star stopped leading this stream before the append was acknowledged; it may or may not be durable")
		}
		return api.Unavailable("the star is not taking appends for this stream; retry")
	case errors.Is(err, loglet.ErrUnavailable):
		if sequenced {
			return api.Unavailable("the %s storage class's buckets are not taking this star's writes; the append may or may not become durable", class)
		}
		return api.Unavailable("the %s storage class's buckets are not taking this star's writes (the class is degraded); nothing was sequenced; retry", class)
	case errors.Is(err, streams.ErrRejectionUnconfirmed):
		n.unconfirmed.Inc()
		return api.Unavailable("the append's condition failed on earlier appends that are not yet durable; nothing was sequenced; retry")
	case errors.Is(err, streams.ErrAckUnknown):
		return api.Unavailable("stopped waiting for the acknowledgement; the append may or may not be durable")
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		if sequenced {
			return api.Unavailable("stopped waiting for the acknowledgement; the append may or may not be durable")
		}
		return api.Unavailable("no write buffer space within the admission timeout; retry")
	}
	n.log.Error("append failed", "class", class, "err", err)
	return api.Other("append failed")
}

// fromMemory answers a 412 that reports this star's sequencer state (the
// next seq num, the fencing token) only while the clock guard holds
// (selfLive). An accepted append needs no guard: a successor fences this
// star's chain before it opens the stream, so an ack is never released
// past the cut. A rejection touches no chain and meets no fence, so a star
// cut off from the metastore would report a tail or token a successor has
// moved past (a 412 naming a seq below acknowledged ones is not
// linearizable). It is checked after the facade rejected the batch: a
// heartbeat recorded as written at t landed with this incarnation's row
// still its own, so no peer had presumed it dead by t, and none can
// within dead-after of t; half of it is the margin selfLive keeps. The
// refusal is definite (nothing was sequenced) and retryable.
func (n *Node) fromMemory(rejection *api.Error) error {
	if err := n.zombie(); err != nil {
		return err
	}
	if d, stale := n.beatStale(); stale {
		return api.Unavailable("this star has not renewed its registration for %v, so it does not answer a %s from its own state (a successor may have moved past it); nothing was sequenced; retry",
			d, rejection.Code)
	}
	return rejection
}

// facadeRequest converts an API batch to the facade's. Headers share one
// backing array; names, values and bodies alias the input.
func facadeRequest(in *api.AppendInput) facade.Request {
	nh := 0
	for i := range in.Records {
		nh += len(in.Records[i].Headers)
	}
	hs := make([]format.Header, 0, nh)
	recs := make([]facade.Input, len(in.Records))
	for i := range in.Records {
		r := &in.Records[i]
		var rh []format.Header
		if len(r.Headers) > 0 {
			start := len(hs)
			for _, h := range r.Headers {
				hs = append(hs, format.Header(h))
			}
			rh = hs[start:len(hs):len(hs)]
		}
		recs[i] = facade.Input{Timestamp: r.Timestamp, Headers: rh, Body: r.Body}
	}
	return facade.Request{Records: recs, MatchSeqNum: in.MatchSeqNum, FencingToken: in.FencingToken}
}

func position(p facade.Position) api.StreamPosition {
	return api.StreamPosition{SeqNum: p.SeqNum, Timestamp: p.Timestamp}
}

// CountRateLimited counts a 429 the server answered itself (reason is one
// of the ratelimit.Reason* constants).
func (n *Node) CountRateLimited(reason string) { n.limits.Count(reason) }
