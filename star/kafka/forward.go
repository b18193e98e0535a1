package kafka

import (
	"context"
	"crypto/tls"
	"errors"
	"net/http"
	"strings"
	"sync"

	"go.opentelemetry.io/otel/propagation"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/shared/tracing"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// Forwarding: on a cluster every star answers for every partition
// (Metadata names one broker, the address the client connected to, as
// the leader of all of them: docs/kafka.md, "Many stars"). A partition
// whose stream another star leads is read and appended there, through
// that star's S2 API, the internal path the S2 face forwards on: the
// leader's address from the lease, the cluster's internal credential,
// the forwarded-by header (so the leader never forwards it again), and
// the client's own token, which the leader checks as it checks any
// forwarded request.

// Forward is how a star reaches the leaders of partitions it does not
// lead (Config.Forward; nil: it does not, and such a partition answers
// NOT_LEADER_OR_FOLLOWER).
type Forward struct {
	// StarID is sent as the forwarded-by header's value.
	StarID string
	// Credential is the cluster's internal credential ("" on an open
	// cluster).
	Credential string
	// TLS, when set, is the peers' TLS (their addresses are https://).
	TLS *tls.Config
}

// forwardTimeout bounds one forwarded call, as RequestTimeout bounds a
// request's own work (a read's long-poll is added to it).
const forwardTimeout = RequestTimeout

// tokenKey carries the connection's access token to the data path.
type tokenKey struct{}

func withToken(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, tokenKey{}, token)
}

// peers holds one S2 client per leader address.
type peers struct {
	cfg     Forward
	basin   string
	http    *http.Client
	mu      sync.Mutex
	clients map[string]*sdk.Client
}

func newPeers(cfg Forward, basin string) *peers {
	tr := sdk.NewUnaryTransport()
	tr.TLSClientConfig = cfg.TLS
	return &peers{cfg: cfg, basin: basin, clients: map[string]*sdk.Client{},
		http: &http.Client{Transport: &peerTransport{cfg: cfg, next: tr}}}
}

// stream is the S2 handle of stream on the star at addr.
func (p *peers) stream(addr, stream string) (*sdk.Stream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c, ok := p.clients[addr]
	if !ok {
		u := p.baseURL(addr)
		var err error
		// One attempt: an append retried here could land twice, and the
		// Kafka client retries what it is told to.
		c, err = sdk.New(sdk.Config{AccountEndpoint: u, HTTPClient: p.http, RequestTimeout: forwardTimeout,
			Retry: sdk.RetryPolicy{MaxAttempts: 1}, UserAgent: "starlog-kafka-forward"})
		if err != nil {
			return nil, err
		}
		p.clients[addr] = c
	}
	return c.Basin(p.basin).Stream(stream), nil
}

// baseURL is the URL of the star at addr (a lease's address: host:port,
// or with its scheme).
func (p *peers) baseURL(addr string) string {
	switch {
	case strings.Contains(addr, "://"):
		return addr
	case p.cfg.TLS != nil:
		return "https://" + addr
	}
	return "http://" + addr
}

// peerTransport adds the forwarding headers and the client's token.
type peerTransport struct {
	cfg  Forward
	next http.RoundTripper
}

func (t *peerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set(server.HeaderForwardedBy, t.cfg.StarID)
	if t.cfg.Credential != "" {
		r.Header.Set(auth.HeaderInternal, t.cfg.Credential)
	}
	if tok, _ := r.Context().Value(tokenKey{}).(string); tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	// The request's trace goes along (no-op without a span): the other
	// star's span is a child of this one's.
	tracing.Propagator().Inject(r.Context(), propagation.HeaderCarrier(r.Header))
	return t.next.RoundTrip(r)
}

// leaderOf is the leader named by err when another star leads the stream
// and this star forwards: its address, or "".
func (s *Server) leaderOf(err error) string {
	var nl *node.NotLeaderError
	if s.peers == nil || !errors.As(err, &nl) || nl.Address == "" {
		return ""
	}
	return nl.Address
}

// checkTail is the star's CheckTail of a partition's stream, at its
// leader when another star leads it.
func (s *Server) checkTail(ctx context.Context, stream string) (api.StreamPosition, error) {
	t, err := s.star.CheckTail(ctx, s.basin, stream, nil)
	if addr := s.leaderOf(err); addr != "" {
		st, perr := s.peers.stream(addr, stream)
		if perr != nil {
			return t, err
		}
		return st.CheckTail(ctx)
	}
	return t, err
}

// read is the star's Read of a partition's stream, at its leader when
// another star leads it.
func (s *Server) read(ctx context.Context, stream string, req api.ReadRequest) (api.ReadBatch, error) {
	b, err := s.star.Read(ctx, s.basin, stream, req, nil)
	if addr := s.leaderOf(err); addr != "" {
		st, perr := s.peers.stream(addr, stream)
		if perr != nil {
			return b, err
		}
		rb, rerr := st.Read(ctx, req)
		if rerr != nil {
			return api.ReadBatch{}, rerr
		}
		return *rb, nil
	}
	return b, err
}

// remoteAppend appends one chunk of a partition's records at its leader:
// started at once, waited on with the local appends of the request.
type remoteAppend struct {
	done chan struct{}
	ack  api.AppendAck
	err  error
}

func (s *Server) appendAt(ctx context.Context, addr, stream string, in *api.AppendInput) *remoteAppend {
	ra := &remoteAppend{done: make(chan struct{})}
	st, err := s.peers.stream(addr, stream)
	if err != nil {
		ra.err = err
		close(ra.done)
		return ra
	}
	// The append runs to its own end (bounded by forwardTimeout): a
	// produce that stops waiting still leaves it one outcome.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forwardTimeout)
	go func() {
		defer cancel()
		defer close(ra.done)
		ra.ack, ra.err = st.Append(actx, in)
	}()
	return ra
}

func (ra *remoteAppend) Wait(ctx context.Context) (api.AppendAck, error) {
	select {
	case <-ra.done:
		return ra.ack, ra.err
	case <-ctx.Done():
		return api.AppendAck{}, ctx.Err()
	}
}
