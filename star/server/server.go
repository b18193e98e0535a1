// Package server is the star's HTTP front: S2's REST API v1 data plane
// (docs/api.md, docs/design.md §16) on one listener that speaks HTTP/1.1
// and cleartext HTTP/2 (h2c, for S2S sessions), plus /health and /metrics.
//
// It is a thin adapter: it routes on the escaped path, bounds and decodes
// bodies with shared/api, calls star/node, and encodes the answer (JSON,
// protobuf, SSE or S2S frames). Every client error is an *api.Error with
// the API's exact status and body; a failure that is not one is logged and
// answered 500 other, and a panic in a handler too.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/tracing"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/ratelimit"
)

// Options tune a Server. Zero values take the defaults named.
type Options struct {
	// HeartbeatMin and HeartbeatMax bound the random interval between
	// heartbeats of idle sessions (default 5 s and 15 s, as S2).
	HeartbeatMin, HeartbeatMax time.Duration
	// SessionBacklog bounds the append-session inputs submitted but not
	// yet acknowledged (default 1024); the pool budget bounds their bytes.
	SessionBacklog int
	// Logger (nil: the node's).
	Logger *slog.Logger
	// Tracer, when set, traces every request (a server span, its
	// context taken from the request's traceparent and passed on when
	// the request is forwarded); nil turns tracing off at no cost
	// (shared/tracing).
	Tracer trace.TracerProvider
	// PeerTLS is how forwarding dials peers that advertise https (nil:
	// the system's roots; see tls.go).
	PeerTLS *tls.Config
	// Auth is how requests are authenticated (star/server/auth.go). It
	// has no default: production passes the admin token and internal
	// key, tests and `star dev --open` pass auth.Open().
	Auth auth.Config
	// TokenClock is the access tokens' clock: their expiry and the age
	// of a cached check (nil: time.Now). Tests move it forward rather
	// than wait.
	TokenClock func() time.Time

	// Resource limits (docs/security.md, "Resource limits").
	//
	// MaxConns bounds the connections a listener wrapped by Listener
	// serves at once (default DefaultMaxConns); more wait in the kernel's
	// accept backlog. The rest of the connection admission (conngate.go):
	// MaxConnsPerAddr per remote address (default
	// DefaultMaxConnsPerAddr; loopback addresses are not capped unless
	// CapLoopbackConns), UnprovenIdleTimeout for an idle connection that
	// has carried no authenticated request (default
	// DefaultUnprovenIdleTimeout), and ConnReserve slots kept for clients
	// that authenticate (default MaxConns / DefaultConnReserveDiv).
	MaxConns            int
	MaxConnsPerAddr     int
	UnprovenIdleTimeout time.Duration
	ConnReserve         int
	CapLoopbackConns    bool
	// BodyReadTimeout bounds reading a unary request's body (default 10 s):
	// a body not in by then is answered 408 timeout and nothing applied.
	BodyReadTimeout time.Duration
	// RequestTimeout bounds a unary request's whole life, writing its
	// response included (default 30 s; a read's wait comes on top).
	RequestTimeout time.Duration
	// FrameTimeout bounds how long an S2S frame may take to arrive once
	// its header has (default 30 s): the session ends with 408 timeout.
	FrameTimeout time.Duration
	// SessionWriteTimeout bounds how long a session's client may take to
	// take one frame or event (default 30 s): a client that stopped
	// reading is cut off.
	SessionWriteTimeout time.Duration
	// ClientRate is the optional per-client request rate (ratelimit.go).
	ClientRate ClientRate
	// Durable, when set, serves the Durable Streams protocol under its
	// prefix (star/durable; its Node and Forward are filled in here).
	Durable *durable.Config
	// Location is the deployment's one location (S2's region), what
	// /v1/locations and basin info answer (default DefaultLocation).
	Location string
}

// Defaults of the resource limits, and the fixed ones.
const (
	DefaultMaxConns            = 1024
	DefaultBodyReadTimeout     = 10 * time.Second
	DefaultRequestTimeout      = 30 * time.Second
	DefaultFrameTimeout        = 30 * time.Second
	DefaultSessionWriteTimeout = 30 * time.Second
	// MaxHeaderBytes bounds a request's line and headers (Go's default is
	// 1 MiB; S2 requests need a few KiB).
	MaxHeaderBytes = 64 << 10
	// MaxConcurrentStreams bounds the HTTP/2 streams (sessions and
	// requests) open at once on one connection (Go's default is 250).
	MaxConcurrentStreams = 100
	// DefaultLocation is the location a deployment that names none
	// answers (`star dev`).
	DefaultLocation = "local"
	// maxWait is the longest wait a unary read may ask for (S2: 60 s).
	maxWait = 60 * time.Second
)

