package sdk

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk/sdktest"
)

const testBasin = "test-basin"

// testCtx is a context that ends with the test, bounded so a hang fails
// instead of stalling the suite.
func testCtx(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// fastRetry is a retry policy with short backoffs for tests.
func fastRetry(attempts int) RetryPolicy {
	return RetryPolicy{MaxAttempts: attempts, InitialBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond}
}

// newServer starts an sdktest server with a basin and a stream "s".
func newServer(t *testing.T, opts sdktest.Options) *sdktest.Server {
	t.Helper()
	srv := sdktest.New(opts)
	t.Cleanup(srv.Close)
	return srv
}

func newClient(t *testing.T, url string, mod func(*Config)) *Client {
	t.Helper()
	cfg := Config{AccountEndpoint: url, Retry: fastRetry(3)}
	if mod != nil {
		mod(&cfg)
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// setup starts a server and returns a client and a stream "s" in testBasin.
func setup(t *testing.T, opts sdktest.Options, mod func(*Config)) (*sdktest.Server, *Client, *Stream) {
	t.Helper()
	srv := newServer(t, opts)
	c := newClient(t, srv.URL, mod)
	ctx := testCtx(t)
	if _, err := c.CreateBasin(ctx, testBasin, nil); err != nil {
		t.Fatal(err)
	}
	b := c.Basin(testBasin)
	if _, err := b.CreateStream(ctx, "s", nil); err != nil {
		t.Fatal(err)
	}
	return srv, c, b.Stream("s")
}

// startH2C starts an httptest server speaking HTTP/1.1 and h2c.
func startH2C(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	p := new(http.Protocols)
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	srv.Config.Protocols = p
	srv.Start()
	t.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
	})
	return srv
}

func textRecords(bodies ...string) []api.Record {
	out := make([]api.Record, len(bodies))
	for i, b := range bodies {
		out[i] = api.Record{Body: []byte(b)}
	}
	return out
}

func appendText(t *testing.T, s *Stream, bodies ...string) api.AppendAck {
	t.Helper()
	ack, err := s.Append(testCtx(t), &api.AppendInput{Records: textRecords(bodies...)})
	if err != nil {
		t.Fatal(err)
	}
	return ack
}

// waitDone waits for ch to close, failing the test after d.
func waitDone(t *testing.T, ch <-chan struct{}, d time.Duration, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(d):
		t.Fatalf("timed out waiting for %s", what)
	}
}
