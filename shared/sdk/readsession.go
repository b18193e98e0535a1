package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/starlog/starlog/shared/api"
)

// DefaultHeartbeatTimeout is how long a read session may hear nothing
// before it gives up on the connection: the server sends a heartbeat at
// least every 15 s while idle, and S2's SDKs wait 20 s.
const DefaultHeartbeatTimeout = 20 * time.Second

// ReadSessionOptions configures a read session.
type ReadSessionOptions struct {
	// HeartbeatTimeout fails the connection (and reconnects) when no frame
	// arrives for this long while Next waits. Default
	// DefaultHeartbeatTimeout.
	HeartbeatTimeout time.Duration
	// ReuseBatch decodes each batch in place: the batch Next returns (its
	// records, bodies and headers) aliases the frame it came in and the
	// session's own slices, valid only until the next Next or Close. A
	// reader done with each batch before the next (one that writes it
	// out, as star read does) saves a copy and a fresh allocation of
	// every batch.
	ReuseBatch bool
}

// ReadSession is an S2S read session: batches of records from a start
// position, following the stream live when the read is unbounded (or has a
// wait). Heartbeats keep it alive and report the tail. When the connection
// fails in a retryable way (a transport error, a heartbeat timeout, a
// retryable status, or a server advising a reconnect), it reconnects under
// the client's RetryPolicy and resumes after the last record it delivered,
// with count and bytes reduced by what was delivered. Attempts count
// consecutive failures: any frame resets them.
//
// Next is not safe for concurrent use; Close may be called from any
// goroutine.
type ReadSession struct {
	stream *Stream
	opts   ReadSessionOptions
	ctx    context.Context
	cancel context.CancelCauseFunc
	req    api.ReadRequest // for the next connection: start and limits left
	policy RetryPolicy

	conn     *readConn
	dec      api.ReadBatchDecoder // ReuseBatch's
	failures int
	backoff  *backoff.ExponentialBackOff
	err      error
	eof      bool
	// resumed: req starts after the last record delivered.
	resumed bool

	mu       sync.Mutex
	tail     *api.StreamPosition
	connects int
}

// readConn is one connection of a read session.
type readConn struct {
	body      io.ReadCloser
	fr        *api.FrameReader
	cancel    context.CancelCauseFunc
	timer     *time.Timer
	timedOut  chan struct{} // closed when the heartbeat timer fired
	reconnect bool          // the server advised a reconnect
}

func (c *readConn) close() {
	c.timer.Stop()
	c.cancel(errors.New("read session connection closed"))
	c.body.Close()
	c.fr.Close()
}

// ReadSession opens an S2S read session on the stream from req (whose
// limits are uncapped in sessions). A tail-offset start is first turned
// into a seq num with a check-tail, so that reconnects resume at the same
// point. The first connection is made before it returns, so a refused read
// (416 past the tail, 404, ...) fails here. ctx bounds the whole session.
func (s *Stream) ReadSession(ctx context.Context, req api.ReadRequest, opts ReadSessionOptions) (*ReadSession, error) {
	if opts.HeartbeatTimeout <= 0 {
		opts.HeartbeatTimeout = DefaultHeartbeatTimeout
	}
	// The session shrinks count and bytes as it goes: own copies.
	if req.Count != nil {
		req.Count = api.Uint64(*req.Count)
	}
	if req.Bytes != nil {
		req.Bytes = api.Uint64(*req.Bytes)
	}
	sctx, cancel := context.WithCancelCause(ctx)
	r := &ReadSession{
		stream: s,
		opts:   opts,
		ctx:    sctx,
		cancel: cancel,
		req:    req,
		policy: s.b.c.retry,
	}
	r.backoff = r.policy.newBackoff()
	r.pinStart()
	if err := r.connectWithRetry(); err != nil {
		cancel(err)
		return nil, fmt.Errorf("read session on %s: %w", s.name, err)
	}
	return r, nil
}

