package sdk

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk/sdktest"
)

// TestMayRetry is the retry rule, exhaustively over kinds, policies and
// failure classes.
func TestMayRetry(t *testing.T) {
	dial := &TransportError{Op: "x", Err: &net.OpError{Op: "dial", Err: errors.New("refused")}}
	reset := &TransportError{Op: "x", Err: errors.New("connection reset")}
	cut := &TransportError{Op: "x", Err: &net.OpError{Op: "dial"}, responded: true}
	errs := map[string]error{
		"429":      api.RateLimited("slow down"),
		"409conf":  api.TransactionConflict("again"),
		"502hot":   api.HotServer("busy"),
		"503":      api.Unavailable("down"),
		"500":      api.Storage("disk"),
		"408":      api.Timeout("late"),
		"412":      api.SeqNumMismatch(3),
		"422":      api.Invalid("bad"),
		"404":      api.StreamNotFound("gone"),
		"409dup":   api.ResourceAlreadyExists("dup"),
		"dial":     dial,
		"reset":    reset,
		"cut":      cut,
		"wrapped":  fmt.Errorf("ctx: %w", api.Unavailable("down")),
		"protocol": &ProtocolError{Msg: "bad ack"},
		"other":    errors.New("local"),
	}
	// Which failures may be retried, per kind of call.
	idem := map[string]bool{"429": true, "409conf": true, "502hot": true, "503": true, "500": true, "408": true,
		"dial": true, "reset": true, "cut": true, "wrapped": true}
	definiteRetryable := map[string]bool{"429": true, "409conf": true, "502hot": true, "dial": true}
	safe := RetryPolicy{}.withDefaults()
	all := RetryPolicy{AppendRetry: AppendRetryAll}.withDefaults()
	none := RetryPolicy{AppendRetry: AppendRetryNone}.withDefaults()
	for name, err := range errs {
		check := func(what string, got, want bool) {
			t.Helper()
			if got != want {
				t.Errorf("%s on %s: got %v, want %v", what, name, got, want)
			}
		}
		check("idempotent", safe.mayRetry(idempotent, err), idem[name])
		check("append safe", safe.mayRetry(opKind{append: true}, err), definiteRetryable[name])
		check("append safe with match", safe.mayRetry(opKind{append: true, matchSeqNum: true}, err), idem[name])
		check("append all", all.mayRetry(opKind{append: true}, err), idem[name])
		check("append none", none.mayRetry(opKind{append: true, matchSeqNum: true}, err), false)
	}
}

