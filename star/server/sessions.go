package server

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/node"
)

// sessionErr turns the error that ended a session into what the client is
// told: the session's own *api.Error, 503 server_draining when the server
// is draining (S2's code: the SDKs resume at once and know nothing was
// lost), the token's error when its credential watch ended the session
// (credwatch.go: 401 authn for a revoked or expired token), or nil when
// the client went away (nobody to tell).
//
// Draining is judged on the server's own drain, not only the session's
// context: on shutdown the star releases its leases right after Drain, so
// a session may see its stream's lease go (503 unavailable) before the
// context's cancellation reaches it; that too is the drain.
func (s *Server) sessionErr(ctx context.Context, err error) *api.Error {
	if s.drain.Err() != nil || errors.Is(context.Cause(ctx), errDraining) {
		return errServerDraining()
	}
	if e := credentialErr(ctx); e != nil {
		return e
	}
	if ctx.Err() != nil {
		return nil
	}
	var e *api.Error
	if errors.As(err, &e) {
		return e
	}
	return api.Other("session failed")
}

// errServerDraining is what a draining star answers: everything it took
// was acknowledged first, so nothing unacknowledged was applied.
// countRead counts a read batch a session delivers, for the usage metrics.
func (s *Server) countRead(basin string, b *api.ReadBatch) {
	if len(b.Records) > 0 {
		s.usage.record(basin, useReadOps, 1)
		s.usage.record(basin, useReadBytes, float64(api.MeteredBytes(b.Records)))
	}
}

// refuseDraining answers a new session on a draining star 503
// server_draining: the SDK reconnects, and should reach another star.
func (s *Server) refuseDraining(w http.ResponseWriter, r *http.Request) bool {
	if s.drain.Err() == nil {
		return false
	}
	s.writeError(w, r, errServerDraining())
	return true
}

func errServerDraining() *api.Error {
	return api.ServerDraining("the star is shutting down; reconnect")
}

func (s *Server) openSessionRead(w http.ResponseWriter, r *http.Request, basin, name string, create *api.StreamConfig, sse bool) (*node.Cursor, api.LastEventID, bool) {
	q, err := query(r)
	if err != nil {
		s.writeError(w, r, err)
		return nil, api.LastEventID{}, false
	}
	req, err := api.ParseReadQuery(q, api.ReadSession)
	if err != nil {
		s.writeError(w, r, err)
		return nil, api.LastEventID{}, false
	}
	var id api.LastEventID
	if sse {
		if v := r.Header.Get(api.HeaderLastEventID); v != "" {
			if id, err = api.ParseLastEventID(v); err != nil {
				s.writeError(w, r, err)
				return nil, id, false
			}
			req.ApplyLastEventID(id)
		}
	}
	c, oerr := s.n.OpenRead(r.Context(), basin, name, req, node.ReadOptions{
		Heartbeats: true, HeartbeatMin: s.opts.HeartbeatMin, HeartbeatMax: s.opts.HeartbeatMax, Create: create,
	})
	if oerr != nil {
		s.writeError(w, r, oerr)
		return nil, id, false
	}
	return c, id, true
}

// sseSession serves a read session as server-sent events: batch events
// with ids, pings with the tail on entering live follow and while idle, an
// error event on failure, and data: [DONE] when a limit, until or the wait
// ends the read.
func (s *Server) sseSession(w http.ResponseWriter, r *http.Request, basin, name string, create *api.StreamConfig) {
	if s.refuseDraining(w, r) {
		return
	}
	f, ferr := format(r)
	if ferr != nil {
		s.writeError(w, r, ferr)
		return
	}
	sp, serr := s.streamSpec(r, basin, name)
	if serr != nil {
		s.writeError(w, r, serr)
		return
	}
	c, id, ok := s.openSessionRead(w, r, basin, name, create, true)
	if !ok {
		return
	}
	defer c.Close()
	s.sessions.WithLabelValues("sse").Inc()
	defer s.sessions.WithLabelValues("sse").Dec()
	ctx, cancel := s.sessionContext(r)
	defer cancel()

	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{})
	h := w.Header()
	h.Set("Content-Type", api.ContentTypeSSE)
	h.Set("Cache-Control", "no-cache, no-transform")
	h.Set("X-Accel-Buffering", "no")
	s.writeBy(rc)
	w.WriteHeader(http.StatusOK)
	if s.flush(rc) != nil {
		return
	}
	sw := api.NewSSEWriter(w, f)
	for {
		ev, err := c.Next(ctx)
		s.writeBy(rc)
		if err != nil {
			if e := s.sessionErr(ctx, err); e != nil {
				if sw.Error(e) == nil {
					s.flush(rc)
				}
			}
			return
		}
		switch ev.Kind {
		case node.EventBatch:
			s.countRead(basin, &ev.Batch)
			// The resume id counts stored bytes, as the node's read limits do.
			id = id.Next(&ev.Batch)
			if e := sp.decrypt(&ev.Batch); e != nil {
				if sw.Error(e) == nil {
					s.flush(rc)
				}
				return
			}
			err = sw.Batch(&ev.Batch, id)
		case node.EventHeartbeat:
			err = sw.Ping(api.Ping{Timestamp: uint64(time.Now().UnixMilli()), Tail: ev.Tail})
		case node.EventEnd:
			if sw.Done() == nil {
				s.flush(rc)
			}
			return
		}
		if err != nil || s.flush(rc) != nil {
			return // the client went away
		}
	}
}

