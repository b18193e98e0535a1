package server_test

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/ratelimit"
	"github.com/starlog/starlog/star/server"
)

func withLimits(l ratelimit.Limits) envOpt {
	return func(c *node.Config, _ *server.Options) { c.Limits = l }
}

// want429 checks a 429 rate_limited and its retry headers: Retry-After in
// whole seconds (at least 1) and retry-after-ms within (0, maxMs].
func want429(t *testing.T, r resp, maxMs int) {
	t.Helper()
	want(t, r, 429, api.CodeRateLimited)
	if s, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || s < 1 {
		t.Fatalf("Retry-After %q", r.header.Get("Retry-After"))
	}
	if ms, err := strconv.Atoi(r.header.Get("Retry-After-Ms")); err != nil || ms <= 0 || ms > maxMs {
		t.Fatalf("retry-after-ms %q, want 1..%d", r.header.Get("Retry-After-Ms"), maxMs)
	}
}

func metric(t *testing.T, e *env, line string) bool {
	t.Helper()
	r := e.call("GET", "/metrics", nil)
	return strings.Contains(string(r.body), line)
}

// S2's per-stream per-connection batch rate: past it a unary append is
// 429 with how long to wait, and changes nothing; another connection has
// its own budget.
func TestAppendBatchRateLimit(t *testing.T) {
	t.Parallel()
	// One batch per 2 s (burst 1): slow enough that no token comes back
	// while the test runs on a loaded machine.
	e := newEnv(t, withLimits(ratelimit.Limits{StreamBatchesPerSec: 0.5}))
	e.setupBasin("rl-basin")
	want(t, e.appendJSON("rl-basin", "s", textRecords("a", 1)), 200, "")
	want429(t, e.appendJSON("rl-basin", "s", textRecords("b", 1)), 2000)
	if tail := e.tail("rl-basin", "s"); tail.SeqNum != 1 {
		t.Fatalf("a rate-limited append moved the tail to %d", tail.SeqNum)
	}
	// Another stream, and another connection to this one, are not limited.
	want(t, e.appendJSON("rl-basin", "other", textRecords("c", 1)), 200, "")
	var p1 http.Protocols
	p1.SetHTTP1(true)
	other := &http.Client{Transport: &http.Transport{Protocols: &p1}}
	defer other.CloseIdleConnections()
	r := e.do(other, "POST", "streams/s/records", []byte(textRecords("d", 1)), "s2-basin", "rl-basin", "Content-Type", "application/json")
	want(t, r, 200, "")
	if !metric(t, e, `starlog_rate_limited_total{reason="stream_batches"} 1`) {
		t.Fatal("starlog_rate_limited_total{reason=\"stream_batches\"} is not 1")
	}
}

// By default the batch-rate limit is off (issue 31): one client
// connection (HTTP/2, 16 appends in flight) sends 1,000 batches to one
// stream, five times S2's 200 a second plus its burst for as long as
// they take on a loaded machine, and none is refused.
func TestBatchRateLimitIsOptIn(t *testing.T) {
	e := newEnv(t)
	e.setupBasin("free-basin")
	const workers, each = 16, 1000 / 16
	statuses := make(chan int, workers*each)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for range each {
				statuses <- e.do(e.h2, "POST", "streams/s/records", []byte(textRecords("a", 1)), "s2-basin", "free-basin", "Content-Type", "application/json").status
			}
		})
	}
	wg.Wait()
	close(statuses)
	refused := 0
	for st := range statuses {
		if st != 200 {
			refused++
		}
	}
	if refused > 0 {
		t.Fatalf("%d of %d appends on one connection refused with the default limits", refused, workers*each)
	}
	if tail := e.tail("free-basin", "s"); tail.SeqNum != workers*each {
		t.Fatalf("tail %d after %d appends", tail.SeqNum, workers*each)
	}
}

// S2's per-stream throughput: all connections together.
func TestAppendThroughputLimit(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(ratelimit.Limits{StreamBytesPerSec: 64 << 10})) // burst: one largest batch, 1 MiB
	e.setupBasin("tp-basin")
	big := `{"records":[{"body":"` + strings.Repeat("x", 600<<10) + `"}]}`
	want(t, e.appendJSON("tp-basin", "s", big), 200, "")
	want429(t, e.appendJSON("tp-basin", "s", big), 4000)
	var p1 http.Protocols
	p1.SetHTTP1(true)
	other := &http.Client{Transport: &http.Transport{Protocols: &p1}}
	defer other.CloseIdleConnections()
	r := e.do(other, "POST", "streams/s/records", []byte(big), "s2-basin", "tp-basin", "Content-Type", "application/json")
	want429(t, r, 4000)
	if tail := e.tail("tp-basin", "s"); tail.SeqNum != 1 {
		t.Fatalf("rate-limited appends moved the tail to %d", tail.SeqNum)
	}
	// Small batches still fit in what is left of the burst.
	want(t, e.appendJSON("tp-basin", "s", textRecords("a", 1)), 200, "")
	if !metric(t, e, `starlog_rate_limited_total{reason="stream_bytes"} 2`) {
		t.Fatal("starlog_rate_limited_total{reason=\"stream_bytes\"} is not 2")
	}
}