// pinStart turns a tail-offset start into a seq num, from the tail as it
// is now. A reconnect before the first record then resumes at that point;
// re-resolving the offset against a later tail would skip the records
// appended in between. If the tail cannot be read, the server resolves the
// offset (and a reconnect before the first record may skip).
func (r *ReadSession) pinStart() {
	if r.req.From != api.FromTailOffset {
		return
	}
	tail, err := r.stream.CheckTail(r.ctx)
	if err != nil {
		r.stream.b.c.log.DebugContext(r.ctx, "sdk: read session: check-tail failed, the server resolves the tail offset", "stream", r.stream.name, "err", err)
		return
	}
	r.req.From, r.req.Value = api.FromSeqNum, tail.SeqNum-min(r.req.Value, tail.SeqNum)
}

// Next returns the next non-empty batch. It returns io.EOF when the read
// ends normally (a limit, until or wait reached), and otherwise the error
// that ended the session; after either, it keeps returning it.
func (r *ReadSession) Next() (*api.ReadBatch, error) {
	for {
		if r.err != nil {
			return nil, r.err
		}
		if r.eof || r.limitsDone() {
			r.eof = true
			return nil, io.EOF
		}
		if r.conn == nil {
			if err := r.connectWithRetry(); err != nil {
				r.setErr(err)
				continue
			}
		}
		b, err := r.readBatch()
		if err == nil {
			r.failures = 0
			r.backoff.Reset()
			if len(b.Records) == 0 {
				continue // heartbeat
			}
			return b, nil
		}
		r.conn.close()
		r.conn = nil
		if errors.Is(err, io.EOF) {
			r.eof = true
			continue
		}
		if r.ctx.Err() != nil {
			r.setErr(context.Cause(r.ctx))
			continue
		}
		if !r.policy.mayRetry(idempotent, err) {
			r.setErr(err)
			continue
		}
		r.failures++
		if r.failures >= r.policy.MaxAttempts {
			r.setErr(fmt.Errorf("read session on %s: giving up after %d attempts: %w", r.stream.name, r.failures, err))
			continue
		}
		r.stream.b.c.log.DebugContext(r.ctx, "sdk: read session reconnecting", "stream", r.stream.name, "err", err)
		if err := r.sleep(err); err != nil {
			r.setErr(err)
		}
	}
}

// Tail is the stream tail last reported by the server (on live batches and
// heartbeats).
func (r *ReadSession) Tail() (api.StreamPosition, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tail == nil {
		return api.StreamPosition{}, false
	}
	return *r.tail, true
}

// Reconnects is how many times the session has reconnected.
func (r *ReadSession) Reconnects() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return max(r.connects-1, 0)
}

// Close ends the session; a Next in progress returns an error.
func (r *ReadSession) Close() error {
	r.cancel(errors.New("read session closed"))
	return nil
}

func (r *ReadSession) setErr(err error) {
	r.err = err
	if r.conn != nil {
		r.conn.close()
		r.conn = nil
	}
	r.cancel(err)
}

// limitsDone reports whether count or bytes are used up.
func (r *ReadSession) limitsDone() bool {
	return (r.req.Count != nil && *r.req.Count == 0) || (r.req.Bytes != nil && *r.req.Bytes == 0)
}

// sleep waits the backoff, or longer when after (a 429's retry-after,
// capped by the policy) asks for more.
func (r *ReadSession) sleep(after error) error {
	wait := r.backoff.NextBackOff()
	if ra := retryAfter(after); ra > 0 {
		wait = max(wait, min(ra, r.policy.MaxRetryAfter))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-r.ctx.Done():
		return context.Cause(r.ctx)
	}
}

// connectWithRetry opens a connection, retrying retryable refusals.
func (r *ReadSession) connectWithRetry() error {
	for {
		err := r.connect()
		if err == nil {
			return nil
		}
		if r.ctx.Err() != nil {
			return context.Cause(r.ctx)
		}
		if !r.policy.mayRetry(idempotent, err) {
			return err
		}
		r.failures++
		if r.failures >= r.policy.MaxAttempts {
			return fmt.Errorf("giving up after %d attempts: %w", r.failures, err)
		}
		if err := r.sleep(err); err != nil {
			return err
		}
	}
}

