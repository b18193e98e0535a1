package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// writeFailGrace is how long a writer that could not send waits for the
// reader to explain why.
const writeFailGrace = 5 * time.Second

// DefaultMaxUnackedBytes bounds the metered bytes an append session keeps
// in flight before Submit blocks.
const DefaultMaxUnackedBytes = 8 << 20

// AppendSessionOptions configures an append session.
type AppendSessionOptions struct {
	// MaxUnackedBytes bounds the metered bytes of batches submitted but not
	// yet acknowledged: Submit blocks while a new batch would exceed it
	// (a batch is always admitted when nothing is in flight). Default
	// DefaultMaxUnackedBytes.
	MaxUnackedBytes int64
	// AckTimeout, if positive, fails the session when the oldest batch in
	// flight waits longer than this for its ack (an indefinite failure).
	// Zero disables it: a star delays acks under load by design, and HTTP/2
	// pings already detect a dead connection.
	AckTimeout time.Duration
}

// AppendSession is an S2S append session: batches are pipelined on one
// HTTP/2 stream and acknowledged in order. Submit and Close are safe for
// concurrent use; batches are sent in the order Submit admits them.
//
// The first failure ends the session: the batch it concerns fails with
// that error (a 412 fails with the *api.Error, carrying ExpectedSeqNum or
// CurrentFencingToken), the other unacknowledged batches with a
// *SessionError, and later Submits fail too.
type AppendSession struct {
	stream   *Stream
	opts     AppendSessionOptions
	cancel   context.CancelCauseFunc
	pw       *io.PipeWriter
	fw       *api.FrameWriter
	wake     chan struct{} // nudges the writer; capacity 1
	readDone chan struct{} // closed when the read loop has exited
	done     chan struct{} // closed when both loops have exited

	mu       sync.Mutex
	unsent   []*AppendFuture // admitted, not yet written
	unacked  []*AppendFuture // admitted and not yet acked, in order (includes unsent)
	inFlight int64           // metered bytes of unacked
	space    chan struct{}   // closed and replaced whenever inFlight drops
	lastEnd  *uint64
	closing  bool
	ended    bool
	err      error // what ended the session; nil after a clean close
	ackTimer *time.Timer
}

// AppendFuture is the outcome of one submitted batch.
type AppendFuture struct {
	records int
	size    int64
	payload []byte
	sent    bool
	sentAt  time.Time
	done    chan struct{}
	ack     api.AppendAck
	err     error
}

// Done is closed when the outcome is known.
func (f *AppendFuture) Done() <-chan struct{} { return f.done }

// Wait blocks until the batch is acknowledged or failed, or ctx ends
// (which leaves the batch in flight).
func (f *AppendFuture) Wait(ctx context.Context) (api.AppendAck, error) {
	select {
	case <-f.done:
		return f.ack, f.err
	case <-ctx.Done():
		return api.AppendAck{}, context.Cause(ctx)
	}
}

// Result returns the outcome; call it only after Done is closed.
func (f *AppendFuture) Result() (api.AppendAck, error) { return f.ack, f.err }

// AppendSession opens an S2S append session on the stream. The session
// lives until Close, a failure, or ctx's end (which aborts it).
func (s *Stream) AppendSession(ctx context.Context, opts AppendSessionOptions) (*AppendSession, error) {
	if opts.MaxUnackedBytes <= 0 {
		opts.MaxUnackedBytes = DefaultMaxUnackedBytes
	}
	sctx, cancel := context.WithCancelCause(ctx)
	pr, pw := io.Pipe()
	req, err := s.sessionRequest(sctx, http.MethodPost, nil, pr)
	if err != nil {
		cancel(err)
		return nil, fmt.Errorf("append session on %s: %w", s.name, err)
	}
	a := &AppendSession{
		stream:   s,
		opts:     opts,
		cancel:   cancel,
		pw:       pw,
		fw:       api.NewFrameWriter(pw, s.b.c.compression),
		wake:     make(chan struct{}, 1),
		readDone: make(chan struct{}),
		done:     make(chan struct{}),
		space:    make(chan struct{}),
	}
	if opts.AckTimeout > 0 {
		// Under mu: the callback reads ackTimer under mu too.
		a.mu.Lock()
		a.ackTimer = time.AfterFunc(opts.AckTimeout, a.checkAckTimeout)
		a.mu.Unlock()
	}
	var wg sync.WaitGroup
	wg.Add(2)
	// The request runs on its own: a server may hold the response headers
	// until the first frame arrives, so the writer must not wait for them.
	go func() {
		defer wg.Done()
		defer close(a.readDone)
		a.readLoop(s.b.c.session, req)
	}()
	go func() { defer wg.Done(); a.writeLoop(sctx) }()
	go func() {
		wg.Wait()
		a.fw.Close()
		if a.ackTimer != nil {
			a.ackTimer.Stop()
		}
		close(a.done)
	}()
	return a, nil
}