// Server serves the API of one node.
type Server struct {
	n        *node.Node
	log      *slog.Logger
	tracer   trace.Tracer // nil: tracing off
	failures *failureLog  // the "request failed" lines (faillog.go)
	opts     Options

	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
	sessions *prometheus.GaugeVec

	connsRefused, connsEvicted prometheus.Counter // conngate.go

	// drain is cancelled by Drain: sessions end (read sessions at once,
	// append sessions once their submitted inputs are acknowledged).
	drain     context.Context
	stopDrain context.CancelFunc

	fwd *forwarder

	keys          auth.Keys
	tokens        *tokenStore
	authDecisions *prometheus.CounterVec

	clients *ratelimit.Keyed // per-client request rate; nil when off

	ds     *durable.Handler // the Durable Streams face; nil when off
	kafka  kafkaPeer        // the Kafka face's peer endpoint (kafkapeer.go)
	codecs *codecs          // compressed unary bodies (compress.go)
	usage  *usage           // what this star served, for the metrics API (usage.go)
}

// errDraining ends sessions when the server shuts down.
var errDraining = errors.New("server: draining for shutdown")

// New returns the server of n and registers its metrics with n's registry.
func New(n *node.Node, opts Options) (*Server, error) {
	if opts.HeartbeatMin <= 0 {
		opts.HeartbeatMin = node.DefaultHeartbeatMin
	}
	if opts.HeartbeatMax < opts.HeartbeatMin {
		opts.HeartbeatMax = max(node.DefaultHeartbeatMax, opts.HeartbeatMin)
	}
	if opts.SessionBacklog <= 0 {
		opts.SessionBacklog = 1024
	}
	if opts.Logger == nil {
		opts.Logger = n.Logger()
	}
	opts.MaxConns = cmp.Or(max(opts.MaxConns, 0), DefaultMaxConns)
	opts.MaxConnsPerAddr = cmp.Or(max(opts.MaxConnsPerAddr, 0), DefaultMaxConnsPerAddr)
	opts.UnprovenIdleTimeout = cmp.Or(max(opts.UnprovenIdleTimeout, 0), DefaultUnprovenIdleTimeout)
	opts.ConnReserve = min(cmp.Or(max(opts.ConnReserve, 0), opts.MaxConns/DefaultConnReserveDiv), opts.MaxConns-1)
	opts.BodyReadTimeout = cmp.Or(max(opts.BodyReadTimeout, 0), DefaultBodyReadTimeout)
	opts.RequestTimeout = cmp.Or(max(opts.RequestTimeout, 0), DefaultRequestTimeout)
	opts.FrameTimeout = cmp.Or(max(opts.FrameTimeout, 0), DefaultFrameTimeout)
	opts.SessionWriteTimeout = cmp.Or(max(opts.SessionWriteTimeout, 0), DefaultSessionWriteTimeout)
	opts.Location = cmp.Or(opts.Location, DefaultLocation)
	keys, err := auth.Derive(opts.Auth)
	if err != nil {
		return nil, fmt.Errorf("server: %w (auth.Open() runs without authentication)", err)
	}
	s := &Server{n: n, log: opts.Logger, failures: newFailureLog(opts.Logger), opts: opts, keys: keys, tokens: newTokenStore(keys, n.Meta()),
		clients: newClientLimits(opts.ClientRate)}
	if opts.TokenClock != nil {
		s.tokens.now = opts.TokenClock
	}
	s.usage = newUsage(time.Now)
	if opts.Tracer != nil {
		s.tracer = opts.Tracer.Tracer("github.com/starlog/starlog/star/server")
	}
	if s.codecs, err = newCodecs(); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	s.drain, s.stopDrain = context.WithCancel(context.Background())
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "http", Name: "requests_total",
		Help: "HTTP requests by route, method and status.",
	}, []string{"route", "method", "status"})
	s.duration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: "starlog", Subsystem: "http", Name: "request_duration_seconds",
		Help:    "HTTP request duration by route (sessions: their whole life).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18), // 0.5 ms … 65 s
	}, []string{"route"})
	s.sessions = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "starlog", Subsystem: "http", Name: "sessions",
		Help: "Open streaming sessions by kind (sse, s2s_read, s2s_append; long_poll: S2 reads with a wait, once their start is placed; ds_live: the Durable Streams face's long polls and SSE reads).",
	}, []string{"kind"})
	for _, k := range []string{"sse", "s2s_read", "s2s_append", "long_poll", "ds_live"} {
		s.sessions.WithLabelValues(k) // exported at 0, so a dashboard finds every kind
	}
	s.authDecisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "auth", Name: "decisions_total",
		Help: "Authentication and authorization decisions by result (ok, stale, open, internal, missing, malformed, unknown, expired, denied, error).",
	}, []string{"result"})
	s.connsRefused = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "http", Name: "connections_refused_total",
		Help: "Connections closed at accept because their remote address held its --max-connections-per-address.",
	})
	s.connsEvicted = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "http", Name: "connections_evicted_total",
		Help: "Idle connections that carried no authenticated request, closed to keep slots for clients that authenticate.",
	})
	for _, c := range append([]prometheus.Collector{s.requests, s.duration, s.sessions, s.authDecisions, s.connsRefused, s.connsEvicted}, s.usage.collectors()...) {
		if err := n.Registry().Register(c); err != nil {
			return nil, fmt.Errorf("server: register metrics: %w", err)
		}
	}
	if s.fwd, err = newForwarder(s); err != nil {
		return nil, fmt.Errorf("server: register metrics: %w", err)
	}
	if opts.Durable != nil {
		cfg := *opts.Durable
		cfg.Node, cfg.Forward, cfg.Session, cfg.Logger = n, s.forwardIfLed, s.durableLive, opts.Logger
		cfg.TokenStands = s.tokenStands
		cfg.Private = !keys.IsOpen()
		if s.ds, err = durable.New(cfg); err != nil {
			return nil, fmt.Errorf("server: %w", err)
		}
	}
	return s, nil
}

