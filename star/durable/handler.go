package durable

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable/subs"
	"github.com/starlog/starlog/star/node"
)

// Defaults of Config.
const (
	DefaultPrefix = "/ds"
	DefaultBasin  = "durable-streams"
	// DefaultStorageClass is Express: the protocol's clients (browsers,
	// token streams) wait on each append, and Express acknowledges in
	// milliseconds where Standard pools for a flush interval (50 ms).
	DefaultStorageClass = api.StorageExpress
	// DefaultLongPoll is how long a long-poll waits for data before 204.
	DefaultLongPoll = 10 * time.Second
	// DefaultSSELife is how long an SSE response lives before the server
	// closes it (the protocol asks for about 60 s, for CDN collapsing).
	DefaultSSELife = 60 * time.Second
	// MaxAppendBytes bounds a POST or PUT body: one S2 append batch
	// (1 MiB metered) less room for the protocol's headers. Larger is 413.
	MaxAppendBytes = api.MaxBatchMeteredBytes - 4<<10
	// maxReadBytes bounds one catch-up response's payload.
	maxReadBytes = api.MaxBatchMeteredBytes
	// appendAttempts bounds the retries of an append that lost its
	// match_seq_num race (another writer appended between fold and append).
	appendAttempts = 32
)

// Config configures a Handler.
type Config struct {
	Node *node.Node
	// Prefix is the path the protocol is served under (DefaultPrefix).
	Prefix string
	// Basin holds the protocol's streams (DefaultBasin); it is created
	// on first use if missing, without auto-creation of streams.
	Basin string
	// StorageClass is the default class of the basin's streams when this
	// handler creates the basin (DefaultStorageClass).
	StorageClass api.StorageClass
	// LongPoll and SSELife (defaults above).
	LongPoll, SSELife time.Duration
	// Private makes catch-up reads Cache-Control: private (set when
	// requests are authenticated: responses are per token).
	Private bool
	// Forward, when set, proxies a request for a stream another star
	// leads to that star and reports whether it did (star/server's
	// forwarder). onAppend says the request writes.
	Forward func(w http.ResponseWriter, r *http.Request, basin, name string, onAppend bool) bool
	// Session, when set, is the context of a live read (long-poll, SSE):
	// r's, cancelled by the server when the request's credential is
	// revoked or expires, with the *api.Error a new request would get as
	// its cause (star/server's credential watch). Nil: r's context.
	Session func(r *http.Request) (context.Context, context.CancelFunc)
	// AllowLoopbackWebhooks lets subscriptions name webhooks on loopback
	// (http://127.0.0.1/…, http://localhost/…): a development star's, or a
	// test's local receiver. Off, only https to public hosts is allowed.
	AllowLoopbackWebhooks bool
	// TokenStands reports whether the access token id whose credential
	// (WithCredential) created a subscription still exists and has not
	// expired: the subscription wakes only while it does (star/server's
	// token store; nil: every token stands, as on an open star).
	TokenStands func(ctx context.Context, id, credential string) (bool, error)
	// SubscriptionAudit is how often each star re-reads every subscription
	// row and audits the ones it owns (DefaultSubscriptionAudit;
	// subs/schedule.go).
	SubscriptionAudit time.Duration
	// KeyRotation is how often a new subscription key (webhook signing,
	// wake tokens) is added: DefaultKeyRotation when 0, never when
	// negative, else at least MinKeyRotation.
	KeyRotation time.Duration
	Logger      *slog.Logger
	// Clock is the handler's time (time.Now when nil): the streams'
	// expiry (Stream-TTL, Stream-Expires-At) and the subscription keys'.
	// Tests move it past an expiry, or days ahead, without sleeping.
	Clock func() time.Time
}