func TestIsDefinite(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{api.SeqNumMismatch(1), true},
		{api.Unavailable("x"), false},
		{&TransportError{Err: &net.OpError{Op: "dial"}}, true},
		{&TransportError{Err: &net.DNSError{}}, true},
		{&TransportError{Err: &net.OpError{Op: "read"}}, false},
		{&TransportError{Err: context.DeadlineExceeded}, false},
		{&SessionError{Cause: api.SeqNumMismatch(1)}, true},
		{&SessionError{Cause: api.Unavailable("x"), mayBeApplied: true}, false},
		{&AfterIndefiniteError{Earlier: api.Storage("x"), Err: api.SeqNumMismatch(1)}, false},
		{ErrSessionClosed, true},
		{&ProtocolError{Msg: "x"}, false},
		{context.Canceled, false},
		{fmt.Errorf("wrapped: %w", api.Invalid("x")), true},
	} {
		if got := IsDefinite(tc.err); got != tc.want {
			t.Errorf("IsDefinite(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// failFirst is an append hook that fails the first n batches with e,
// applying them first when apply is set.
func failFirst(n int32, e *api.Error, apply bool) func(context.Context, sdktest.AppendCall) sdktest.Fault {
	var calls atomic.Int32
	return func(context.Context, sdktest.AppendCall) sdktest.Fault {
		if calls.Add(1) <= n {
			return sdktest.Fault{Err: e, Apply: apply}
		}
		return sdktest.Fault{}
	}
}

// A definite retryable failure (429) is retried: the append lands once.
func TestAppendRetriesDefinite(t *testing.T) {
	srv, _, s := setup(t, sdktest.Options{AppendHook: failFirst(2, api.RateLimited("slow down"), false)}, nil)
	ack, err := s.Append(testCtx(t), &api.AppendInput{Records: textRecords("a")})
	if err != nil {
		t.Fatal(err)
	}
	if ack.Start.SeqNum != 0 || srv.AppendCalls() != 3 || len(srv.Records(testBasin, "s")) != 1 {
		t.Fatalf("ack %+v, calls %d, records %d", ack, srv.AppendCalls(), len(srv.Records(testBasin, "s")))
	}
}

// An indefinite failure of an append without match_seq_num is not retried
// under the default policy: the write happened, and a retry would have
// duplicated it.
func TestAppendIndefiniteNotRetried(t *testing.T) {
	srv, _, s := setup(t, sdktest.Options{AppendHook: failFirst(1, api.Unavailable("lost reply"), true)}, nil)
	_, err := s.Append(testCtx(t), &api.AppendInput{Records: textRecords("a")})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusServiceUnavailable {
		t.Fatalf("got %v", err)
	}
	if IsDefinite(err) {
		t.Fatal("a 503 must be indefinite")
	}
	if srv.AppendCalls() != 1 || len(srv.Records(testBasin, "s")) != 1 {
		t.Fatalf("calls %d, records %d", srv.AppendCalls(), len(srv.Records(testBasin, "s")))
	}
}

// With match_seq_num an indefinite failure is retried; when the first
// attempt was in fact applied the retry gets 412, reported with the
// earlier failure, and nothing is duplicated.
func TestAppendIndefiniteRetriedWithMatch(t *testing.T) {
	srv, _, s := setup(t, sdktest.Options{AppendHook: failFirst(1, api.Unavailable("lost reply"), true)}, nil)
	_, err := s.Append(testCtx(t), &api.AppendInput{Records: textRecords("a"), MatchSeqNum: api.Uint64(0)})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusPreconditionFailed {
		t.Fatalf("got %v", err)
	}
	if n, _ := ae.ExpectedSeqNum(); n != 1 {
		t.Fatalf("expected seq num %d", n)
	}
	var after *AfterIndefiniteError
	if !errors.As(err, &after) || IsDefinite(err) {
		t.Fatalf("the 412 must be reported as following an indefinite failure: %v", err)
	}
	if srv.AppendCalls() != 2 || len(srv.Records(testBasin, "s")) != 1 {
		t.Fatalf("calls %d, records %d", srv.AppendCalls(), len(srv.Records(testBasin, "s")))
	}

	// An indefinite failure that did not apply: the retry succeeds.
	srv2, _, s2 := setup(t, sdktest.Options{AppendHook: failFirst(1, api.Storage("disk"), false)}, nil)
	ack, err := s2.Append(testCtx(t), &api.AppendInput{Records: textRecords("a"), MatchSeqNum: api.Uint64(0)})
	if err != nil || ack.End.SeqNum != 1 || srv2.AppendCalls() != 2 {
		t.Fatalf("ack %+v err %v calls %d", ack, err, srv2.AppendCalls())
	}
}

// AppendRetryAll is at-least-once: the retry duplicates the record.
func TestAppendRetryAllDuplicates(t *testing.T) {
	srv, _, s := setup(t, sdktest.Options{AppendHook: failFirst(1, api.Unavailable("lost reply"), true)},
		func(c *Config) { c.Retry.AppendRetry = AppendRetryAll })
	if _, err := s.Append(testCtx(t), &api.AppendInput{Records: textRecords("a")}); err != nil {
		t.Fatal(err)
	}
	if got := len(srv.Records(testBasin, "s")); got != 2 {
		t.Fatalf("records %d, want the duplicate (2)", got)
	}
}

// Definite non-retryable failures are returned at once.
func TestAppendNotRetriedWhenNotRetryable(t *testing.T) {
	srv, _, s := setup(t, sdktest.Options{AppendHook: failFirst(1, api.Invalid("nope"), false)}, nil)
	_, err := s.Append(testCtx(t), &api.AppendInput{Records: textRecords("a"), MatchSeqNum: api.Uint64(0)})
	if !IsDefinite(err) || srv.AppendCalls() != 1 {
		t.Fatalf("err %v calls %d", err, srv.AppendCalls())
	}
}

// The attempts run out: the last failure is returned.
func TestRetriesExhausted(t *testing.T) {
	srv, _, s := setup(t, sdktest.Options{AppendHook: failFirst(10, api.RateLimited("slow"), false)}, nil)
	_, err := s.Append(testCtx(t), &api.AppendInput{Records: textRecords("a")})
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusTooManyRequests || srv.AppendCalls() != 3 {
		t.Fatalf("err %v calls %d", err, srv.AppendCalls())
	}
}

// Reads are retried on indefinite failures, here a 503 from a proxy in
// front of the server.
func TestReadRetried(t *testing.T) {
	srv := newServer(t, sdktest.Options{})
	var fails atomic.Int32
	fails.Store(2)
	front := startH2C(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && fails.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, `{"code":"unavailable","message":"try later"}`)
			return
		}
		target, _ := url.Parse(srv.URL)
		r.URL.Scheme, r.URL.Host, r.RequestURI, r.Host = target.Scheme, target.Host, "", target.Host
		resp, err := http.DefaultTransport.RoundTrip(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	c := newClient(t, front.URL, nil)
	ctx := testCtx(t)
	if _, err := c.CreateBasin(ctx, testBasin, nil); err != nil {
		t.Fatal(err)
	}
	s := c.Basin(testBasin).Stream("s")
	if _, err := c.Basin(testBasin).CreateStream(ctx, "s", nil); err != nil {
		t.Fatal(err)
	}
	appendText(t, s, "x")
	b, err := s.Read(ctx, api.ReadRequest{From: api.FromSeqNum})
	if err != nil || len(b.Records) != 1 {
		t.Fatalf("read %+v %v", b, err)
	}
	if fails.Load() >= 0 {
		t.Fatalf("the proxy's failures were not all consumed: %d left", fails.Load())
	}
}

// A refused connection is definite, so even an append without
// match_seq_num is retried; every attempt fails here and the error says
// the append surely did not happen.
func TestDialFailureIsDefinite(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	c := newClient(t, "http://"+addr, nil)
	_, err = c.Basin(testBasin).Stream("s").Append(testCtx(t), &api.AppendInput{Records: textRecords("a")})
	var te *TransportError
	if !errors.As(err, &te) || !IsDefinite(err) {
		t.Fatalf("got %v (definite %v)", err, IsDefinite(err))
	}
}

// A cancelled context stops retries at once.
func TestRetryStopsOnCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t))
	hook := func(context.Context, sdktest.AppendCall) sdktest.Fault {
		cancel()
		return sdktest.Fault{Err: api.RateLimited("slow")}
	}
	srv, _, s := setup(t, sdktest.Options{AppendHook: hook}, func(c *Config) { c.Retry = fastRetry(10) })
	_, err := s.Append(ctx, &api.AppendInput{Records: textRecords("a")})
	if !errors.Is(err, context.Canceled) || srv.AppendCalls() != 1 {
		t.Fatalf("err %v calls %d", err, srv.AppendCalls())
	}
}