// HTTPServer returns an http.Server for s on addr that speaks HTTP/1.1 and
// unencrypted HTTP/2 on the same port. It sets no read or write timeout:
// sessions live as long as their clients, so each request sets its own
// deadlines (ServeHTTP, readBody, the sessions). Serve it on a listener
// wrapped by Listener.
func (s *Server) HTTPServer(addr string) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Addr:              addr,
		Handler:           s,
		Protocols:         &p,
		ReadHeaderTimeout: ReadHeaderTimeout,
		IdleTimeout:       IdleTimeout,
		ConnState:         connState,
		ConnContext:       connContext,
		MaxHeaderBytes:    MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		HTTP2: &http.HTTP2Config{
			// Big windows let one S2S append session carry ~100 MiB/s
			// over a round trip of a few ms.
			MaxReceiveBufferPerConnection: 64 << 20,
			MaxReceiveBufferPerStream:     16 << 20,
			MaxReadFrameSize:              1 << 20,
			MaxConcurrentStreams:          MaxConcurrentStreams,
		},
	}
}

// Listener admits ln's connections (conngate.go): at most
// Options.MaxConns at once (past it, Accept waits for a connection to
// close), at most MaxConnsPerAddr from one address, idle unproven ones
// closed early. Serve it with an http.Server from HTTPServer, whose
// hooks follow each connection's state.
func (s *Server) Listener(ln net.Listener) net.Listener {
	return newConnGate(ln, s.opts, s.connsRefused, s.connsEvicted)
}

// Drain asks every session to end: read sessions end at once with a
// retryable error; append sessions stop taking inputs and end once the
// inputs they submitted are acknowledged. Call it before
// http.Server.Shutdown, which waits for handlers.
func (s *Server) Drain() {
	s.stopDrain()
	if s.ds != nil {
		s.ds.Close() // subscription sweeps and webhook deliveries
	}
}