// Handler serves the protocol. Requests reach it authenticated: the
// principal is in the request context (auth.FromContext); each operation
// is authorized here against the stream.
type Handler struct {
	n       *node.Node
	meta    meta.Store
	prefix  string
	basin   string
	cfg     Config
	log     *slog.Logger
	states  *states
	touched sync.Map // name → time.Time of the last read or write (TTL)
	rows    sync.Map // name → cachedRow: the last row read (metastore outages)

	started time.Time // TTL windows not seen here run from this

	basinOnce sync.Mutex
	basinOK   bool

	requests    *prometheus.CounterVec
	folded      prometheus.Counter     // records read into folds
	checkpoints *prometheus.CounterVec // fold checkpoints by result
	ckptSlots   chan struct{}          // checkpoint writes in flight
	subs        *subs.Manager          // subscriptions (star/durable/subs)
}

// New returns the handler and registers its metrics with the node's registry.
func New(cfg Config) (*Handler, error) {
	if cfg.Node == nil {
		return nil, errors.New("durable: no node")
	}
	cfg.Prefix = strings.TrimSuffix(cmp.Or(cfg.Prefix, DefaultPrefix), "/")
	cfg.Basin = cmp.Or(cfg.Basin, DefaultBasin)
	if err := api.ValidateBasinName(cfg.Basin); err != nil {
		return nil, fmt.Errorf("durable: basin: %s", err.Message)
	}
	cfg.StorageClass = cmp.Or(cfg.StorageClass, DefaultStorageClass)
	if cfg.StorageClass != api.StorageExpress && cfg.StorageClass != api.StorageStandard {
		return nil, fmt.Errorf("durable: storage class %q: want standard or express", cfg.StorageClass)
	}
	cfg.LongPoll = cmp.Or(max(cfg.LongPoll, 0), DefaultLongPoll)
	cfg.SSELife = cmp.Or(max(cfg.SSELife, 0), DefaultSSELife)
	cfg.KeyRotation = cmp.Or(cfg.KeyRotation, DefaultKeyRotation)
	if cfg.KeyRotation > 0 && cfg.KeyRotation < MinKeyRotation {
		return nil, fmt.Errorf("durable: key rotation %v: want at least %v (or never)", cfg.KeyRotation, MinKeyRotation)
	}
	if cfg.Logger == nil {
		cfg.Logger = cfg.Node.Logger()
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	h := &Handler{n: cfg.Node, meta: cfg.Node.Meta(), prefix: cfg.Prefix, basin: cfg.Basin, cfg: cfg,
		log: cfg.Logger.With("face", "durable-streams"), states: newStates(), started: cfg.Clock()}
	h.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "durable", Name: "requests_total",
		Help: "Durable Streams requests by operation (create, append, read, long_poll, sse, head, delete, subscription, peer: a star's peer operation, other, refused: turned away before the handler) and status.",
	}, []string{"op", "status"})
	h.folded = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "durable", Name: "fold_records_total",
		Help: "Records read to fold streams' closure, producer and Stream-Seq state (a cold fold reads from the stream's checkpoint, or its start).",
	})
	h.checkpoints = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "durable", Name: "fold_checkpoints_total",
		Help: "Fold checkpoints by result (written, failed, skipped: writers busy; loaded, load_unfit: another stream or past the tail, load_failed).",
	}, []string{"result"})
	h.ckptSlots = make(chan struct{}, checkpointWriters)
	for _, c := range []prometheus.Collector{h.requests, h.folded, h.checkpoints} {
		if err := cfg.Node.Registry().Register(c); err != nil {
			return nil, fmt.Errorf("durable: register metrics: %w", err)
		}
	}
	sm, err := subs.New(subs.Config{
		Streams: subStreams{h}, Cluster: cfg.Node, Meta: h.meta, Basin: cfg.Basin, Prefix: cfg.Prefix,
		Registry: cfg.Node.Registry(), Logger: h.log,
		AllowLoopbackWebhooks: cfg.AllowLoopbackWebhooks, TokenStands: cfg.TokenStands,
		Audit: cfg.SubscriptionAudit, KeyRotation: cfg.KeyRotation, Clock: cfg.Clock,
	})
	if err != nil {
		return nil, err
	}
	h.subs = sm
	return h, nil
}