// readSession serves an S2S read session: ReadBatch frames, a heartbeat
// (no records, the tail) on entering live follow and while idle, and a
// terminal frame on failure; the response ends when the read does.
func (s *Server) readSession(w http.ResponseWriter, r *http.Request, basin, name string, create *api.StreamConfig) {
	if s.refuseDraining(w, r) {
		return
	}
	sp, serr := s.streamSpec(r, basin, name)
	if serr != nil {
		s.writeError(w, r, serr)
		return
	}
	c, _, ok := s.openSessionRead(w, r, basin, name, create, false)
	if !ok {
		return
	}
	defer c.Close()
	s.sessions.WithLabelValues("s2s_read").Inc()
	defer s.sessions.WithLabelValues("s2s_read").Dec()
	ctx, cancel := s.sessionContext(r)
	defer cancel()

	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", api.ContentTypeS2S)
	s.writeBy(rc)
	w.WriteHeader(http.StatusOK)
	if s.flush(rc) != nil {
		return
	}
	fw := api.NewFrameWriter(w, api.NegotiateCompression(r.Header.Values("Accept-Encoding")...))
	defer fw.Close()
	var buf []byte
	for {
		ev, err := c.Next(ctx)
		s.writeBy(rc)
		if err != nil {
			if e := s.sessionErr(ctx, err); e != nil {
				if fw.WriteTerminal(e) == nil {
					s.flush(rc)
				}
			}
			return
		}
		switch ev.Kind {
		case node.EventBatch:
			s.countRead(basin, &ev.Batch)
			if e := sp.decrypt(&ev.Batch); e != nil {
				if fw.WriteTerminal(e) == nil {
					s.flush(rc)
				}
				return
			}
			buf = api.AppendReadBatchProto(buf[:0], &ev.Batch)
		case node.EventHeartbeat:
			tail := ev.Tail
			buf = api.AppendReadBatchProto(buf[:0], &api.ReadBatch{Tail: &tail})
		case node.EventEnd:
			return
		}
		if fw.WriteMessage(buf) != nil || s.flush(rc) != nil {
			return
		}
		if cap(buf) > 4<<20 {
			buf = nil
		}
	}
}

// appendItem is one input of an append session on its way to an ack: a
// submitted batch, or the failure that ends the session.
type appendItem struct {
	p     *node.PendingAppend
	err   *api.Error
	bytes uint64 // metered, for the usage metrics
}

