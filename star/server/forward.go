package server

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/propagation"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/tracing"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/node"
)

// HeaderForwardedBy marks a request one star forwarded to another (its
// value is the forwarding star's id). A star never forwards such a request
// again, so a stale view of the lease cannot make requests loop: it
// answers 503 unavailable (retryable) and sets HeaderNotLeader.
const HeaderForwardedBy = "Starlog-Forwarded-By"

// HeaderNotLeader on a response says the answering star does not lead the
// stream: the forwarding star forgets what it believed about the leader.
const HeaderNotLeader = "Starlog-Not-Leader"

// forwarder proxies data requests for streams led elsewhere to their
// leader over cleartext HTTP/2 (one multiplexed connection per peer),
// streaming bodies both ways and flushing every response write, so append
// and read sessions (S2S, SSE) work through it.
type forwarder struct {
	s     *Server
	n     *node.Node
	proxy *httputil.ReverseProxy
	// peers calls other stars' own endpoints (star status) over the
	// forwarding transport, with the internal credential.
	peers   *http.Client
	results *prometheus.CounterVec
}

// A target that answers "not the leader" refused the request before
// acting on it (it checks leadership before it sequences anything), so
// the forwarder may send it again: during a handoff the old leader
// refuses until the new one holds the lease. The retries are bounded in
// count and time; the backoff doubles from forwardRetryBackoff.
const (
	maxForwardAttempts  = 10
	forwardRetryFor     = 2 * time.Second
	forwardRetryBackoff = 10 * time.Millisecond
	maxForwardBackoff   = 200 * time.Millisecond
	// maxReplayBytes bounds the body a forward keeps for a retry: the
	// largest unary request body.
	maxReplayBytes = api.MaxAppendJSONBodyBytes
)

// errRetryForward is how ModifyResponse tells serve to send again.
var errRetryForward = errors.New("server: forward target is not the leader; resolving again")

type forwardKey struct{}

// forwardTarget is one forwarded attempt's destination and outcome.
type forwardTarget struct {
	url      *url.URL
	streamID string
	body     *replayBody
	// mayRetry says serve would send again after a not-leader refusal;
	// retried says ModifyResponse asked it to.
	mayRetry, retried bool
}

func targetOf(ctx context.Context) *forwardTarget { return ctx.Value(forwardKey{}).(*forwardTarget) }

func newForwarder(s *Server) (*forwarder, error) {
	f := &forwarder{s: s, n: s.n}
	f.results = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "http", Name: "forwarded_total",
		Help: "Requests forwarded to the leader of their stream, by result (ok, not_leader, retried, error).",
	}, []string{"result"})
	if err := s.n.Registry().Register(f.results); err != nil {
		return nil, err
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true) // http:// peers: h2c with prior knowledge
	p.SetHTTP2(true)            // https:// peers (TLS): h2 by ALPN
	tr := &http.Transport{
		Protocols:           &p,
		TLSClientConfig:     s.opts.PeerTLS,
		DialContext:         (&net.Dialer{Timeout: 3 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		IdleConnTimeout:     2 * time.Minute,
		MaxIdleConnsPerHost: 4,
		HTTP2: &http.HTTP2Config{
			MaxReceiveBufferPerConnection: 64 << 20,
			MaxReceiveBufferPerStream:     16 << 20,
			MaxReadFrameSize:              1 << 20,
			// A frozen or partitioned leader is noticed within ~4 s of
			// silence, so forwards fail (and are re-resolved) well inside
			// the dead-after bound instead of hanging.
			SendPingTimeout: 2 * time.Second,
			PingTimeout:     2 * time.Second,
		},
	}
	f.peers = &http.Client{Transport: tr}
	me := s.n.StarID()
	f.proxy = &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := targetOf(pr.In.Context())
			pr.Out.URL.Scheme, pr.Out.URL.Host = t.url.Scheme, t.url.Host
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(HeaderForwardedBy, me)
			pr.Out.Header.Set(HeaderClientConn, pr.In.RemoteAddr) // for the leader's rate limits
			// The peer re-checks the client's own Authorization (passed on
			// as sent); the internal credential proves this is a star.
			if c := s.keys.Internal(); c != "" {
				pr.Out.Header.Set(auth.HeaderInternal, c)
			}
			if s.tracer != nil { // the leader's span is a child of this star's
				tracing.Propagator().Inject(pr.In.Context(), propagation.HeaderCarrier(pr.Out.Header))
			}
		},
		ModifyResponse: func(res *http.Response) error {
			t := targetOf(res.Request.Context())
			if res.Header.Get(HeaderNotLeader) != "" {
				f.n.ForgetLeader(t.streamID)
				if t.mayRetry && res.StatusCode == http.StatusServiceUnavailable && t.body.replayable() {
					t.retried = true
					return errRetryForward
				}
				f.results.WithLabelValues("not_leader").Inc()
				return nil
			}
			f.results.WithLabelValues("ok").Inc()
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := targetOf(r.Context())
			if errors.Is(err, errRetryForward) {
				return // serve sends it again; nothing was written
			}
			f.n.ForgetLeader(t.streamID)
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the client went away
			}
			f.results.WithLabelValues("error").Inc()
			s.log.Warn("forward to the stream's leader failed", "leader", t.url.Host, "path", r.URL.Path, "err", err)
			s.writeError(w, r, api.Unavailable("the stream's leader could not be reached; retry"))
		},
	}
	return f, nil
}