// Close stops the subscription driver (its sweeps and deliveries in
// flight); requests already being served finish on their own.
func (h *Handler) Close() { h.subs.Close() }

// MaxWait is the longest a read waits before it answers or ends (the
// long-poll timeout or the SSE life), for the server's write deadline.
func (h *Handler) MaxWait() time.Duration { return max(h.cfg.LongPoll, h.cfg.SSELife) }

// Prefix is the path prefix the handler serves (no trailing slash).
func (h *Handler) Prefix() string { return h.prefix }

// Matches reports whether an escaped request path is the protocol's.
func (h *Handler) Matches(escaped string) bool {
	return strings.HasPrefix(escaped, h.prefix+"/")
}

// statusWriter remembers the status for the metrics and keeps Flush
// working (SSE).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() { _ = http.NewResponseController(w.ResponseWriter).Flush() }

// Refuse answers a request the server turns away before the handler
// (401 unauthenticated, 429 over the client's rate) with the headers
// every response of the face carries, so a browser client can read it.
func (h *Handler) Refuse(w http.ResponseWriter, r *http.Request, status int, msg string) {
	browserHeaders(w.Header(), r)
	h.requests.WithLabelValues("refused", fmt.Sprint(status)).Inc()
	httpError(w, status, msg)
}

// browserHeaders are the browser security headers (protocol §12.7) and
// CORS, on every response.
func browserHeaders(hd http.Header, r *http.Request) {
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Cross-Origin-Resource-Policy", "cross-origin")
	cors(hd, r)
}

// ServeHTTP serves one protocol request.
func (h *Handler) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	w := &statusWriter{ResponseWriter: rw}
	op := "other"
	defer func() {
		h.requests.WithLabelValues(op, fmt.Sprint(cmp.Or(w.status, http.StatusOK))).Inc()
	}()
	browserHeaders(w.Header(), r)
	// The reserved __ds segment routes before streams (protocol §6): no
	// stream path holds it.
	if h.subs.Controls(r) {
		op = "subscription"
		if r.Method == http.MethodOptions {
			w.Header().Set("Allow", allowMethods)
			w.WriteHeader(http.StatusNoContent)
			return
		}
		h.subs.ServeHTTP(w, r)
		return
	}
	name, ok := h.streamName(r.URL.EscapedPath())
	if !ok {
		httpError(w, http.StatusBadRequest, "malformed stream path")
		return
	}
	if err := api.ValidateStreamName(name); err != nil {
		httpError(w, http.StatusBadRequest, err.Message)
		return
	}
	peerOp, isPeer := r.URL.Query()[peerParam]
	if isPeer && !isServerRequest(r.Context()) {
		// Raw records, for stars only: a client's credentials never reach it.
		httpError(w, http.StatusBadRequest, peerParam+" is an operation between stars")
		return
	}
	p := auth.FromContext(r.Context())
	name = p.StreamName(name)
	var ops []auth.Op
	switch r.Method {
	case http.MethodPut:
		op, ops = "create", []auth.Op{auth.CreateStream, auth.Append}
	case http.MethodPost:
		op, ops = "append", []auth.Op{auth.Append}
	case http.MethodGet:
		op, ops = "read", []auth.Op{auth.Read}
		switch r.URL.Query().Get("live") {
		case "long-poll":
			op = "long_poll"
		case "sse":
			op = "sse"
		}
	case http.MethodHead:
		op, ops = "head", []auth.Op{auth.CheckTail}
	case http.MethodDelete:
		op, ops = "delete", []auth.Op{auth.DeleteStream}
	case http.MethodOptions:
		// A CORS preflight (or a plain OPTIONS): answered for any path.
		w.Header().Set("Allow", allowMethods)
		w.WriteHeader(http.StatusNoContent)
		return
	default:
		w.Header().Set("Allow", allowMethods)
		httpError(w, http.StatusMethodNotAllowed, "method not allowed")
		return
	}
	for _, o := range ops {
		if aerr := p.Authorize(auth.Request{Op: o, Basin: h.basin, Stream: name}); aerr != nil {
			h.writeErr(w, aerr)
			return
		}
	}
	if err := h.ensureBasin(r.Context()); err != nil {
		h.writeErr(w, err)
		return
	}
	if h.cfg.Forward != nil && h.cfg.Forward(w, r, h.basin, name, r.Method != http.MethodGet) {
		return
	}
	if isPeer {
		op = "peer"
		h.servePeer(w, r, name, strings.Join(peerOp, ","))
		return
	}
	switch r.Method {
	case http.MethodPut:
		h.create(w, r, name)
		h.notifySubs(w, name)
	case http.MethodPost:
		h.appendReq(w, r, name)
		h.notifySubs(w, name)
	case http.MethodGet:
		h.read(w, r, name)
	case http.MethodHead:
		h.head(w, r, name)
	case http.MethodDelete:
		h.delete(w, r, name)
		h.notifySubs(w, name)
	}
}

