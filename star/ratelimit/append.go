package ratelimit

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/api"
)

// The append limits of the streams a star leads (docs/design.md §3): the
// star (star/node) admits every batch through Streams before sequencing
// it.

// Limits are the per-stream append limits S2 documents (its "Limits"
// page: 100 MiBps per stream, and 200 batches per second per stream per
// client connection). Past them a unary append is 429 rate_limited with a
// retry-after; an append session is throttled (its input waits for the
// limit), and only an input that would wait longer than SessionThrottle
// ends the session with a 429 terminal frame. A zero StreamBytesPerSec
// or SessionThrottle takes the default; a zero StreamBatchesPerSec leaves
// the batch limit off (it is opt-in); a negative rate turns a limit off.
type Limits struct {
	// StreamBytesPerSec bounds a stream's appended metered bytes per
	// second, all clients together (enforced by the star that leads it).
	// The burst is one second's worth, and at least one largest batch.
	StreamBytesPerSec float64
	// StreamBatchesPerSec bounds the append batches per second one client
	// connection sends to one stream (burst: one second's worth). Off
	// unless set: S2 imposes it to share a multi-tenant service, and on a
	// self-hosted star it only slows a lone producer with one append in
	// flight (S2BatchesPerSec is S2's number, for a multi-tenant star).
	StreamBatchesPerSec float64
	// SessionThrottle bounds how long one session input waits for the
	// limits.
	SessionThrottle time.Duration
}

// S2's documented per-stream append limits: the throughput limit is on
// by default; the batch-rate limit is opt-in.
const (
	DefaultStreamBytesPerSec = 100 << 20
	// S2BatchesPerSec is S2's batch-rate limit per stream per client
	// connection, the value to set on a multi-tenant star.
	S2BatchesPerSec = 200
	// DefaultSessionThrottle stays well below the S2 SDKs' 5 s wait for an
	// ack: a session input refused with 429 (definite) is better than one
	// the SDK gives up on while throttled (indefinite).
	DefaultSessionThrottle = 2 * time.Second
)

// WithDefaults fills the zero fields that take a default.
func (r Limits) WithDefaults() Limits {
	if r.StreamBytesPerSec == 0 {
		r.StreamBytesPerSec = DefaultStreamBytesPerSec
	}
	if r.SessionThrottle <= 0 {
		r.SessionThrottle = DefaultSessionThrottle
	}
	return r
}

// Reasons of starlog_rate_limited_total: a fixed set, so the label is
// bounded.
const (
	// ReasonStreamBytes: a stream's append bytes per second.
	ReasonStreamBytes = "stream_bytes"
	// ReasonStreamBatches: a connection's append batches per second to
	// one stream.
	ReasonStreamBatches = "stream_batches"
	// ReasonClient: a client's (token's) requests per second (the
	// server's optional per-client limit).
	ReasonClient = "client"
	// ReasonPoolShare: an append that found the write buffer full
	// because its own stream holds more than its fair share of it.
	ReasonPoolShare = "pool_share"
)

var reasons = [...]string{ReasonStreamBytes, ReasonStreamBatches, ReasonClient, ReasonPoolShare}

// PoolShareRetry is the retry-after of a pool_share 429: about the time
// the star takes to cut and upload what the stream already holds.
const PoolShareRetry = time.Second

// Streams enforces Limits on the streams a star leads.
type Streams struct {
	cfg     Limits
	bytes   *Keyed // by stream id
	batches *Keyed // by stream id and client connection
	limited *prometheus.CounterVec
}

// NewStreams returns the limits cfg (Limits.WithDefaults fills its zero
// fields first) and
// registers their counter, starlog_rate_limited_total, on reg.
func NewStreams(cfg Limits, reg prometheus.Registerer) (*Streams, error) {
	l := &Streams{cfg: cfg}
	if cfg.StreamBytesPerSec > 0 {
		l.bytes = NewKeyed(cfg.StreamBytesPerSec, max(int(cfg.StreamBytesPerSec), api.MaxBatchMeteredBytes), 0)
	}
	if cfg.StreamBatchesPerSec > 0 {
		l.batches = NewKeyed(cfg.StreamBatchesPerSec, int(cfg.StreamBatchesPerSec), 0)
	}
	l.limited = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Name: "rate_limited_total",
		Help: "Requests answered 429 rate_limited (or append-session inputs ended so), by reason: stream_bytes, stream_batches, client, pool_share.",
	}, []string{"reason"})
	for _, r := range reasons {
		l.limited.WithLabelValues(r)
	}
	if err := reg.Register(l.limited); err != nil {
		return nil, err
	}
	return l, nil
}

// Count counts a 429 answered outside Admit (reason is one of the
// Reason* constants).
func (l *Streams) Count(reason string) { l.limited.WithLabelValues(reason).Inc() }

type clientKey struct{}

// WithClient names the client connection a request came on (for the
// per-connection batch limit); the server sets it on append requests.
func WithClient(ctx context.Context, conn string) context.Context {
	return context.WithValue(ctx, clientKey{}, conn)
}

type unaryKey struct{}

// WithUnary marks a request as a unary append: over a limit, Admit
// refuses it at once rather than wait.
func WithUnary(ctx context.Context) context.Context {
	return context.WithValue(ctx, unaryKey{}, true)
}

// Admit applies the stream's limits to one batch before it is sequenced.
// A unary append over a limit is refused at once (429 with how long to
// wait); a session input waits for the limit, up to SessionThrottle.
func (l *Streams) Admit(ctx context.Context, streamID string, in *api.AppendInput) error {
	conn, _ := ctx.Value(clientKey{}).(string)
	unary := ctx.Value(unaryKey{}) != nil
	now := time.Now()
	type take struct {
		k      *Keyed
		key    string
		n      int
		reason string
	}
	batches := l.batches
	if conn == "" {
		batches = nil // no client connection (an in-process caller): nothing to count it by
	}
	takes := [...]take{
		{batches, streamID + "\x00" + conn, 1, ReasonStreamBatches},
		{l.bytes, streamID, int(api.MeteredBytes(in.Records)), ReasonStreamBytes},
	}
	var wait time.Duration
	var cancels []func()
	reason := ""
	for _, t := range takes {
		d, cancel := t.k.Reserve(t.key, t.n, now)
		cancels = append(cancels, cancel)
		if d > wait {
			wait, reason = d, t.reason
		}
	}
	if wait == 0 {
		return nil
	}
	giveBack := func() {
		for _, c := range cancels {
			c()
		}
	}
	if unary || wait > l.cfg.SessionThrottle {
		giveBack()
		l.limited.WithLabelValues(reason).Inc()
		return api.RateLimitedAfter(wait, "the stream's append %s limit is exceeded; retry after %v", limitName(reason), wait.Round(time.Millisecond))
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		// The session ends (drain, or the client went): as for a wait for
		// pool budget, nothing was sequenced.
		giveBack()
		return api.Unavailable("stopped waiting for the stream's append rate limit; nothing was appended; retry")
	}
}

func limitName(reason string) string {
	if reason == ReasonStreamBytes {
		return "throughput"
	}
	return "batch rate"
}