// Submit admits one batch and returns its future. It blocks while the
// session's unacked bytes would exceed MaxUnackedBytes, until ctx ends. A
// batch that breaks the API's limits fails at once with a definite 422.
func (a *AppendSession) Submit(ctx context.Context, in *api.AppendInput) (*AppendFuture, error) {
	if err := api.ValidateAppendInput(in); err != nil {
		return nil, err
	}
	payload, err := api.EncodeAppendProto(in)
	if err != nil {
		return nil, fmt.Errorf("append session: encode batch: %w", err)
	}
	f := &AppendFuture{
		records: len(in.Records),
		size:    int64(api.MeteredBytes(in.Records)),
		payload: payload,
		done:    make(chan struct{}),
	}
	for {
		a.mu.Lock()
		switch {
		case a.ended && a.err != nil:
			err := a.err
			a.mu.Unlock()
			return nil, &SessionError{Cause: err}
		case a.closing || a.ended:
			a.mu.Unlock()
			return nil, ErrSessionClosed
		case len(a.unacked) == 0 || a.inFlight+f.size <= a.opts.MaxUnackedBytes:
			a.unsent = append(a.unsent, f)
			a.unacked = append(a.unacked, f)
			a.inFlight += f.size
			a.mu.Unlock()
			a.nudge()
			return f, nil
		}
		space := a.space
		a.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return nil, context.Cause(ctx)
		}
	}
}

// UnackedBytes is the metered size of the batches in flight.
func (a *AppendSession) UnackedBytes() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inFlight
}