// An append session past the limit is throttled, as S2 does: every input
// is acknowledged, at the limit's pace.
func TestAppendSessionThrottled(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(ratelimit.Limits{StreamBatchesPerSec: 10}))
	e.setupBasin("th-basin")
	s := e.openAppendSession("th-basin", "s", api.CompressionNone)
	start := time.Now()
	for range 20 {
		s.send(t, batch("x", 1))
	}
	for i := range 20 {
		if _, terr := s.ack(t); terr != nil {
			t.Fatalf("input %d: %v", i, terr)
		}
	}
	// 10 in the burst, then 10 at 10/s.
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Fatalf("20 inputs at 10/s (burst 10) took %v: not throttled", took)
	}
}

// An input that would wait longer than the session may be throttled ends
// the session with S2's terminal frame: 429 rate_limited, after the acks
// of the inputs before it.
func TestAppendSessionRateLimitedFrame(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withLimits(ratelimit.Limits{StreamBatchesPerSec: 0.5, SessionThrottle: 50 * time.Millisecond}))
	e.setupBasin("tf-basin")
	s := e.openAppendSession("tf-basin", "s", api.CompressionNone)
	s.send(t, batch("x", 1))
	s.send(t, batch("y", 1))
	if _, terr := s.ack(t); terr != nil {
		t.Fatalf("first input: %v", terr)
	}
	_, terr := s.ack(t)
	if terr == nil || terr.Status != 429 || terr.Code != api.CodeRateLimited {
		t.Fatalf("second input: %v, want a 429 rate_limited terminal frame", terr)
	}
	if tail := e.tail("tf-basin", "s"); tail.SeqNum != 1 {
		t.Fatalf("the refused input moved the tail to %d", tail.SeqNum)
	}
}

// The optional per-client rate: off by default; on, a client past it gets
// 429 on any S2 API request, keyed by the caller-supplied key (the token
// id) or else the client's IP; /health is not limited.
func TestClientRateLimit(t *testing.T) {
	t.Parallel()
	// Burst 2, then one request per 5 s.
	e := newEnv(t, func(_ *node.Config, o *server.Options) { o.ClientRate = server.ClientRate{PerSec: 0.2, Burst: 2} })
	e.setupBasin("cl-basin") // the first of two
	want(t, e.call("GET", "basins", nil), 200, "")
	want429(t, e.call("GET", "basins", nil), 5000)
	want429(t, e.appendJSON("cl-basin", "s", textRecords("a", 1)), 5000)
	want(t, e.call("GET", "/health", nil), 200, "")

	// Keyed by what the auth code says (here a header stands for a token).
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e.srv.ServeHTTP(w, r.WithContext(server.WithClientKey(r.Context(), r.Header.Get("X-Token"))))
	})
	hs := &http.Server{Handler: h}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go hs.Serve(ln)
	defer hs.Close()
	call := func(tok string) resp {
		req, _ := http.NewRequestWithContext(context.Background(), "GET", "http://"+ln.Addr().String()+"/v1/basins", nil)
		req.Header.Set("X-Token", tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return resp{status: res.StatusCode, header: res.Header}
	}
	for _, tok := range []string{"t1", "t1", "t2", "t2"} {
		if r := call(tok); r.status != 200 {
			t.Fatalf("token %s: %d", tok, r.status)
		}
	}
	if r := call("t1"); r.status != 429 {
		t.Fatalf("token t1 past its rate: %d", r.status)
	}
	if !metric(t, e, `starlog_rate_limited_total{reason="client"} 3`) {
		t.Fatal("starlog_rate_limited_total{reason=\"client\"} is not 3")
	}
}

