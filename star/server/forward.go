package server

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/api"
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
	n       *node.Node
	proxy   *httputil.ReverseProxy
	results *prometheus.CounterVec
}

type forwardKey struct{}

// forwardTarget is one forwarded request's destination.
type forwardTarget struct {
	url      *url.URL
	streamID string
}

func newForwarder(s *Server) (*forwarder, error) {
	f := &forwarder{n: s.n}
	f.results = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "http", Name: "forwarded_total",
		Help: "Requests forwarded to the leader of their stream, by result (ok, not_leader, error).",
	}, []string{"result"})
	if err := s.n.Registry().Register(f.results); err != nil {
		return nil, err
	}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{
		Protocols:           &p,
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
	me := s.n.StarID()
	f.proxy = &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1,
		ErrorLog:      slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(forwardKey{}).(forwardTarget)
			pr.Out.URL.Scheme, pr.Out.URL.Host = t.url.Scheme, t.url.Host
			pr.Out.Host = pr.In.Host
			pr.Out.Header.Set(HeaderForwardedBy, me)
		},
		ModifyResponse: func(res *http.Response) error {
			t := res.Request.Context().Value(forwardKey{}).(forwardTarget)
			if res.Header.Get(HeaderNotLeader) != "" {
				f.n.ForgetLeader(t.streamID)
				f.results.WithLabelValues("not_leader").Inc()
				return nil
			}
			f.results.WithLabelValues("ok").Inc()
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			t := r.Context().Value(forwardKey{}).(forwardTarget)
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

// serve forwards r to the leader named by nl.
func (f *forwarder) serve(w http.ResponseWriter, r *http.Request, nl *node.NotLeaderError) bool {
	u, err := leaderURL(nl.Address)
	if err != nil {
		return false
	}
	ctx := context.WithValue(r.Context(), forwardKey{}, forwardTarget{url: u, streamID: nl.StreamID})
	f.proxy.ServeHTTP(w, r.WithContext(ctx))
	return true
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
	err := s.n.Route(r.Context(), basin, name, create, onAppend)
	var nl *node.NotLeaderError
	if !errors.As(err, &nl) {
		return false
	}
	return s.fwd.serve(w, r, nl)
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
	return s.fwd.serve(w, r, nl)
}
