package sdk

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk/sdktest"
)

// TestRateLimitedAppendsAgainstStar runs appends against a star that lets
// one batch per second into a stream per connection: a 429 rate_limited
// is retried after the wait the star asks for (retry-after-ms), within the
// attempts and the context, and only as the append retry policy allows.
func TestRateLimitedAppendsAgainstStar(t *testing.T) {
	endpoint := startStar(t, "--append-stream-batches-per-sec", "1")
	ctx := testCtx(t)
	retrying := starClient(t, endpoint, starAdminToken, nil)
	s := retrying.Basin("starlog-dev").Stream("limited")

	if _, err := s.Append(ctx, &api.AppendInput{Records: textRecords("first")}); err != nil {
		t.Fatal(err)
	}
	// The next batch is over the limit: the SDK waits as told and succeeds
	// (the default backoff alone, 100 ms then 200 ms, is too short).
	start := time.Now()
	ack, err := s.Append(ctx, &api.AppendInput{Records: textRecords("second")})
	if err != nil {
		t.Fatalf("append past the limit: %v", err)
	}
	if took := time.Since(start); took < 500*time.Millisecond {
		t.Fatalf("the retried append took %v: it did not wait for the star's retry-after", took)
	}
	if ack.Start.SeqNum != 1 {
		t.Fatalf("second append at %d, want 1 (no duplicate)", ack.Start.SeqNum)
	}
	// match_seq_num appends are retried the same way.
	match := ack.End.SeqNum
	if _, err := s.Append(ctx, &api.AppendInput{Records: textRecords("third"), MatchSeqNum: &match}); err != nil {
		t.Fatalf("append with match_seq_num past the limit: %v", err)
	}

	// AppendRetryNone: the 429 comes back at once, with the star's wait.
	none := starClient(t, endpoint, starAdminToken, func(c *Config) { c.Retry.AppendRetry = AppendRetryNone })
	ns := none.Basin("starlog-dev").Stream("limited-none")
	if _, err := ns.Append(ctx, &api.AppendInput{Records: textRecords("a")}); err != nil {
		t.Fatal(err)
	}
	_, err = ns.Append(ctx, &api.AppendInput{Records: textRecords("b")})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests || ae.Code != api.CodeRateLimited ||
		ae.RetryAfter <= 0 || ae.RetryAfter > 2*time.Second {
		t.Fatalf("append past the limit without retries: %v (retry after %v)", err, retryAfter(err))
	}

	// A context that ends before the wait: the 429 at once, not a sleep
	// to the deadline.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	start = time.Now()
	_, err = s.Append(short, &api.AppendInput{Records: textRecords("late")})
	if !isStatus(err, http.StatusTooManyRequests, api.CodeRateLimited) || time.Since(start) > 250*time.Millisecond {
		t.Fatalf("append with a 300 ms context: %v after %v", err, time.Since(start))
	}
}