// ServeHTTP routes a request.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if s.ds != nil && s.ds.Matches(r.URL.EscapedPath()) {
		s.serveDurable(w, r)
		return
	}
	start := time.Now()
	rw := &recorder{ResponseWriter: w, codecs: s.codecs, coding: responseCoding(r)}
	rt, perr := parsePath(r.URL.EscapedPath())
	if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Method == http.MethodDelete {
		// No route reads a body of these: drop one at once rather than
		// hold what the client sent (on HTTP/2 up to a stream's 16 MiB
		// window) for a long poll's or a session's life.
		r.Body.Close()
		r.Body, r.ContentLength = http.NoBody, 0
	}
	if d, ok := s.requestBudget(r, rt); ok {
		// The response must be out by then; a client that does not take
		// it is cut off. Cleared for the next request on the connection.
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(start.Add(d))
		defer rc.SetWriteDeadline(time.Time{})
	}
	internal := s.keys.IsInternal(r.Header.Get(auth.HeaderInternal))
	r = forwardedFrom(r, internal)
	var span trace.Span
	if s.tracer != nil {
		var ctx context.Context
		ctx, span = s.tracer.Start(tracing.Propagator().Extract(r.Context(), propagation.HeaderCarrier(r.Header)),
			methodLabel(r.Method)+" "+rt.kind.String(), trace.WithSpanKind(trace.SpanKindServer))
		r = r.WithContext(ctx)
	}
	defer func() {
		if p := recover(); p != nil {
			if p == http.ErrAbortHandler {
				panic(p)
			}
			s.log.Error("handler panic", "method", r.Method, "path", r.URL.Path, "panic", p)
			if !rw.wrote {
				s.writeError(rw, r, api.Other("internal error"))
			}
		}
		status := rw.status
		if status == 0 {
			status = http.StatusOK
		}
		s.requests.WithLabelValues(rt.kind.String(), methodLabel(r.Method), strconv.Itoa(status)).Inc()
		if status < 400 {
			s.countOp(r, rt)
		}
		s.duration.WithLabelValues(rt.kind.String()).Observe(time.Since(start).Seconds())
		if span != nil {
			s.endSpan(span, r, rt, status)
		}
	}()
	if perr != nil {
		s.writeError(rw, r, perr)
		return
	}
	p, rt, aerr := s.authorize(r, rt, internal)
	if aerr != nil {
		s.writeError(rw, r, aerr)
		return
	}
	if rt.kind != routeHealth && rt.kind != routeMetrics {
		proveConn(r) // an authenticated client's connection (conngate.go)
	}
	ctx := auth.WithPrincipal(r.Context(), p)
	if rt.name != "" {
		ctx = context.WithValue(ctx, storedStreamKey{}, rt.name)
	}
	r = r.WithContext(ctx)
	s.route(rw, r, rt)
}

// requestBudget is how long a unary request may take in all, and false
// for what has no such bound: sessions (their own rules: FrameTimeout,
// SessionWriteTimeout, heartbeats), /metrics, and the internal admin
// calls (a settle run has its own bound).
func (s *Server) requestBudget(r *http.Request, rt route) (time.Duration, bool) {
	switch rt.kind {
	case routeSettle, routeHandoff, routeMetrics, routeKafka:
		// routeKafka: a forwarded JoinGroup waits up to its rebalance
		// timeout; the Kafka face bounds each request itself.
		return 0, false
	case routeRecords:
		if isSession(r) {
			return 0, false
		}
		if r.Method == http.MethodGet {
			// A long poll waits up to wait seconds before it answers; a
			// malformed wait (the read answers 400) adds nothing.
			wait, err := strconv.ParseUint(r.URL.Query().Get("wait"), 10, 32)
			if err != nil {
				wait = 0
			}
			return s.opts.RequestTimeout + min(api.Seconds(wait), maxWait), true
		}
	}
	return s.opts.RequestTimeout, true
}

// isSession reports whether a records request opens a session: S2S
// (either way) or SSE.
func isSession(r *http.Request) bool {
	return api.ParseMediaType(r.Header.Get("Content-Type")) == api.MediaS2S ||
		r.Method == http.MethodGet && api.ParseMediaType(r.Header.Get("Accept")) == api.MediaSSE
}