// serve forwards r to the leader named by nl and reports whether it
// answered r. With reroute set (a data request), a target that refuses
// because it is not the leader is not the end: the lease is resolved
// again (reroute, the leadership check) and the request sent to the
// leader named now, within maxForwardAttempts and forwardRetryFor. A
// reroute that finds this star the leader returns false with r.Body
// replayed, for the caller to serve here. Only a body read to its end is
// sent again (unary requests); a session's refusal goes to the client.
func (f *forwarder) serve(w http.ResponseWriter, r *http.Request, nl *node.NotLeaderError, reroute func(context.Context) error) bool {
	body := newReplayBody(r)
	deadline := time.Now().Add(forwardRetryFor)
	backoff := forwardRetryBackoff
	for attempt := 1; ; attempt++ {
		u, err := leaderURL(nl.Address)
		if err != nil {
			if attempt == 1 {
				return false // the handler answers it
			}
			f.s.writeError(w, r, nl)
			return true
		}
		t := &forwardTarget{url: u, streamID: nl.StreamID, body: body,
			mayRetry: reroute != nil && attempt < maxForwardAttempts && time.Now().Before(deadline)}
		out := r.WithContext(context.WithValue(r.Context(), forwardKey{}, t))
		out.Body = body
		f.proxy.ServeHTTP(w, out)
		if !t.retried {
			body.stop()
			return true
		}
		f.results.WithLabelValues("retried").Inc()
		body = body.replay()
		if !sleepCtx(r.Context(), backoff) {
			return true // the client went away
		}
		backoff = min(2*backoff, maxForwardBackoff)
		err = reroute(r.Context())
		switch {
		case err == nil:
			r.Body = body
			return false
		case errors.As(err, &nl):
		default:
			f.s.writeError(w, r, err)
			return true
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// replayBody records what a forward reads of the request body, so a
// request the target refused can be sent again. It is replayable only
// once read to its end (or empty): a streaming body could still be read by
// the refused attempt's transport, and bytes it took would be lost.
type replayBody struct {
	mu       sync.Mutex
	src      io.Reader
	buf      []byte
	eof      bool
	over     bool // more than maxReplayBytes was read
	stopped  bool // the answer was relayed: nothing more to keep
	detached bool // a later attempt replays it: this one reads no more
}

func newReplayBody(r *http.Request) *replayBody {
	if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
		return &replayBody{src: bytes.NewReader(nil), eof: true}
	}
	return &replayBody{src: r.Body}
}

func (b *replayBody) Read(p []byte) (int, error) {
	b.mu.Lock()
	detached := b.detached
	b.mu.Unlock()
	if detached {
		return 0, errors.New("server: request body replayed to another forward")
	}
	n, err := b.src.Read(p)
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.stopped || b.over:
	case len(b.buf)+n > maxReplayBytes:
		b.over, b.buf = true, nil
	default:
		b.buf = append(b.buf, p[:n]...)
	}
	if err == io.EOF {
		b.eof = true
	}
	return n, err
}

// Close does not close the request body: the server does, and a retry
// may still need it.
func (b *replayBody) Close() error { return nil }

func (b *replayBody) replayable() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.eof && !b.over && !b.stopped && !b.detached
}

// replay detaches b and returns a body that reads what b read (all of
// it: b is replayable).
func (b *replayBody) replay() *replayBody {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.detached = true
	return &replayBody{src: bytes.NewReader(b.buf)}
}

// stop drops what b kept: the answer was relayed.
func (b *replayBody) stop() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.stopped, b.buf = true, nil
}

// leaderURL turns an advertised address (host:port or a URL) into the
// base URL to forward to.
func leaderURL(addr string) (*url.URL, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil || u.Host == "" {
		return nil, errors.New("bad leader address")
	}
	return u, nil
}

// forwardIfLed forwards a data request (append, read, check-tail, and
// their sessions) to the stream's leader when another star leads it, and
// reports whether it did. A forwarded request is never forwarded again.
// Any other outcome of the leadership check is left to the handler, which
// repeats it in its own order of validation.
func (s *Server) forwardIfLed(w http.ResponseWriter, r *http.Request, basin, name string, onAppend bool) bool {
	if r.Header.Get(HeaderForwardedBy) != "" {
		return false
	}
	create, cerr := streamConfigHeader(r)
	if cerr != nil {
		return false
	}
	route := func(ctx context.Context) error { return s.n.Route(ctx, basin, name, create, onAppend) }
	var nl *node.NotLeaderError
	if !errors.As(route(r.Context()), &nl) {
		return false
	}
	return s.fwd.serve(w, r, nl, route)
}

// forwardIfLedMutation forwards a change of a stream (PUT, PATCH, DELETE
// of /streams/{s}) to the live peer that leads it, so the leader applies
// it to the stream it holds open; it reports whether it did.
func (s *Server) forwardIfLedMutation(w http.ResponseWriter, r *http.Request, basin, name string) bool {
	if r.Header.Get(HeaderForwardedBy) != "" {
		return false
	}
	nl := s.n.LeaderOf(r.Context(), basin, name)
	if nl == nil {
		return false
	}
	return s.fwd.serve(w, r, nl, nil)
}
