package peer

import (
	"bytes"
	"context"
	"net/http"
	"net/url"
	"strings"

	"github.com/starlog/starlog/star/auth"
)

// A request the handler serves itself: a subscription's tail or wake
// event, a fork's look at its source, a peer operation asked of the
// stream's leader (Client).

// Answer is the response of a request the handler served itself.
type Answer struct {
	Status int // 0: nothing was written (the hop was cut off)
	Header http.Header
	Body   []byte
	// Truncated says the body was longer than the caller's bound: only
	// its start is kept.
	Truncated bool
}

// Self serves requests through the handler itself, as the admin (a
// subscription acts with the authority its creator was checked for, at
// creation and before each wake: star/durable/subs): forwarding, the
// per-stream append lock and the protocol's rules apply as for any
// client.
type Self struct {
	Handler http.Handler
	Prefix  string // the path the handler serves, without a trailing slash
}

// Do serves one request on the stream name, keeping at most maxBody
// bytes of its answer's body. The request is marked as the server's own
// (WithServerRequest), so it may run a peer operation.
func (s Self) Do(ctx context.Context, method, name string, query url.Values, ct string, body []byte, maxBody int) Answer {
	segs := strings.Split(name, "/")
	for i := range segs {
		segs[i] = url.PathEscape(segs[i])
	}
	target := "http://star.internal" + s.Prefix + "/" + strings.Join(segs, "/")
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(WithServerRequest(auth.WithPrincipal(ctx, auth.AdminPrincipal())), method,
		target, bytes.NewReader(body))
	if err != nil {
		return Answer{Status: http.StatusBadRequest}
	}
	if ct != "" {
		req.Header.Set("Content-Type", ct)
	}
	// Forwarded to the stream's leader, it carries no access token: the
	// leader's server takes it as the server's own with this header and
	// the internal credential the forwarder adds (star/server).
	req.Header.Set(HeaderServerRequest, "1")
	rec := &recorder{header: http.Header{}, max: maxBody}
	s.Handler.ServeHTTP(rec, req)
	return Answer{Status: rec.status, Header: rec.header, Body: rec.buf.Bytes(), Truncated: rec.over}
}

// HeaderServerRequest marks a request the handler made itself (Self).
const HeaderServerRequest = "Starlog-Durable-Server-Request"

// recorder is the ResponseWriter of Self's requests.
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
