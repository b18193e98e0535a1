package s3_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
)

// faultMode is what the proxy does to one matching request.
type faultMode int

const (
	pass            faultMode = iota
	forwardThen409            // the write lands, the reply is a 409 ConditionalRequestConflict
	conflict409               // a 409 ConditionalRequestConflict, nothing forwarded
	forwardThenHang           // the write lands, the reply never comes
	forwardThenDrop           // the write lands, the connection is closed
	forwardThen500            // the write lands, the reply is a 500
	refuse500                 // a 500, nothing forwarded
)

// faultProxy sits between the SDK and versitygw on 127.0.0.1 and applies a
// one-shot fault to the next request that matches.
type faultProxy struct {
	URL string
	rp  *httputil.ReverseProxy

	mu    sync.Mutex
	match func(*http.Request) bool
	mode  faultMode
	hits  int // requests that matched the armed fault (including the faulted one)
	seen  int // every request
}

func newFaultProxy(t *testing.T, upstream string) *faultProxy {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{rp: httputil.NewSingleHostReverseProxy(u)}
	// The outgoing Host header stays the proxy's, which is what the SDK
	// signed, so versitygw accepts the signature.
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	p.URL = srv.URL
	return p
}

// arm applies mode to the next request for which match is true.
func (p *faultProxy) arm(match func(*http.Request) bool, mode faultMode) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.match, p.mode, p.hits = match, mode, 0
}

// matched is how many requests matched since arm: an SDK retry shows as 2.
func (p *faultProxy) matched() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.hits
}

func isPutObject(r *http.Request) bool {
	return r.Method == http.MethodPut && r.URL.Query().Get("uploadId") == ""
}

func isComplete(r *http.Request) bool {
	return r.Method == http.MethodPost && r.URL.Query().Get("uploadId") != ""
}

func isGet(r *http.Request) bool { return r.Method == http.MethodGet }

const conflictBody = `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>ConditionalRequestConflict</Code><Message>A conflicting operation occurred.</Message><RequestId>proxy</RequestId></Error>`

const internalBody = `<?xml version="1.0" encoding="UTF-8"?>
<Error><Code>InternalError</Code><Message>We encountered an internal error.</Message><RequestId>proxy</RequestId></Error>`

func (p *faultProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p.mu.Lock()
	p.seen++
	mode := pass
	if p.match != nil && p.match(r) {
		p.hits++
		if p.hits == 1 {
			mode = p.mode
		}
	}
	p.mu.Unlock()

	if mode == pass {
		p.rp.ServeHTTP(w, r)
		return
	}
	switch mode {
	case forwardThen409, forwardThenHang, forwardThenDrop, forwardThen500:
		rec := httptest.NewRecorder()
		p.rp.ServeHTTP(rec, r) // the upstream applies it; its reply is lost
	}
	switch mode {
	case forwardThen409, conflict409:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusConflict)
		_, _ = w.Write([]byte(conflictBody))
	case forwardThen500, refuse500:
		w.Header().Set("Content-Type", "application/xml")
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = w.Write([]byte(internalBody))
	case forwardThenHang:
		<-r.Context().Done() // until the client gives up
	case forwardThenDrop:
		conn, _, err := http.NewResponseController(w).Hijack()
		if err == nil {
			_ = conn.Close()
		}
	}
}