// Close stops admitting batches, waits for every admitted batch's ack,
// then half-closes the session and waits for the server to end it. It
// returns the failure that ended the session, if any. If ctx ends first,
// the session is aborted and the batches still in flight fail
// indefinitely.
func (a *AppendSession) Close(ctx context.Context) error {
	a.mu.Lock()
	a.closing = true
	a.mu.Unlock()
	a.nudge()
	select {
	case <-a.done:
	case <-ctx.Done():
		a.fail(fmt.Errorf("append session: close: %w", context.Cause(ctx)))
		<-a.done
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// Abort ends the session at once; batches in flight fail indefinitely.
func (a *AppendSession) Abort() {
	a.fail(errors.New("append session aborted"))
	<-a.done
}

// Err is the failure that ended the session, or nil.
func (a *AppendSession) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

func (a *AppendSession) nudge() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// writeLoop sends admitted batches in order, and half-closes the request
// once the session is closing and every batch is acked.
func (a *AppendSession) writeLoop(ctx context.Context) {
	for {
		select {
		case <-a.wake:
		case <-ctx.Done():
			a.fail(context.Cause(ctx))
			return
		}
		for {
			a.mu.Lock()
			if a.ended {
				a.mu.Unlock()
				return
			}
			if len(a.unsent) == 0 {
				finish := a.closing && len(a.unacked) == 0
				a.mu.Unlock()
				if finish {
					// Half-close: the server ends its response in turn.
					_ = a.pw.Close()
					return
				}
				break
			}
			f := a.unsent[0]
			a.unsent[0] = nil
			a.unsent = a.unsent[1:]
			f.sent, f.sentAt = true, time.Now()
			payload := f.payload
			f.payload = nil
			a.mu.Unlock()
			if err := a.fw.WriteMessage(payload); err != nil {
				// The transport closes the request body when the response
				// ends, often just after a terminal frame: let the reader
				// report that precise cause, if it comes soon.
				t := time.NewTimer(writeFailGrace)
				select {
				case <-a.readDone:
				case <-t.C:
				}
				t.Stop()
				a.fail(&TransportError{Op: "append session: send", Err: err, responded: true})
				return
			}
		}
	}
}

// readLoop runs the request and consumes acks until the response ends.
func (a *AppendSession) readLoop(hc *http.Client, req *http.Request) {
	resp, err := hc.Do(req)
	if err != nil {
		a.fail(&TransportError{Op: "append session", Err: err})
		return
	}
	if err := checkSessionResponse(resp); err != nil {
		a.fail(err)
		return
	}
	defer resp.Body.Close()
	a.consume(resp.Body)
}

// consume reads ack frames from the response body until it ends or the
// session fails.
func (a *AppendSession) consume(body io.Reader) {
	fr := api.NewFrameReader(body)
	defer fr.Close()
	for {
		f, err := fr.Next()
		switch {
		case errors.Is(err, io.EOF):
			a.endOfResponse()
			return
		case err != nil:
			a.fail(frameError("append session: receive", err))
			return
		case f.Terminal:
			a.fail(f.Err())
			return
		}
		ack, derr := api.DecodeAppendAckProto(f.Payload)
		if derr != nil {
			a.fail(&ProtocolError{Msg: "append session: decode ack", Err: derr})
			return
		}
		if err := a.onAck(ack); err != nil {
			a.fail(err)
			return
		}
	}
}

// onAck matches an ack with the oldest batch in flight and checks it: it
// covers exactly the batch, its end is strictly past the previous ack's,
// and it does not start before that.
func (a *AppendSession) onAck(ack api.AppendAck) error {
	a.mu.Lock()
	if len(a.unacked) == 0 || !a.unacked[0].sent {
		a.mu.Unlock()
		return &ProtocolError{Msg: fmt.Sprintf("ack [%d, %d) for no batch in flight", ack.Start.SeqNum, ack.End.SeqNum)}
	}
	f := a.unacked[0]
	if err := checkAck(ack, uint64(f.records)); err != nil {
		a.mu.Unlock()
		return err
	}
	if a.lastEnd != nil && (ack.End.SeqNum <= *a.lastEnd || ack.Start.SeqNum < *a.lastEnd) {
		prev := *a.lastEnd
		a.mu.Unlock()
		return &ProtocolError{Msg: fmt.Sprintf("ack [%d, %d) out of order after an ack ending at %d", ack.Start.SeqNum, ack.End.SeqNum, prev)}
	}
	end := ack.End.SeqNum
	a.lastEnd = &end
	a.unacked[0] = nil
	a.unacked = a.unacked[1:]
	a.inFlight -= f.size
	a.signalSpace()
	drained := a.closing && len(a.unacked) == 0
	a.mu.Unlock()
	f.ack = ack
	close(f.done)
	if drained {
		a.nudge()
	}
	return nil
}

// endOfResponse handles the server ending its response: clean if the
// session was closing and nothing is in flight.
func (a *AppendSession) endOfResponse() {
	a.mu.Lock()
	clean := a.closing && len(a.unacked) == 0
	n := len(a.unacked)
	if clean {
		a.ended = true
		a.signalSpace()
	}
	a.mu.Unlock()
	if clean {
		a.cancel(ErrSessionClosed)
		return
	}
	a.fail(&ProtocolError{Msg: fmt.Sprintf("server ended the append session with %d batches unacknowledged", n)})
}

// fail ends the session with cause and settles every future: the oldest
// batch in flight gets cause itself when the server rejected it with an
// API error; the others a *SessionError, definite unless they were sent
// and cause leaves their fate open.
func (a *AppendSession) fail(cause error) {
	a.mu.Lock()
	if a.ended {
		a.mu.Unlock()
		return
	}
	a.ended, a.err = true, cause
	pending := a.unacked
	a.unacked, a.unsent, a.inFlight = nil, nil, 0
	a.signalSpace()
	a.mu.Unlock()

	definite := IsDefinite(cause)
	var apiErr *api.Error
	headRejected := errors.As(cause, &apiErr) && len(pending) > 0 && pending[0].sent
	for i, f := range pending {
		switch {
		case i == 0 && headRejected:
			f.err = cause
		default:
			f.err = &SessionError{Cause: cause, mayBeApplied: f.sent && !definite}
		}
		f.payload = nil
		close(f.done)
	}
	_ = a.pw.CloseWithError(cause)
	a.cancel(cause)
}

// signalSpace wakes Submits blocked on backpressure. Called with mu held.
func (a *AppendSession) signalSpace() {
	close(a.space)
	a.space = make(chan struct{})
}

// checkAckTimeout fails the session when its oldest sent batch has waited
// longer than AckTimeout, and otherwise re-arms for the oldest one.
func (a *AppendSession) checkAckTimeout() {
	d := a.opts.AckTimeout
	a.mu.Lock()
	if a.ended {
		a.mu.Unlock()
		return
	}
	next := d
	if len(a.unacked) > 0 && a.unacked[0].sent {
		waited := time.Since(a.unacked[0].sentAt)
		if waited >= d {
			a.mu.Unlock()
			a.fail(&api.Error{Status: http.StatusRequestTimeout, Code: api.CodeTimeout,
				Message: fmt.Sprintf("append session: no ack for %v", waited.Round(time.Millisecond))})
			return
		}
		next = d - waited
	}
	a.ackTimer.Reset(next)
	a.mu.Unlock()
}