// appendSession serves an S2S append session: AppendInput frames in, one
// AppendAck frame per input out, in order. Inputs are pipelined: a reader
// goroutine submits each as it arrives (sequencing it at once), the handler
// waits for the acks in order. The first failure, wherever it happens, is
// sent as a terminal frame after the acks of everything before it, and no
// later input is submitted. When the client half-closes, the response ends
// after the last ack.
func (s *Server) appendSession(w http.ResponseWriter, r *http.Request, basin, name string, create *api.StreamConfig) {
	if s.refuseDraining(w, r) {
		return
	}
	sp, err := s.streamSpec(r, basin, name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	a, err := s.n.OpenAppend(r.Context(), basin, name, create)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// Runs after the reader goroutine ends (deferred before its wait).
	defer a.Close()
	s.sessions.WithLabelValues("s2s_append").Inc()
	defer s.sessions.WithLabelValues("s2s_append").Dec()

	rc := http.NewResponseController(w)
	defer rc.SetWriteDeadline(time.Time{})
	// HTTP/2 is full duplex already; HTTP/1.1 must be told (an error means
	// HTTP/2 or a server that cannot, and then the client uses HTTP/2).
	_ = rc.EnableFullDuplex()
	w.Header().Set("Content-Type", api.ContentTypeS2S)
	s.writeBy(rc)
	w.WriteHeader(http.StatusOK)
	if s.flush(rc) != nil {
		return
	}

	// submitCtx bounds the reader's waits for pool budget; cancelled when
	// the handler ends or the server drains, so a blocked Submit returns.
	submitCtx, cancelSubmit := context.WithCancel(r.Context())
	defer cancelSubmit()
	g := &gate{items: make(chan appendItem, s.opts.SessionBacklog), closed: make(chan struct{}), abandon: make(chan struct{})}
	readerDone := make(chan struct{})
	watch := newFrameWatch(rc)
	go func() {
		defer close(readerDone)
		s.readInputs(submitCtx, r.Body, a, g, watch, func(in *api.AppendInput) *api.Error {
			if err := checkCommands(r.Context(), basin, name, in); err != nil {
				return err
			}
			if err := sp.refuseProducer(in); err != nil {
				return err
			}
			sp.encrypt(in)
			return nil
		})
	}()
	// Unblock a reader stuck in Submit or in a body read, whatever ends
	// the handler.
	defer func() {
		cancelSubmit()
		close(g.abandon)
		watch.end()
		r.Body.Close()
		<-readerDone
	}()

	fw := api.NewFrameWriter(w, api.NegotiateCompression(r.Header.Values("Accept-Encoding")...))
	defer fw.Close()
	terminal := func(e *api.Error) {
		s.writeBy(rc)
		if fw.WriteTerminal(e) == nil {
			s.flush(rc)
		}
	}
	// The session ends on Drain, or when its token is revoked or expires
	// (sessionContext). Either way it stops taking inputs and what the
	// reader already submitted still gets its ack, then the terminal frame
	// says why: nothing is applied after it.
	sctx, endSession := s.sessionContext(r)
	defer endSession()
	ending := sctx.Done()
	var endErr, credErr *api.Error // why it stops taking inputs; credErr: its token
	closed := g.closed
	final := false // the gate is closed: the queued items are the last
	for {
		var it appendItem
		ok := true
		if final {
			select {
			case it, ok = <-g.items:
			default:
				terminal(endErr)
				return
			}
		} else {
			select {
			case it, ok = <-g.items:
			case <-ending:
				ending = nil
				switch credErr = credentialErr(sctx); {
				case credErr != nil && s.drain.Err() == nil:
					endErr = credErr
				case s.drain.Err() != nil || errors.Is(context.Cause(sctx), errDraining):
					// The acks are flagged reconnect-advised (S2S), so the
					// SDK half-closes once it has every ack and resubmits
					// the rest on a new session.
					credErr, endErr = nil, errServerDraining()
					fw.SetReconnectAdvised(true)
				default:
					// The request's own end (the client went away, or on
					// HTTP/1.1 a frame's deadline): the reader and the
					// waits see it, and say it.
					continue
				}
				cancelSubmit()
				go g.close()
				continue
			case <-closed:
				final = true
				continue
			}
		}
		if !ok {
			return // the client half-closed and every ack went out
		}
		if it.err != nil {
			if credErr != nil {
				it.err = credErr // an input cut off by the end was not applied
			}
			terminal(it.err)
			return
		}
		ack, err := it.p.Wait(r.Context())
		if err != nil {
			if r.Context().Err() != nil {
				return
			}
			var e *api.Error
			if !errors.As(err, &e) {
				e = api.Other("append failed")
			}
			terminal(e)
			return
		}
		s.appended(basin, name, it.bytes)
		s.writeBy(rc)
		if fw.WriteMessage(api.EncodeAppendAckProto(ack)) != nil || s.flush(rc) != nil {
			return
		}
	}
}

// readInputs reads AppendInput frames and submits each, pushing the
// pending batch (or the failure that ends the session) through the gate.
// It stops at the first failure, at the end of the body, or when the gate
// closes. A frame must complete within FrameTimeout of its header: an
// idle session costs nothing, a stalled frame holds a buffer.
func (s *Server) readInputs(ctx context.Context, body io.Reader, a *node.Appender, g *gate, watch *frameWatch, check func(*api.AppendInput) *api.Error) {
	fr := api.NewFrameReader(body)
	defer fr.Close()
	defer g.finish()
	fr.Started = func() { watch.t.Reset(s.opts.FrameTimeout) }
	for {
		f, err := fr.Next()
		watch.t.Stop()
		var item appendItem
		switch {
		case errors.Is(err, io.EOF):
			return // half-close: the writer sends the remaining acks
		case errors.Is(err, io.ErrUnexpectedEOF):
			item.err = api.BadFrame("the request ended inside a frame")
		case err != nil && watch.expired():
			// Before the ctx check: on HTTP/1.1 the deadline's read error
			// also cancels the request context.
			item.err = api.Timeout("an S2S frame did not complete within %v of its header", s.opts.FrameTimeout)
		case err != nil:
			var e *api.Error
			if !errors.As(err, &e) {
				if ctx.Err() != nil {
					return // the handler ended and closed the body
				}
				e = api.BadFrame("reading frames: %v", err)
			}
			item.err = e
		case f.Terminal:
			item.err = api.BadFrame("a client may not send a terminal frame")
		}
		if item.err == nil {
			in, derr := api.DecodeAppendProto(f.Payload)
			if derr != nil {
				item.err = derr
			} else if cerr := check(in); cerr != nil {
				item.err = cerr // a trim or fence the token may not do
			}
			if !g.push(func() appendItem {
				if item.err != nil {
					return item
				}
				p, err := a.Submit(ctx, in)
				if err != nil {
					var e *api.Error
					if !errors.As(err, &e) {
						e = api.Other("append failed")
					}
					return appendItem{err: e}
				}
				return appendItem{p: p, bytes: api.MeteredBytes(in.Records)}
			}) {
				return
			}
			continue
		}
		g.push(func() appendItem { return item })
		return
	}
}

// frameWatch is an append session's frame-completion deadline: a timer
// the reader starts at each frame's header and stops when the frame is
// in (no I/O per frame). When it fires, or when the handler ends, the
// body's read deadline is set in the past to unblock the reader.
type frameWatch struct {
	t  *time.Timer
	rc *http.ResponseController

	mu           sync.Mutex
	fired, ended bool
}

func newFrameWatch(rc *http.ResponseController) *frameWatch {
	w := &frameWatch{rc: rc}
	w.t = time.AfterFunc(time.Hour, w.fire)
	w.t.Stop()
	return w
}

func (w *frameWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.ended {
		w.fired = true
		_ = w.rc.SetReadDeadline(time.Now())
	}
}

// expired reports whether a frame was late.
func (w *frameWatch) expired() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.fired
}