// Appended tells the subscription driver about an append through the S2
// API that this star acknowledged (star/server calls it): a stream of
// the face's basin may be linked by a subscription.
func (h *Handler) Appended(basin, name string) {
	if basin == h.basin {
		h.subs.Notify(name)
	}
}

// notifySubs tells the subscription driver about a write this star
// served (a stream it leads: other stars forward theirs here).
func (h *Handler) notifySubs(w *statusWriter, name string) {
	if w.status >= 200 && w.status <= 299 {
		h.subs.Notify(name)
	}
}

// streamName is the stream a path names: everything after the prefix,
// percent-decoded (slashes kept), so /ds/a/b is the stream "a/b".
func (h *Handler) streamName(escaped string) (string, bool) {
	rest, ok := strings.CutPrefix(escaped, h.prefix+"/")
	if !ok || rest == "" {
		return "", false
	}
	name, err := url.PathUnescape(rest)
	if err != nil {
		return "", false
	}
	return name, true
}

// sourceName resolves a Stream-Forked-From path: with or without the
// prefix, relative to this server.
func (h *Handler) sourceName(v string) (string, bool) {
	if u, err := url.Parse(v); err == nil && u.Path != "" {
		v = u.EscapedPath()
	}
	if !strings.HasPrefix(v, h.prefix+"/") {
		v = h.prefix + "/" + strings.TrimPrefix(v, "/")
	}
	return h.streamName(v)
}

// ensureBasin creates the protocol's basin once (no auto-creation of
// streams: a read of a missing stream is 404, as the protocol says).
func (h *Handler) ensureBasin(ctx context.Context) error {
	h.basinOnce.Lock()
	defer h.basinOnce.Unlock()
	if h.basinOK {
		return nil
	}
	_, err := h.n.BasinConfig(ctx, h.basin)
	if isStatus(err, http.StatusNotFound) {
		class := h.cfg.StorageClass
		_, err = h.n.CreateBasin(ctx, api.CreateBasinRequest{Basin: h.basin, Config: &api.BasinConfig{
			DefaultStreamConfig: &api.StreamConfig{StorageClass: &class},
		}}, "")
		if isStatus(err, http.StatusConflict) {
			err = nil
		}
	}
	if err != nil {
		return err
	}
	h.basinOK = true
	return nil
}

func newIncarnation() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// mediaType normalizes a Content-Type for comparison: the lowercased type
// without parameters ("text/plain; charset=utf-8" matches "TEXT/PLAIN").
func mediaType(ct string) string {
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return strings.ToLower(strings.TrimSpace(strings.Split(ct, ";")[0]))
	}
	return mt
}

func isJSON(ct string) bool { return mediaType(ct) == "application/json" }

// isText reports whether SSE carries the data as text (else base64).
func isText(ct string) bool {
	mt := mediaType(ct)
	return strings.HasPrefix(mt, "text/") || mt == "application/json"
}

