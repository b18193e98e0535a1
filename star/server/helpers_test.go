package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

func testLog() *slog.Logger {
	if os.Getenv("STARLOG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// env is a real node (SQLite in a temp dir, in-memory buckets) behind the
// real handler and http.Server on a loopback port.
type env struct {
	t    testing.TB
	n    *node.Node
	srv  *server.Server
	hs   *http.Server
	base string
	h1   *http.Client // HTTP/1.1
	h2   *http.Client // cleartext HTTP/2 with prior knowledge (what S2 SDKs use for sessions)
}

type envOpt func(*node.Config, *server.Options)

// memObjects is an in-memory object store with the buckets of both
// classes (standard; express-a, -b, -c).
func memObjects(t testing.TB) objstore.Store {
	t.Helper()
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func newEnv(t testing.TB, opts ...envOpt) *env {
	t.Helper()
	objs := memObjects(t)
	return newEnvOn(t, objs, opts...)
}

// newEnvOn is newEnv over the given object store.
func newEnvOn(t testing.TB, objs objstore.Store, opts ...envOpt) *env {
	t.Helper()
	cfg := node.Defaults()
	cfg.StarID = "test-star"
	cfg.Standard.FlushInterval = time.Millisecond
	cfg.Express.FlushInterval = time.Millisecond
	cfg.DeletionPending = 300 * time.Millisecond
	sopts := server.Options{HeartbeatMin: 50 * time.Millisecond, HeartbeatMax: 100 * time.Millisecond, Auth: auth.Open()}
	for _, o := range opts {
		o(&cfg, &sopts)
	}
	n, err := node.Open(context.Background(), cfg, node.Deps{Meta: testsvc.SQLite(t), Objects: objs, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(n, sopts)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer(ln.Addr().String())
	go hs.Serve(srv.Listener(ln))
	e := &env{t: t, n: n, srv: srv, hs: hs, base: "http://" + ln.Addr().String()}
	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetUnencryptedHTTP2(true)
	// DisableCompression: the tests choose Accept-Encoding themselves.
	e.h1 = &http.Client{Transport: &http.Transport{Protocols: &p1, DisableCompression: true}, Timeout: 30 * time.Second}
	e.h2 = &http.Client{Transport: &http.Transport{Protocols: &p2, DisableCompression: true}}
	t.Cleanup(func() {
		srv.Drain()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		n.Close(ctx)
		e.h1.CloseIdleConnections()
		e.h2.CloseIdleConnections()
	})
	return e
}

// resp is a response read whole.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) String() string { return fmt.Sprintf("%d %s", r.status, truncate(r.body)) }

func truncate(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "…"
	}
	return string(b)
}

// req is one request: method, path (relative to /v1 unless absolute),
// headers as pairs, body.
func (e *env) do(c *http.Client, method, path string, body []byte, headers ...string) resp {
	e.t.Helper()
	if !strings.HasPrefix(path, "/") {
		path = "/v1/" + path
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	r, err := http.NewRequest(method, e.base+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		r.Header.Add(headers[i], headers[i+1])
	}
	res, err := c.Do(r)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

// call sends a request on HTTP/1.1. A body sent to the account's
// resources (basins, access tokens) without a Content-Type among headers
// goes as application/json, as every SDK sends it (the server refuses
// other bodies: TestResourceBodiesNeedJSONContentType).
func (e *env) call(method, path string, body []byte, headers ...string) resp {
	e.t.Helper()
	if body != nil && (strings.HasPrefix(path, "basins") || strings.HasPrefix(path, "access-tokens")) && !hasHeader(headers, "Content-Type") {
		headers = append(headers, "Content-Type", "application/json")
	}
	return e.do(e.h1, method, path, body, headers...)
}

func hasHeader(headers []string, name string) bool {
	for i := 0; i+1 < len(headers); i += 2 {
		if strings.EqualFold(headers[i], name) {
			return true
		}
	}
	return false
}

// stream calls a /streams route of basin.
func (e *env) stream(basin, method, path string, body []byte, headers ...string) resp {
	e.t.Helper()
	return e.call(method, path, body, append([]string{"s2-basin", basin, "Content-Type", "application/json"}, headers...)...)
}

func jsonBody(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// want checks a response's status and, for errors, its code.
func want(t testing.TB, r resp, status int, code string) {
	t.Helper()
	if r.status != status {
		t.Fatalf("want %d %s, got %s", status, code, r)
	}
	if code == "" {
		return
	}
	var info api.ErrorInfo
	if err := json.Unmarshal(r.body, &info); err != nil || info.Code != code {
		t.Fatalf("want code %q, got %s", code, r)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("error with content-type %q", ct)
	}
}

// setupBasin creates a basin that auto-creates streams.
func (e *env) setupBasin(name string) {
	e.t.Helper()
	r := e.call("POST", "basins", jsonBody(map[string]any{"basin": name, "config": map[string]any{"create_stream_on_append": true, "create_stream_on_read": true}}), "Content-Type", "application/json")
	want(e.t, r, 201, "")
}

func (e *env) appendJSON(basin, stream string, body string, headers ...string) resp {
	e.t.Helper()
	return e.stream(basin, "POST", "streams/"+stream+"/records", []byte(body), headers...)
}

func (e *env) tail(basin, stream string) api.StreamPosition {
	e.t.Helper()
	r := e.stream(basin, "GET", "streams/"+stream+"/records/tail", nil)
	want(e.t, r, 200, "")
	p, err := api.DecodeTailJSON(r.body)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

func (e *env) readJSON(basin, stream, query string, headers ...string) (*api.ReadBatch, resp) {
	e.t.Helper()
	r := e.stream(basin, "GET", "streams/"+stream+"/records?"+query, nil, headers...)
	if r.status != 200 {
		return nil, r
	}
	f := api.FormatRaw
	for i := 0; i+1 < len(headers); i += 2 {
		if strings.EqualFold(headers[i], "s2-format") && headers[i+1] == "base64" {
			f = api.FormatBase64
		}
	}
	b, err := api.DecodeReadBatchJSON(r.body, f)
	if err != nil {
		e.t.Fatalf("decode read batch: %v: %s", err, r)
	}
	return b, r
}

func textRecords(prefix string, n int) string {
	var sb strings.Builder
	sb.WriteString(`{"records":[`)
	for i := range n {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"body":"%s-%d"}`, prefix, i)
	}
	sb.WriteString(`]}`)
	return sb.String()
}

// tailOf reads a stream's tail from the node (for checks inside fuzz
// functions, which must not use the env's testing.F).
func (e *env) tailOf(t testing.TB, basin, stream string) api.StreamPosition {
	t.Helper()
	p, err := e.n.CheckTail(context.Background(), basin, stream, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// waitSessions waits until e's starlog_http_sessions gauge of kind reads
// n: a long poll placed and waiting (long_poll), a Durable Streams live
// read holding its credential watch (ds_live).
func waitSessions(t *testing.T, e *env, kind string, n float64) {
	t.Helper()
	series := `starlog_http_sessions{kind="` + kind + `"}`
	poll.Until(t, 10*time.Second, fmt.Sprintf("%s at %v", series, n), func() bool {
		return metricValue(t, e, series) == n
	})
}