// connect opens one connection from the current position.
func (r *ReadSession) connect() error {
	cctx, cancel := context.WithCancelCause(r.ctx)
	req, err := r.stream.sessionRequest(cctx, http.MethodGet, r.req.Query(), nil)
	if err != nil {
		cancel(err)
		return err
	}
	resp, err := r.stream.b.c.session.Do(req)
	if err != nil {
		cancel(err)
		return &TransportError{Op: "read session", Err: err}
	}
	if err := checkSessionResponse(resp); err != nil {
		cancel(err)
		return err
	}
	fr := api.NewFrameReader(resp.Body)
	fr.Keep = api.MaxFrameLen // batches are copied out by the decoder
	c := &readConn{
		body:     resp.Body,
		fr:       fr,
		cancel:   cancel,
		timedOut: make(chan struct{}),
	}
	c.timer = time.AfterFunc(r.opts.HeartbeatTimeout, func() {
		close(c.timedOut)
		cancel(errors.New("heartbeat timeout"))
	})
	c.timer.Stop()
	r.mu.Lock()
	r.connects++
	r.mu.Unlock()
	r.conn = c
	return nil
}

// readBatch reads frames until a batch (possibly a heartbeat) arrives,
// under the heartbeat timeout.
func (r *ReadSession) readBatch() (*api.ReadBatch, error) {
	c := r.conn
	if c.reconnect {
		// The server advised a reconnect and the last batch has been
		// delivered: reconnect now, at a batch boundary.
		return nil, &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "server advised a reconnect"}
	}
	c.timer.Reset(r.opts.HeartbeatTimeout)
	f, err := c.fr.Next()
	fired := !c.timer.Stop()
	if fired {
		select {
		case <-c.timedOut:
			return nil, errHeartbeatTimeout(r.opts.HeartbeatTimeout)
		default:
		}
	}
	switch {
	case errors.Is(err, io.EOF):
		return nil, io.EOF
	case err != nil:
		return nil, frameError("read session: receive", err)
	case f.Terminal:
		return nil, f.Err()
	}
	if f.ReconnectAdvised {
		c.reconnect = true
	}
	var b *api.ReadBatch
	var derr *api.Error
	if r.opts.ReuseBatch {
		b, derr = r.dec.Decode(f.Payload)
	} else {
		b, derr = api.DecodeReadBatchProto(f.Payload)
	}
	if derr != nil {
		return nil, &ProtocolError{Msg: "read session: decode batch", Err: derr}
	}
	if err := r.advance(b); err != nil {
		return nil, err
	}
	return b, nil
}

// advance moves the resume position past b: the next start is the last
// record's seq num + 1, and count and bytes shrink by what b delivered.
// A heartbeat moves nothing: its tail is the stream's, which may be ahead
// of what the session has delivered (records sequenced but not yet
// durable, or still being caught up).
func (r *ReadSession) advance(b *api.ReadBatch) error {
	var next *uint64
	if r.resumed {
		next = &r.req.Value
	}
	if err := checkSeqOrder(b.Records, next); err != nil {
		return err
	}
	if b.Tail != nil {
		t := *b.Tail
		r.mu.Lock()
		r.tail = &t
		r.mu.Unlock()
	}
	if n := len(b.Records); n > 0 {
		r.req.From, r.req.Value, r.resumed = api.FromSeqNum, b.Records[n-1].SeqNum+1, true
		if r.req.Count != nil {
			*r.req.Count = subSat(*r.req.Count, uint64(n))
		}
		if r.req.Bytes != nil {
			*r.req.Bytes = subSat(*r.req.Bytes, api.MeteredBytes(b.Records))
		}
	}
	return nil
}

func subSat(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