// readBody reads at most MaxAppendBytes; ok is false (413 written) past it.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	body, err := io.ReadAll(io.LimitReader(r.Body, MaxAppendBytes+1))
	if err != nil {
		httpError(w, http.StatusBadRequest, "reading the body: "+err.Error())
		return nil, false
	}
	if len(body) > MaxAppendBytes {
		httpError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("a body is at most %d bytes", MaxAppendBytes))
		return nil, false
	}
	return body, true
}

func httpError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Del("Content-Length")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, msg+"\n")
}

// writeErr answers a node or metastore error: the API error's status for
// client errors (404, 403, 429 with Retry-After, 503), else 500 logged.
func (h *Handler) writeErr(w http.ResponseWriter, err error) {
	if errors.Is(err, errNoRow) {
		httpError(w, http.StatusNotFound, "stream not found")
		return
	}
	// Before *api.Error: a NotLeaderError unwraps to one.
	if nl, ok := errors.AsType[*node.NotLeaderError](err); ok {
		// The lease moved while the request ran (a handoff, a takeover):
		// nothing was appended. The header tells a forwarding star to
		// look the leader up again (star/server's HeaderNotLeader).
		w.Header().Set(hNotLeader, cmp.Or(nl.Leader.Star, "-"))
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusServiceUnavailable, "the stream moved to another star; retry")
		return
	}
	if e, ok := errors.AsType[*api.Error](err); ok {
		if e.RetryAfter > 0 {
			w.Header().Set("Retry-After", fmt.Sprint(max(1, int(e.RetryAfter.Seconds()+0.999))))
		}
		status := e.Status
		if e.Code == api.CodeStreamNotFound || e.Code == api.CodeBasinNotFound {
			status = http.StatusNotFound
		}
		if status >= 500 && status != http.StatusServiceUnavailable {
			h.log.Warn("request failed", "err", err)
		}
		httpError(w, status, e.Message)
		return
	}
	if _, ok := errors.AsType[*metaError](err); ok {
		h.log.Warn("metastore unavailable", "err", err)
		w.Header().Set("Retry-After", "1")
		httpError(w, http.StatusServiceUnavailable, "the metastore is unavailable; retry")
		return
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		httpError(w, http.StatusServiceUnavailable, "request cancelled or timed out")
		return
	}
	h.log.Error("request failed", "err", err)
	httpError(w, http.StatusInternalServerError, "internal error")
}

const allowMethods = "GET, HEAD, POST, PUT, DELETE, OPTIONS"

// CORS (browsers are first-class clients of the protocol): any origin,
// the protocol's request headers, and its response headers exposed. The
// origin is echoed rather than "*" so credentialed requests work.
const (
	corsAllowHeaders  = "Authorization, Content-Type, If-None-Match, Stream-TTL, Stream-Expires-At, Stream-Retention-Seconds, Stream-Closed, Stream-Seq, Stream-Forked-From, Stream-Fork-Offset, Stream-Fork-Sub-Offset, Producer-Id, Producer-Epoch, Producer-Seq"
	corsExposeHeaders = "ETag, Location, Stream-Next-Offset, Stream-Up-To-Date, Stream-Cursor, Stream-Closed, Stream-TTL, Stream-Expires-At, Stream-Retention-Seconds, Stream-Sse-Data-Encoding, Producer-Epoch, Producer-Seq, Producer-Expected-Seq, Producer-Received-Seq, Retry-After"
)

func cors(hd http.Header, r *http.Request) {
	origin := r.Header.Get("Origin")
	if origin == "" {
		hd.Set("Access-Control-Allow-Origin", "*")
	} else {
		hd.Set("Access-Control-Allow-Origin", origin)
		hd.Set("Access-Control-Allow-Credentials", "true")
		hd.Add("Vary", "Origin")
	}
	hd.Set("Access-Control-Expose-Headers", corsExposeHeaders)
	if r.Method == http.MethodOptions {
		hd.Set("Access-Control-Allow-Methods", allowMethods)
		hd.Set("Access-Control-Allow-Headers", corsAllowHeaders)
		hd.Set("Access-Control-Max-Age", "600")
	}
}