// A client that fills the star's write buffer with one stream gets 429
// for that stream once its wait for buffer space runs out (the stall is
// ingest_burst: the flusher is not held up by storage); another stream
// waiting for the same full buffer is not at fault and gets 503.
func TestPoolExhaustionByOneStreamIs429(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(c *node.Config, _ *server.Options) {
		c.Standard.MemoryBufferBytes = 256 << 10
		c.Standard.FlushInterval = 2 * time.Second // nothing is cut for 2 s
		c.Standard.TargetFlightBytes = 4 << 20
		c.AdmitTimeout = 300 * time.Millisecond
	})
	e.setupBasin("pool-basin")
	want(t, e.appendJSON("pool-basin", "other", textRecords("o", 1)), 200, "") // opened (and acked) before the flood
	// Each batch admitted into the pool observes its wait for budget
	// (starlog_admit_wait_seconds): "other"'s, then the four hogs'.
	admitted := `starlog_admit_wait_seconds_count{class="standard"}`
	if n := metricValue(t, e, admitted); n != 1 {
		t.Fatalf("%s %v before the flood, want 1", admitted, n)
	}
	big := `{"records":[{"body":"` + strings.Repeat("h", 60<<10) + `"}]}`
	var wg sync.WaitGroup
	for range 4 { // ~240 KiB: the buffer is full
		wg.Go(func() {
			e.do(newH1(), "POST", "streams/hog/records", []byte(big), "s2-basin", "pool-basin", "Content-Type", "application/json")
		})
	}
	poll.Until(t, 10*time.Second, "the four hog batches in the pool", func() bool { return metricValue(t, e, admitted) == 5 })
	r := e.do(newH1(), "POST", "streams/hog/records", []byte(big), "s2-basin", "pool-basin", "Content-Type", "application/json")
	want429(t, r, 1000)
	r = e.do(newH1(), "POST", "streams/other/records", []byte(big), "s2-basin", "pool-basin", "Content-Type", "application/json")
	want(t, r, 503, api.CodeUnavailable)
	wg.Wait()
	if !metric(t, e, `starlog_rate_limited_total{reason="pool_share"} 1`) {
		t.Fatal("starlog_rate_limited_total{reason=\"pool_share\"} is not 1")
	}
}

func newH1() *http.Client {
	var p1 http.Protocols
	p1.SetHTTP1(true)
	return &http.Client{Transport: &http.Transport{Protocols: &p1}, Timeout: 30 * time.Second}
}

// A forwarded append counts against the client's own connection, not the
// forwarding star's: two clients appending through a star that does not
// lead the stream each get the per-connection batch budget (here 1).
func TestForwardedAppendsCountTheClientConnection(t *testing.T) {
	t.Parallel()
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	lim := func(c *node.Config) { c.Limits = ratelimit.Limits{StreamBatchesPerSec: 0.5} } // burst 1
	a, b := starWith(t, "a", ms, objs, lim), starWith(t, "b", ms, objs, lim)
	a.setupBasin("fl-basin")
	want(t, a.appendJSON("fl-basin", "s", textRecords("lead", 1)), 200, "") // a leads s
	for _, c := range []*http.Client{newH1(), newH1()} {
		r := b.do(c, "POST", "streams/s/records", []byte(textRecords("x", 1)), "s2-basin", "fl-basin", "Content-Type", "application/json")
		if r.status != 200 {
			t.Fatalf("a client's first append through b: %s", r)
		}
		want429(t, b.do(c, "POST", "streams/s/records", []byte(textRecords("y", 1)), "s2-basin", "fl-basin", "Content-Type", "application/json"), 2000)
		c.CloseIdleConnections()
	}
	if tail := a.tail("fl-basin", "s"); tail.SeqNum != 3 {
		t.Fatalf("tail %d, want 3", tail.SeqNum)
	}
}

// With authentication on, the per-client rate counts each access token on
// its own, whatever address its requests come from; the admin token
// counts by address.
func TestClientRateLimitByToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth, func(_ *node.Config, o *server.Options) { o.ClientRate = server.ClientRate{PerSec: 0.2, Burst: 2} })
	scope := map[string]any{"basins": map[string]string{"prefix": ""}, "op_groups": map[string]any{"account": map[string]bool{"read": true}}}
	t1 := e.issue(map[string]any{"id": "rl-one", "scope": scope})
	t2 := e.issue(map[string]any{"id": "rl-two", "scope": scope})
	want429(t, e.call("GET", "basins", nil, bearer(testAdmin)...), 5000) // the admin's address spent its burst issuing
	for _, tok := range []string{t1, t1, t2, t2} {
		want(t, e.call("GET", "basins", nil, bearer(tok)...), 200, "")
	}
	want429(t, e.call("GET", "basins", nil, bearer(t1)...), 5000)
}
