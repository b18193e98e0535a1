package durable

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/starlog/starlog/star/auth"
)

// A request the handler serves itself: a subscription's tail or wake
// event (subscriptions.go), a fork's look at its source (ops.go), a peer
// operation asked of the stream's leader (peer.go).

// maxInternalBody bounds the body kept of an internal request's answer
// that is not a peer operation's (an error message).
const maxInternalBody = 256 << 10

// internalResult is the response of a request the handler served itself.
type internalResult struct {
	status int // 0: nothing was written (the hop was cut off)
	header http.Header
	body   []byte
	// truncated says the body was longer than the caller's bound: only
	// its start is kept.
	truncated bool
}

// internal serves a request through the handler as the admin (a
// subscription acts with the authority its creator was checked for, at
// creation and before each wake: star/durable/subs):
// forwarding, the per-stream append lock and the protocol's rules apply
// as for any client.
func (h *Handler) internal(ctx context.Context, method, name, ct string, body []byte) internalResult {
	res := h.serveInternal(ctx, method, name, nil, ct, body, maxInternalBody)
	res.status = max(res.status, http.StatusOK)
	return res
}

// serveInternal is internal with a query and a bound on the body kept.
// The request is marked as the server's own (WithServerRequest), so it
// may run a peer operation (peer.go).
func (h *Handler) serveInternal(ctx context.Context, method, name string, query url.Values, ct string, body []byte, maxBody int) internalResult {
	segs := strings.Split(name, "/")
	for i := range segs {
		segs[i] = url.PathEscape(segs[i])
	}
	target := "http://star.internal" + h.prefix + "/" + strings.Join(segs, "/")
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(WithServerRequest(auth.WithPrincipal(ctx, auth.AdminPrincipal())), method,
		target, bytes.NewReader(body))
	if err != nil {
		return internalResult{status: http.StatusBadRequest}
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	// Forwarded to the stream's leader, it carries no access token: the
	// leader's server takes it as the server's own with this header and
	// the internal credential the forwarder adds (star/server).
	req.Header.Set(HeaderServerRequest, "1")
	rec := &recorder{header: http.Header{}, max: maxBody}
	h.ServeHTTP(rec, req)
	return internalResult{status: rec.status, header: rec.header, body: rec.buf.Bytes(), truncated: rec.over}
}

// HeaderServerRequest marks a request the handler made itself (internal).
const HeaderServerRequest = "Starlog-Durable-Server-Request"

// recorder is the ResponseWriter of internal requests.
type recorder struct {
	header http.Header
	status int
	buf    bytes.Buffer
	max    int  // bytes of the body kept
	over   bool // the body was longer
}

func (r *recorder) Header() http.Header { return r.header }
func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
}
func (r *recorder) Write(b []byte) (int, error) {
	r.WriteHeader(http.StatusOK)
	n := len(b)
	if r.buf.Len()+n > r.max {
		r.over = true
		b = b[:max(0, r.max-r.buf.Len())]
	}
	r.buf.Write(b)
	return n, nil
}