// end unblocks the reader for good, when the handler ends.
func (w *frameWatch) end() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.ended = true
	w.t.Stop()
	_ = w.rc.SetReadDeadline(time.Now())
}

// writeBy gives a session's client SessionWriteTimeout to take the next
// frame or event: one that stopped reading is cut off. flush sends it
// and clears the deadline: an idle session has none (on HTTP/2 a
// deadline fires between writes too).
func (s *Server) writeBy(rc *http.ResponseController) {
	_ = rc.SetWriteDeadline(time.Now().Add(s.opts.SessionWriteTimeout))
}

func (s *Server) flush(rc *http.ResponseController) error {
	err := rc.Flush()
	_ = rc.SetWriteDeadline(time.Time{})
	return err
}

// gate hands a session's items from the reader to the writer and lets the
// writer close it: once closed, no item is submitted any more, so the
// items already in the channel are the last ones to acknowledge.
type gate struct {
	mu       sync.Mutex
	items    chan appendItem
	shut     bool
	finished bool
	closed   chan struct{} // closed by close
	// abandon is closed when the handler ends: nobody takes items any more,
	// so a reader blocked on a full channel gives up.
	abandon chan struct{}
}

// push runs mk (a Submit) and queues its item, unless the gate is
// closed; it reports whether the reader should go on. An item with an
// error ends the reader.
func (g *gate) push(mk func() appendItem) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.shut {
		return false
	}
	it := mk()
	select {
	case g.items <- it:
	default:
		// Full: wait for the writer, unless it is gone. (Checked only when
		// full, so a submitted item is never dropped while the writer
		// still takes items.)
		select {
		case g.items <- it:
		case <-g.abandon:
			return false
		}
	}
	return it.err == nil
}

// close stops further pushes and signals the writer.
func (g *gate) close() {
	g.mu.Lock()
	g.shut = true
	g.mu.Unlock()
	close(g.closed)
}

// finish marks the reader done: at the end of the body the channel closes,
// so the writer ends after the last ack.
func (g *gate) finish() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.finished && !g.shut {
		g.finished = true
		close(g.items)
	}
}
