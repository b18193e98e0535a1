package server

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/ratelimit"
)

// HeaderClientConn carries, on a forwarded request, the client connection
// the forwarding star took it on, so the leader's per-connection batch
// limit counts the client's connection rather than the peer's. It is
// trusted only beside HeaderForwardedBy (which ServeHTTP drops without the
// internal credential).
const HeaderClientConn = "Starlog-Client-Conn"

// ClientRate is the optional per-client request rate limit (docs/security.md,
// "Rate limits and input hygiene"): off unless PerSec > 0. S2's access
// tokens carry no rate, so it is one rate for every client, keyed by the
// access token (see clientKey) or else the client's IP.
type ClientRate struct {
	// PerSec is the requests per second each client may make on S2's API
	// (/v1/basins…, /v1/streams…, /v1/access-tokens…) and on the Durable
	// Streams face (every request but a CORS preflight); 0 turns the
	// limit off.
	PerSec float64
	// Burst is how many it may make at once (default: one second's worth).
	Burst int
}

type clientKeyCtx struct{}

// WithClientKey names the client a request is from (an access token's id)
// for the per-client rate limit; without it the client is its IP address.
func WithClientKey(ctx context.Context, key string) context.Context {
	return context.WithValue(ctx, clientKeyCtx{}, key)
}

func newClientLimits(c ClientRate) *ratelimit.Keyed {
	if c.Burst <= 0 {
		c.Burst = int(c.PerSec)
	}
	return ratelimit.NewKeyed(c.PerSec, c.Burst, 0)
}

// limitClient applies the per-client rate to an S2 API request and
// answers 429 itself (reporting true) when the client is over it. The
// peers' forwards, /health, /metrics and starlog's own endpoints are not
// limited.
func (s *Server) limitClient(w http.ResponseWriter, r *http.Request, k routeKind) bool {
	if s.clients == nil || r.Header.Get(HeaderForwardedBy) != "" {
		return false
	}
	switch k {
	case routeBasins, routeBasin, routeStreams, routeStream, routeRecords, routeTail, routeTokens, routeToken:
	default:
		return false
	}
	wait, ok := s.takeClient(r)
	if ok {
		return false
	}
	s.writeError(w, r, api.RateLimitedAfter(wait, "this client's request rate limit is exceeded; retry after %v", wait.Round(time.Millisecond)))
	return true
}

// takeClient takes one request of r's client from the per-client rate;
// when it is over, it counts the refusal and says how long to wait.
func (s *Server) takeClient(r *http.Request) (time.Duration, bool) {
	wait, ok := s.clients.Take(clientKey(r), 1, time.Now())
	if !ok {
		s.n.CountRateLimited(ratelimit.ReasonClient)
	}
	return wait, ok
}

// clientKey is who the per-client limit counts a request against: the key
// WithClientKey gave, else the access token that authenticated it, else
// (the admin token, or an open star, where every request is the admin)
// the client's IP address.
func clientKey(r *http.Request) string {
	if key, _ := r.Context().Value(clientKeyCtx{}).(string); key != "" {
		return "key:" + key
	}
	if p := auth.FromContext(r.Context()); !p.Admin && p.ID != "" {
		return "token:" + p.ID
	}
	return "ip:" + clientIP(r.RemoteAddr)
}

func clientIP(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// authClient is who a token check is counted against (tokenStore's
// lookup bound): the client's address, or no one for a peer's forward
// (it carries the internal credential; the star that took the request
// counted the check).
func (s *Server) authClient(r *http.Request, internal bool) string {
	if internal && r.Header.Get(HeaderForwardedBy) != "" {
		return ""
	}
	return "ip:" + clientIP(r.RemoteAddr)
}

// countFailedAuth counts a request refused for its credentials against
// its client's per-client rate (when one is set): it has no token to be
// counted under, so its address pays, and a client that keeps failing
// runs out of requests as one that keeps succeeding does: past the rate
// its refusal is a 429 rather than a 401.
func (s *Server) countFailedAuth(r *http.Request, err *api.Error) *api.Error {
	if s.clients == nil || err.Status != http.StatusUnauthorized || r.Header.Get(HeaderForwardedBy) != "" {
		return err
	}
	if wait, ok := s.clients.Take("ip:"+clientIP(r.RemoteAddr), 1, time.Now()); !ok {
		s.n.CountRateLimited(ratelimit.ReasonClient)
		return api.RateLimitedAfter(wait, "this client's request rate limit is exceeded (requests refused for their credentials count too); retry after %v", wait.Round(time.Millisecond))
	}
	return err
}

// withClientConn names the client connection of an append (see
// ratelimit.WithClient): the peer's word for it on a forwarded request, else
// the connection's remote address.
func withClientConn(r *http.Request) *http.Request {
	conn := r.RemoteAddr
	if r.Header.Get(HeaderForwardedBy) != "" {
		if c := r.Header.Get(HeaderClientConn); c != "" {
			conn = c
		}
	}
	return r.WithContext(ratelimit.WithClient(r.Context(), conn))
}

// setRetryAfter sets the retry headers of a 429: Retry-After in whole
// seconds (rounded up, HTTP's unit) and retry-after-ms (S2's Rust SDK
// honours it).
func setRetryAfter(h http.Header, e *api.Error) {
	if e.RetryAfter <= 0 {
		return
	}
	h.Set(api.HeaderRetryAfter, strconv.FormatInt(int64((e.RetryAfter+time.Second-1)/time.Second), 10))
	h.Set(api.HeaderRetryAfterMs, strconv.FormatInt(int64((e.RetryAfter+time.Millisecond-1)/time.Millisecond), 10))
}