// TestRetryAfterSeconds: a server that sends only Retry-After (seconds) is
// waited for too, and the attempts stay bounded.
func TestRetryAfterSeconds(t *testing.T) {
	var calls atomic.Int32
	srv := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n := calls.Add(1); n == 1 || n < 0 {
			w.Header().Set("Retry-After", "1")
			w.Header().Set("Content-Type", api.ContentTypeJSON)
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"code":"rate_limited","message":"slow down"}`))
			return
		}
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		_, _ = w.Write([]byte(`{"basins":[],"has_more":false}`))
	}))
	c := newClient(t, srv.URL, nil) // fastRetry: 1–5 ms backoffs
	start := time.Now()
	if _, err := c.ListBasins(testCtx(t), api.ListRequest{}); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 900*time.Millisecond || calls.Load() != 2 {
		t.Fatalf("took %v over %d calls, want a 1 s wait and 2 calls", took, calls.Load())
	}

	// Always 429: MaxAttempts bounds the calls, MaxRetryAfter the waits.
	calls.Store(-100)
	c = newClient(t, srv.URL, func(cfg *Config) { cfg.Retry.MaxRetryAfter = 10 * time.Millisecond })
	start = time.Now()
	_, err := c.ListBasins(testCtx(t), api.ListRequest{})
	if !isStatus(err, http.StatusTooManyRequests, api.CodeRateLimited) || calls.Load() != -97 || time.Since(start) > 500*time.Millisecond {
		t.Fatalf("always 429: %v after %d calls and %v", err, calls.Load()+100, time.Since(start))
	}
}

// TestIssueRetriedOnlyWhenDefinite: an issue that failed indefinitely (a
// 503) is not retried (a retry of an applied issue could only get 409,
// the token lost); a definite 429 is.
func TestIssueRetriedOnlyWhenDefinite(t *testing.T) {
	var calls atomic.Int32
	var status atomic.Int32
	srv := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After-Ms", "1")
			w.WriteHeader(int(status.Load()))
			_, _ = w.Write([]byte(`{"code":"x","message":"first attempt fails"}`))
			return
		}
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(`{"access_token":"stl1.secret"}`))
	}))
	c := newClient(t, srv.URL, nil)
	req := IssueAccessTokenRequest{ID: "t", Scope: AccessTokenScope{Ops: []Operation{OpRead}}}

	status.Store(http.StatusServiceUnavailable)
	if _, err := c.IssueAccessToken(testCtx(t), req); !isStatus(err, http.StatusServiceUnavailable, "x") || calls.Load() != 1 {
		t.Fatalf("after a 503: %v in %d calls, want the 503 in 1", err, calls.Load())
	}
	calls.Store(0)
	status.Store(http.StatusTooManyRequests)
	tok, err := c.IssueAccessToken(testCtx(t), req)
	if err != nil || tok != "stl1.secret" || calls.Load() != 2 {
		t.Fatalf("after a 429: %q %v in %d calls", tok, err, calls.Load())
	}
}

// TestAllAccessTokensStopsOnAStuckPage: a server whose has_more page does
// not move past start_after ends the iteration with a protocol error
// instead of looping.
func TestAllAccessTokensStopsOnAStuckPage(t *testing.T) {
	var calls atomic.Int32
	srv := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		w.Header().Set("Content-Type", api.ContentTypeJSON)
		_, _ = w.Write([]byte(`{"access_tokens":[{"id":"a","auto_prefix_streams":false,"scope":{}}],"has_more":true}`))
	}))
	c := newClient(t, srv.URL, nil)
	var ids []string
	var last error
	for info, err := range c.AllAccessTokens(testCtx(t), api.ListRequest{}) {
		if err != nil {
			last = err
			break
		}
		ids = append(ids, info.ID)
	}
	var pe *ProtocolError
	if !errors.As(last, &pe) || len(ids) != 2 || calls.Load() != 2 {
		t.Fatalf("ids %v, err %v after %d calls", ids, last, calls.Load())
	}
}

// TestReadSessionWaitsForRetryAfter: a read session whose open is refused
// with 429 and retry-after-ms reconnects after that wait, not after the
// (here 1–5 ms) backoff.
func TestReadSessionWaitsForRetryAfter(t *testing.T) {
	inner := sdktest.NewUnstarted(sdktest.Options{})
	var refused atomic.Bool
	srv := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/records") && !refused.Swap(true) {
			w.Header().Set("Retry-After-Ms", "400")
			w.Header().Set("Content-Type", api.ContentTypeJSON)
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"code":"rate_limited","message":"later"}`))
			return
		}
		inner.ServeHTTP(w, r)
	}))
	c := newClient(t, srv.URL, nil)
	ctx := testCtx(t)
	if _, err := c.CreateBasin(ctx, testBasin, nil); err != nil {
		t.Fatal(err)
	}
	b := c.Basin(testBasin)
	if _, err := b.CreateStream(ctx, "s", nil); err != nil {
		t.Fatal(err)
	}
	s := b.Stream("s")
	appendText(t, s, "a")
	start := time.Now()
	rs, err := s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum}, ReadSessionOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Close()
	checkBodies(t, nextRecords(t, rs, 1), 0, "a")
	if took := time.Since(start); took < 350*time.Millisecond || !refused.Load() {
		t.Fatalf("first record after %v (refused: %v), want after the 400 ms retry-after", took, refused.Load())
	}
}