func (s *Server) route(w http.ResponseWriter, r *http.Request, rt route) {
	if s.limitClient(w, r, rt.kind) {
		return
	}
	m := r.Method
	switch rt.kind {
	case routeHealth:
		if m == http.MethodGet || m == http.MethodHead {
			s.health(w, r)
			return
		}
	case routeMetrics:
		if m == http.MethodGet {
			promhttp.HandlerFor(s.n.Registry(), promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}).ServeHTTP(w, r)
			return
		}
	case routeBasins:
		switch m {
		case http.MethodGet:
			s.listBasins(w, r)
			return
		case http.MethodPost:
			s.createBasin(w, r)
			return
		}
	case routeBasin:
		if err := api.ValidateBasinName(rt.name); err != nil && allowsBasin(m) {
			s.writeError(w, r, api.InPath(err))
			return
		}
		switch m {
		case http.MethodGet:
			s.getBasin(w, r, rt.name)
			return
		case http.MethodPut:
			s.ensureBasin(w, r, rt.name)
			return
		case http.MethodPatch:
			s.reconfigureBasin(w, r, rt.name)
			return
		case http.MethodDelete:
			s.deleteBasin(w, r, rt.name)
			return
		}
	case routeDrain:
		switch m {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, s.n.DrainStatus())
			return
		case http.MethodPost:
			writeJSON(w, http.StatusOK, s.n.Drain())
			return
		}
	case routeHandoff:
		if m == http.MethodPost {
			s.handoff(w, r, rt.name)
			return
		}
	case routeSettle:
		if m == http.MethodPost {
			s.settleFor(w, r)
			return
		}
	case routeDurableKeys:
		if m == http.MethodGet {
			s.durableKeys(w, r)
			return
		}
	case routeStatus:
		if m == http.MethodGet {
			s.status(w, r)
			return
		}
	case routeDurableRotate:
		if m == http.MethodPost {
			s.rotateDurableKeys(w, r)
			return
		}
	case routeKafka:
		if m == http.MethodPost {
			s.serveKafka(w, r)
			return
		}
	case routeTokens:
		switch m {
		case http.MethodGet:
			s.listTokens(w, r)
			return
		case http.MethodPost:
			s.issueToken(w, r)
			return
		}
	case routeToken:
		if m == http.MethodDelete {
			s.revokeToken(w, r, rt.name)
			return
		}
	case routeLocations:
		if m == http.MethodGet {
			writeJSON(w, http.StatusOK, []api.LocationInfo{s.location()})
			return
		}
	case routeDefaultLocation:
		switch m {
		case http.MethodGet:
			writeJSON(w, http.StatusOK, s.location())
			return
		case http.MethodPut:
			// A deployment has one location, fixed by its configuration.
			s.writeError(w, r, api.NotImplemented("this deployment has one location, %q; its default cannot be set", s.opts.Location))
			return
		}
	case routeAccountMetrics, routeBasinMetrics, routeStreamMetrics:
		if m == http.MethodGet {
			s.metricsAPI(w, r, rt)
			return
		}
	case routeStreams, routeStream, routeRecords, routeTail:
		if !allows(rt.kind, m) {
			break
		}
		basin, err := basinHeader(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		s.routeStreams(w, r, rt, basin)
		return
	}
	// S2 has no code for a method an endpoint lacks: the status says it,
	// with Allow, and the code is S2's for what is not offered.
	w.Header().Set("Allow", rt.kind.allowed())
	s.writeError(w, r, &api.Error{Status: http.StatusMethodNotAllowed, Code: api.CodeNotImplemented,
		Message: fmt.Sprintf("method %s is not allowed on %s", truncate(m, 16), rt.kind)})
}

func allowsBasin(m string) bool {
	return m == http.MethodGet || m == http.MethodPut || m == http.MethodPatch || m == http.MethodDelete
}

// location is the deployment's one location.
func (s *Server) location() api.LocationInfo {
	return api.LocationInfo{Name: s.opts.Location}
}

func allows(k routeKind, m string) bool {
	switch k {
	case routeStreams, routeRecords:
		return m == http.MethodGet || m == http.MethodPost
	case routeStream:
		return m == http.MethodGet || m == http.MethodPut || m == http.MethodPatch || m == http.MethodDelete
	case routeTail:
		return m == http.MethodGet
	}
	return false
}

func (s *Server) routeStreams(w http.ResponseWriter, r *http.Request, rt route, basin string) {
	switch rt.kind {
	case routeStreams:
		if r.Method == http.MethodGet {
			s.listStreams(w, r, basin)
		} else {
			s.createStream(w, r, basin)
		}
	case routeStream:
		if err := api.ValidateStreamName(rt.name); err != nil {
			s.writeError(w, r, api.InPath(err))
			return
		}
		if r.Method != http.MethodGet && s.forwardIfLedMutation(w, r, basin, rt.name) {
			return
		}
		switch r.Method {
		case http.MethodGet:
			s.getStream(w, r, basin, rt.name)
		case http.MethodPut:
			s.ensureStream(w, r, basin, rt.name)
		case http.MethodPatch:
			s.reconfigureStream(w, r, basin, rt.name)
		case http.MethodDelete:
			s.deleteStream(w, r, basin, rt.name)
		}
	case routeTail:
		if err := api.ValidateStreamName(rt.name); err != nil {
			s.writeError(w, r, api.InPath(err))
			return
		}
		if s.forwardIfLed(w, r, basin, rt.name, false) {
			return
		}
		s.checkTail(w, r, basin, rt.name)
	case routeRecords:
		if err := api.ValidateStreamName(rt.name); err != nil {
			s.writeError(w, r, api.InPath(err))
			return
		}
		if s.forwardIfLed(w, r, basin, rt.name, r.Method == http.MethodPost) {
			return
		}
		if r.Method == http.MethodPost {
			s.append(w, r, basin, rt.name)
		} else {
			s.read(w, r, basin, rt.name)
		}
	}
}

// basinHeader reads the required s2-basin header of /streams routes.
func basinHeader(r *http.Request) (string, *api.Error) {
	vs := r.Header.Values(api.HeaderBasin)
	switch len(vs) {
	case 0:
		return "", api.BadHeader("missing s2-basin header")
	case 1:
	default:
		return "", api.BadHeader("s2-basin given %d times", len(vs))
	}
	if err := api.ValidateBasinName(vs[0]); err != nil {
		return "", api.BadHeader("s2-basin: %s", err.Message)
	}
	return vs[0], nil
}

// health is the readiness check (node.Healthy): 503 with the reason while
// the star cannot commit (a loglet stopped, or every storage class is
// degraded), is closed or a zombie, or the server drains. A metastore
// outage leaves it ready (the star still acknowledges and forwards); the
// answer shows it as the age of the last heartbeat. So does one degraded
// storage class (its buckets refuse this star's writes): the star still
// serves the other, and the answer names the class under "degraded". It
// touches neither the metastore nor the buckets.
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.drain.Err() != nil {
		s.writeError(w, r, api.ServerDraining("draining for shutdown"))
		return
	}
	if err := s.n.Healthy(); err != nil {
		msg := err.Error()
		if e, ok := errors.AsType[*api.Error](err); ok {
			msg = e.Message
		}
		s.writeError(w, r, api.Unavailable("not ready: %s", msg))
		return
	}
	body := map[string]any{
		"status": "ok", "star": s.n.StarID(), "incarnation": s.n.Incarnation(),
		"heartbeat_age_ms": s.n.HeartbeatAge().Milliseconds(),
	}
	if d := s.n.Degraded(); len(d) > 0 {
		body["degraded"] = d // class → reason
	}
	writeJSON(w, http.StatusOK, body)
}

// methodLabel bounds the method label to the standard methods: any other
// token a client sends is "other" (a label per invented method would let
// a client grow the registry without bound).
func methodLabel(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions, http.MethodConnect, http.MethodTrace:
		return m
	}
	return "other"
}

// recorder remembers the status for the metrics; Unwrap keeps
// http.ResponseController (Flush, EnableFullDuplex) working through it.
type recorder struct {
	http.ResponseWriter
	status int
	wrote  bool
	// codecs decode compressed request bodies and encode responses in
	// coding (the request's Accept-Encoding; "" for none): see compress.go.
	codecs *codecs
	coding string
}

func (w *recorder) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *recorder) Write(b []byte) (int, error) {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return w.ResponseWriter.Write(b)
}

func (w *recorder) Flush() { w.FlushError() }

// FlushError lets http.ResponseController report a failed flush (a client
// gone), which sessions use to stop.
func (w *recorder) FlushError() error {
	if !w.wrote {
		w.status, w.wrote = http.StatusOK, true
	}
	return http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// forwardedFrom marks a request a peer forwarded (its Forwarded-By header,
// honoured only with the internal credential: only a peer may say it
// forwards). The forwarding star believes this one leads, so the node
// resolves the lease afresh rather than trust what this star remembers (a
// handoff to it may have just released the lease).
func forwardedFrom(r *http.Request, internal bool) *http.Request {
	if !internal {
		r.Header.Del(HeaderForwardedBy)
	}
	if r.Header.Get(HeaderForwardedBy) != "" {
		r = r.WithContext(node.Forwarded(r.Context()))
	}
	return r
}
