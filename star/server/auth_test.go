package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// The security suite: a star with authentication on, every endpoint ×
// {no token, bad token, expired, revoked, out of scope, in scope}, each
// checked for its status and for leaving no trace.

const (
	testAdmin = "admin-token-for-tests-0123456789"
	testKey   = "internal-key-for-tests-0123456789abcdef"
)

func withAuth(_ *node.Config, o *server.Options) {
	o.Auth = auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}
}

func bearer(tok string) []string { return []string{"Authorization", "Bearer " + tok} }

// tokenClock is the servers' token clock (server.Options.TokenClock),
// real time that a test moves forward instead of waiting.
type tokenClock struct{ skew atomic.Int64 }

func (c *tokenClock) now() time.Time          { return time.Now().Add(time.Duration(c.skew.Load())) }
func (c *tokenClock) advance(d time.Duration) { c.skew.Add(int64(d)) }

// issue issues a token with the admin token and returns it.
func (e *env) issue(body map[string]any) string {
	e.t.Helper()
	r := e.call("POST", "access-tokens", jsonBody(body), append(bearer(testAdmin), "Content-Type", "application/json")...)
	want(e.t, r, 201, "")
	var out struct {
		AccessToken string `json:"access_token"`
	}
	if err := json.Unmarshal(r.body, &out); err != nil || out.AccessToken == "" {
		e.t.Fatalf("issue: %s", r)
	}
	return out.AccessToken
}

// snapshot is every metastore row a request could leave: the basin
// directory, each basin's partition, the tokens, and each stream's
// partition (its lease, refs).
func (e *env) snapshot(basins ...string) string {
	e.t.Helper()
	ms := e.n.Meta()
	var b strings.Builder
	dump := func(pk string) []meta.Item {
		var items []meta.Item
		q := meta.Query{PK: pk}
		for {
			pg, err := ms.Query(context.Background(), q)
			if err != nil {
				e.t.Fatal(err)
			}
			items = append(items, pg.Items...)
			if pg.Next == "" {
				return items
			}
			q.PageToken = pg.Next
		}
	}
	for _, pk := range append([]string{node.BasinDirPK, meta.TokensPK}, basins...) {
		if pk != node.BasinDirPK && pk != meta.TokensPK {
			pk = "basin#" + pk
		}
		for _, it := range dump(pk) {
			fmt.Fprintf(&b, "%s|%s|%d|%s\n", it.PK, it.SK, it.Ver, it.Val)
			var row struct {
				ID string `json:"id"`
			}
			if strings.HasPrefix(it.SK, "s#") && json.Unmarshal(it.Val, &row) == nil && row.ID != "" {
				for _, s := range dump("stream#" + row.ID) {
					fmt.Fprintf(&b, "%s|%s|%d|%s\n", s.PK, s.SK, s.Ver, s.Val)
				}
			}
		}
	}
	return b.String()
}

// leaseAcquisitions sums starlog_leader_lease_acquisitions_total.
func (e *env) leaseAcquisitions() float64 {
	e.t.Helper()
	mfs, err := e.n.Registry().Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() == "starlog_leader_lease_acquisitions_total" {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// endpoint is one request of the matrix, in the scope of inScope (a token
// of basin authbasin-1, streams "in/", every op) and outside outScope's.
type endpoint struct {
	name         string
	method, path string
	headers      []string
	body         string
	okStatus     int
}

func endpoints() []endpoint {
	b := []string{"s2-basin", "authbasin-1", "Content-Type", "application/json"}
	return []endpoint{
		{"list basins", "GET", "basins", nil, "", 200},
		{"create basin", "POST", "basins", []string{"Content-Type", "application/json"}, `{"basin":"authbasin-new"}`, 201},
		{"get basin", "GET", "basins/authbasin-1", nil, "", 200},
		{"ensure basin", "PUT", "basins/authbasin-put", []string{"Content-Type", "application/json"}, `{}`, 201},
		{"reconfigure basin", "PATCH", "basins/authbasin-1", []string{"Content-Type", "application/json"}, `{}`, 200},
		{"delete basin", "DELETE", "basins/authbasin-del", nil, "", 202},
		{"list streams", "GET", "streams", b, "", 200},
		{"create stream", "POST", "streams", b, `{"stream":"in/created"}`, 201},
		{"get stream", "GET", "streams/in%2Fs", b, "", 200},
		{"ensure stream", "PUT", "streams/in%2Fput", b, `{}`, 201},
		{"reconfigure stream", "PATCH", "streams/in%2Fs", b, `{}`, 200},
		{"delete stream", "DELETE", "streams/in%2Fdel", b, "", 202},
		{"check tail", "GET", "streams/in%2Fs/records/tail", b, "", 200},
		{"append", "POST", "streams/in%2Fs/records", b, `{"records":[{"body":"x"}]}`, 200},
		{"append to a new name", "POST", "streams/in%2Fnew/records", b, `{"records":[{"body":"x"}]}`, 200},
		{"read", "GET", "streams/in%2Fs/records?seq_num=0", b, "", 200},
		{"read a new name", "GET", "streams/in%2Fnew-read/records?seq_num=0&wait=0", b, "", 416},
		{"list tokens", "GET", "access-tokens", nil, "", 200},
		{"issue token", "POST", "access-tokens", []string{"Content-Type", "application/json"}, `{"id":"in-issued","scope":{"basins":{"exact":"authbasin-1"},"op_groups":{"stream":{"read":true}}}}`, 201},
		{"revoke token", "DELETE", "access-tokens/in-victim", nil, "", 204},
	}
}

func TestAuthMatrix(t *testing.T) {
	t.Parallel()
	var clock tokenClock
	e := newEnv(t, withAuth, withServer(func(o *server.Options) { o.TokenClock = clock.now }))
	adm := bearer(testAdmin)
	setup := func() {
		for _, b := range []string{"authbasin-1", "authbasin-del", "authbasin-2"} {
			r := e.call("POST", "basins", jsonBody(map[string]any{"basin": b, "config": map[string]any{"create_stream_on_append": true, "create_stream_on_read": true}}), append(adm, "Content-Type", "application/json")...)
			want(t, r, 201, "")
		}
		for _, s := range []string{"in%2Fs", "in%2Fdel"} {
			want(t, e.stream("authbasin-1", "PUT", "streams/"+s, []byte(`{}`), adm...), 201, "")
		}
		want(t, e.appendJSON("authbasin-1", "in%2Fs", `{"records":[{"body":"first"}]}`, adm...), 200, "")
	}
	setup()
	full := map[string]any{"basins": map[string]string{"prefix": "authbasin-"}, "streams": map[string]string{"prefix": "in/"},
		"access_tokens": map[string]string{"prefix": "in-"}, "op_groups": map[string]any{
			"account": map[string]bool{"read": true, "write": true}, "basin": map[string]bool{"read": true, "write": true},
			"stream": map[string]bool{"read": true, "write": true}}}
	inScope := e.issue(map[string]any{"id": "in-scope", "scope": full})
	// Out of scope: every operation, but only on basins and streams and
	// token ids no endpoint names.
	out := map[string]any{"basins": map[string]string{"prefix": "zz"}, "streams": map[string]string{"exact": "elsewhere"},
		"access_tokens": map[string]string{"exact": "elsewhere"}, "ops": auth.AllOps}
	outScope := e.issue(map[string]any{"id": "out-scope", "scope": out})
	noOps := e.issue(map[string]any{"id": "no-ops", "scope": map[string]any{"basins": map[string]string{"prefix": ""}, "streams": map[string]string{"prefix": ""}, "access_tokens": map[string]string{"prefix": ""}}})
	expiring := e.issue(map[string]any{"id": "expiring", "scope": full, "expires_at": time.Now().Add(1500 * time.Millisecond).UTC().Format(time.RFC3339Nano)})
	revoked := e.issue(map[string]any{"id": "revoked", "scope": full})
	want(t, e.call("DELETE", "access-tokens/revoked", nil, adm...), 204, "")
	forged := "stl1." + strings.Repeat("A", 10) + "." + strings.Repeat("B", 43) // well-formed, never issued

	clock.advance(1600 * time.Millisecond) // "expiring" has expired
	basins := []string{"authbasin-1", "authbasin-del", "authbasin-2", "authbasin-new", "authbasin-put"}
	// The metastore is still while the refused requests run: the setup's
	// append has been absorbed (its span ref written).
	poll.Until(t, 10*time.Second, "the setup's append absorbed", func() bool { return strings.Contains(e.snapshot(basins...), "|r#") })
	for _, ep := range endpoints() {
		for _, c := range []struct {
			name   string
			hdr    []string
			status int
			code   string
		}{
			{"no token", nil, 401, auth.CodeAuthn},
			{"garbage token", bearer("nonsense"), 401, auth.CodeAuthn},
			{"forged token", bearer(forged), 401, auth.CodeAuthn},
			{"admin token with another scheme", []string{"Authorization", "Basic " + testAdmin}, 401, auth.CodeAuthn},
			{"expired", bearer(expiring), 401, auth.CodeAuthn},
			{"revoked", bearer(revoked), 401, auth.CodeAuthn},
			{"no operations", bearer(noOps), 403, auth.CodePermissionDenied},
			{"out of scope", bearer(outScope), 403, auth.CodePermissionDenied},
		} {
			if ep.name == "list basins" || ep.name == "list tokens" {
				if c.name == "out of scope" {
					continue // a listing is filtered, not refused: checked below
				}
			}
			before, leases := e.snapshot(basins...), e.leaseAcquisitions()
			var body []byte
			if ep.body != "" {
				body = []byte(ep.body)
			}
			r := e.call(ep.method, ep.path, body, append(slices.Clone(ep.headers), c.hdr...)...)
			if r.status != c.status || !strings.Contains(string(r.body), `"`+c.code+`"`) {
				t.Errorf("%s, %s: want %d %s, got %s", ep.name, c.name, c.status, c.code, r)
				continue
			}
			if after := e.snapshot(basins...); after != before {
				t.Errorf("%s, %s: the metastore changed:\nbefore:\n%s\nafter:\n%s", ep.name, c.name, before, after)
			}
			if l := e.leaseAcquisitions(); l != leases {
				t.Errorf("%s, %s: a lease was taken (%v → %v)", ep.name, c.name, leases, l)
			}
		}
	}
	// In scope: every endpoint does what it does.
	e.issue(map[string]any{"id": "in-victim", "scope": map[string]any{}})
	for _, ep := range endpoints() {
		var body []byte
		if ep.body != "" {
			body = []byte(ep.body)
		}
		r := e.call(ep.method, ep.path, body, append(slices.Clone(ep.headers), bearer(inScope)...)...)
		if r.status != ep.okStatus {
			t.Errorf("%s in scope: want %d, got %s", ep.name, ep.okStatus, r)
		}
	}
	// Listings show only what the scope holds.
	r := e.call("GET", "basins", nil, bearer(outScope)...)
	want(t, r, 200, "")
	if strings.Contains(string(r.body), "authbasin") {
		t.Errorf("an out-of-scope listing shows basins: %s", r)
	}
	r = e.call("GET", "access-tokens", nil, bearer(outScope)...)
	want(t, r, 200, "")
	if !strings.Contains(string(r.body), `"access_tokens":[]`) {
		t.Errorf("an out-of-scope token listing shows tokens: %s", r)
	}
	r = e.call("GET", "access-tokens", nil, bearer(inScope)...)
	if !strings.Contains(string(r.body), `"id":"in-scope"`) || strings.Contains(string(r.body), `"out-scope"`) {
		t.Errorf("an in-scope token listing: %s", r)
	}
	if strings.Contains(string(r.body), "hash") || strings.Contains(string(r.body), "stl1.") {
		t.Errorf("a token listing shows secrets: %s", r)
	}
}

// The metastore never holds a token, only its keyed hash.
func TestTokenRowHoldsNoSecret(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	tok := e.issue(map[string]any{"id": "secret-check", "scope": map[string]any{"ops": []string{"list-basins"}}})
	it, err := e.n.Meta().Get(context.Background(), meta.TokensPK, "secret-check")
	if err != nil {
		t.Fatal(err)
	}
	_, secret, _ := strings.Cut(strings.TrimPrefix(tok, "stl1."), ".")
	if strings.Contains(string(it.Val), secret) || strings.Contains(string(it.Val), tok) {
		t.Fatalf("the row holds the token: %s", it.Val)
	}
	want(t, e.call("GET", "basins", nil, bearer(tok)...), 200, "")
	// Same id, another secret: refused.
	other, _ := auth.NewToken("secret-check")
	want(t, e.call("GET", "basins", nil, bearer(other)...), 401, auth.CodeAuthn)
	// The id is taken: 409.
	r := e.call("POST", "access-tokens", jsonBody(map[string]any{"id": "secret-check", "scope": map[string]any{}}), bearer(testAdmin)...)
	want(t, r, 409, "resource_already_exists")
	want(t, e.call("DELETE", "access-tokens/nope", nil, bearer(testAdmin)...), 404, auth.CodeAccessTokenNotFound)
}

// A token issues only tokens within its own scope.
func TestIssueWithinScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	exp := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	parent := e.issue(map[string]any{"id": "team/parent", "expires_at": exp.Format(time.RFC3339),
		"scope": map[string]any{"basins": map[string]string{"exact": "authbasin-1"}, "streams": map[string]string{"prefix": "team/"},
			"access_tokens": map[string]string{"prefix": "team/"}, "ops": []string{"issue-access-token", "read", "append"}}})
	try := func(body map[string]any) resp {
		return e.call("POST", "access-tokens", jsonBody(body), append(bearer(parent), "Content-Type", "application/json")...)
	}
	narrow := map[string]any{"basins": map[string]string{"exact": "authbasin-1"}, "streams": map[string]string{"prefix": "team/a/"}, "ops": []string{"read"}}
	for name, c := range map[string]struct {
		body   map[string]any
		status int
	}{
		"within":          {map[string]any{"id": "team/child", "scope": narrow}, 201},
		"id outside":      {map[string]any{"id": "other/child", "scope": narrow}, 403},
		"wider streams":   {map[string]any{"id": "team/c2", "scope": map[string]any{"basins": map[string]string{"exact": "authbasin-1"}, "streams": map[string]string{"prefix": "te"}}}, 403},
		"other basin":     {map[string]any{"id": "team/c3", "scope": map[string]any{"basins": map[string]string{"prefix": "authbasin-"}}}, 403},
		"more ops":        {map[string]any{"id": "team/c4", "scope": map[string]any{"ops": []string{"delete-stream"}}}, 403},
		"more by group":   {map[string]any{"id": "team/c5", "scope": map[string]any{"op_groups": map[string]any{"stream": map[string]bool{"read": true}}}}, 403},
		"outlives parent": {map[string]any{"id": "team/c6", "scope": narrow, "expires_at": exp.Add(time.Minute).Format(time.RFC3339)}, 403},
		"auto prefix on an exact stream scope": {map[string]any{"id": "team/c7", "auto_prefix_streams": true,
			"scope": map[string]any{"streams": map[string]string{"exact": "team/x"}}}, 422},
		"unknown op":  {map[string]any{"id": "team/c8", "scope": map[string]any{"ops": []string{"launch-missiles"}}}, 400},
		"bad id":      {map[string]any{"id": "", "scope": map[string]any{}}, 422},
		"unknown key": {map[string]any{"id": "team/c9", "scope": map[string]any{"basin": map[string]string{"prefix": ""}}}, 400},
	} {
		if r := try(c.body); r.status != c.status {
			t.Errorf("%s: want %d, got %s", name, c.status, r)
		}
	}
	// The child took the parent's expiry.
	r := e.call("GET", "access-tokens?prefix=team/child", nil, bearer(testAdmin)...)
	if !strings.Contains(string(r.body), exp.Format(time.RFC3339)) {
		t.Errorf("the child's expiry: %s", r)
	}
}

// auto_prefix_streams rewrites stream names both ways.
func TestAutoPrefixStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	adm := bearer(testAdmin)
	want(t, e.call("POST", "basins", jsonBody(map[string]any{"basin": "authbasin-1", "config": map[string]any{"create_stream_on_append": true}}), adm...), 201, "")
	want(t, e.appendJSON("authbasin-1", "other", `{"records":[{"body":"not yours"}]}`, adm...), 200, "")
	tok := e.issue(map[string]any{"id": "tenant", "auto_prefix_streams": true, "scope": map[string]any{
		"basins": map[string]string{"exact": "authbasin-1"}, "streams": map[string]string{"prefix": "tenant-1/"},
		"op_groups": map[string]any{"stream": map[string]bool{"read": true, "write": true}}}})
	tb := bearer(tok)
	want(t, e.appendJSON("authbasin-1", "events", `{"records":[{"body":"mine"}]}`, tb...), 200, "")
	want(t, e.stream("authbasin-1", "POST", "streams", []byte(`{"stream":"made"}`), tb...), 201, "")
	// The admin sees the stored names.
	r := e.stream("authbasin-1", "GET", "streams", nil, adm...)
	for _, n := range []string{`"tenant-1/events"`, `"tenant-1/made"`, `"other"`} {
		if !strings.Contains(string(r.body), n) {
			t.Errorf("admin listing lacks %s: %s", n, r)
		}
	}
	// The tenant sees its names, stripped, and nothing else.
	r = e.stream("authbasin-1", "GET", "streams", nil, tb...)
	if !strings.Contains(string(r.body), `"name":"events"`) || !strings.Contains(string(r.body), `"name":"made"`) ||
		strings.Contains(string(r.body), "tenant-1/") || strings.Contains(string(r.body), `"other"`) {
		t.Errorf("tenant listing: %s", r)
	}
	r = e.stream("authbasin-1", "GET", "streams?prefix=ev", nil, tb...)
	if !strings.Contains(string(r.body), `"name":"events"`) || strings.Contains(string(r.body), "made") {
		t.Errorf("tenant listing by prefix: %s", r)
	}
	r = e.stream("authbasin-1", "GET", "streams/events/records?seq_num=0", nil, tb...)
	if r.status != 200 || !strings.Contains(string(r.body), "mine") {
		t.Errorf("tenant read: %s", r)
	}
	// An error names the stream as the tenant does.
	r = e.stream("authbasin-1", "GET", "streams/missing", nil, tb...)
	if r.status != 404 || strings.Contains(string(r.body), "tenant-1/") {
		t.Errorf("tenant 404: %s", r)
	}
}

// Trim and fence command records need their own operations.
func TestCommandRecordsNeedTheirOps(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	want(t, e.call("POST", "basins", jsonBody(map[string]any{"basin": "authbasin-1", "config": map[string]any{"create_stream_on_append": true}}), bearer(testAdmin)...), 201, "")
	appendOnly := e.issue(map[string]any{"id": "append-only", "scope": map[string]any{"basins": map[string]string{"prefix": ""},
		"streams": map[string]string{"prefix": ""}, "ops": []string{"append", "read"}}})
	fencer := e.issue(map[string]any{"id": "fencer", "scope": map[string]any{"basins": map[string]string{"prefix": ""},
		"streams": map[string]string{"prefix": ""}, "ops": []string{"append", "fence"}}})
	fence := `{"records":[{"headers":[["","fence"]],"body":"w1"}]}`
	trim := `{"records":[{"headers":[["","dHJpbQ=="]],"body":"AAAAAAAAAAE="}]}` // base64: "trim", seq 1
	want(t, e.appendJSON("authbasin-1", "s", `{"records":[{"body":"a"}]}`, bearer(appendOnly)...), 200, "")
	tail := func() string {
		return string(e.stream("authbasin-1", "GET", "streams/s/records/tail", nil, bearer(testAdmin)...).body)
	}
	before := tail()
	want(t, e.appendJSON("authbasin-1", "s", fence, bearer(appendOnly)...), 403, auth.CodePermissionDenied)
	want(t, e.appendJSON("authbasin-1", "s", trim, append(bearer(appendOnly), "s2-format", "base64")...), 403, auth.CodePermissionDenied)
	if after := tail(); after != before {
		t.Fatalf("a refused command record was appended: %v → %v", before, after)
	}
	want(t, e.appendJSON("authbasin-1", "s", fence, bearer(fencer)...), 200, "")
}

// Admin paths need the internal credential; a client token, even the
// admin's, is refused, and Starlog-Forwarded-By without the credential is
// ignored.
func TestInternalPaths(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	cred, err := auth.InternalCredential([]byte(testKey))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		method, path string
	}{{"GET", "/v1/starlog/drain"}, {"POST", "/v1/starlog/drain"}, {"POST", "/v1/starlog/settle"}, {"POST", "/v1/starlog/streams/s/handoff"},
		{"GET", server.DurableKeysPath}, {"POST", server.DurableRotatePath}, {"GET", server.StatusPath}, {"POST", server.KafkaPath}} {
		want(t, e.call(c.method, c.path, nil), 401, auth.CodeAuthn)
		want(t, e.call(c.method, c.path, nil, bearer(testAdmin)...), 403, auth.CodePermissionDenied)
		want(t, e.call(c.method, c.path, nil, auth.HeaderInternal, "wrong"), 401, auth.CodeAuthn)
	}
	if e.n.DrainStatus().Draining {
		t.Fatal("a refused drain drained the star")
	}
	want(t, e.call("GET", "/v1/starlog/drain", nil, auth.HeaderInternal, cred), 200, "")
	// The credential does not stand in for a client token on S2's API.
	want(t, e.call("GET", "basins", nil, auth.HeaderInternal, cred), 401, auth.CodeAuthn)
	// Health stays open for load balancers.
	want(t, e.call("GET", "/health", nil), 200, "")
}

// A revocation on one star is honoured by another sharing the metastore
// within the stated bound (TokenCacheTTL plus a read), and at once by the
// star that revoked.
func TestRevocationAcrossStars(t *testing.T) {
	t.Parallel()
	ms := testsvc.SQLite(t)
	start := func(id string) *env {
		objs := memObjects(t)
		cfg := node.Defaults()
		cfg.StarID = id
		n, err := node.Open(context.Background(), cfg, node.Deps{Meta: ms, Objects: objs, Logger: testLog()})
		if err != nil {
			t.Fatal(err)
		}
		srv, err := server.New(n, server.Options{Auth: auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}})
		if err != nil {
			t.Fatal(err)
		}
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := srv.HTTPServer(ln.Addr().String())
		go hs.Serve(ln)
		e := &env{t: t, n: n, srv: srv, hs: hs, base: "http://" + ln.Addr().String(), h1: &http.Client{Timeout: 10 * time.Second}}
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			hs.Shutdown(ctx)
			n.Close(ctx)
		})
		return e
	}
	a, b := start("star-a"), start("star-b")
	tok := a.issue(map[string]any{"id": "roaming", "scope": map[string]any{"ops": []string{"list-basins"}}})
	// Both stars have verified (and cached) it.
	want(t, a.call("GET", "basins", nil, bearer(tok)...), 200, "")
	want(t, b.call("GET", "basins", nil, bearer(tok)...), 200, "")
	revokedAt := time.Now()
	want(t, a.call("DELETE", "access-tokens/roaming", nil, bearer(testAdmin)...), 204, "")
	want(t, a.call("GET", "basins", nil, bearer(tok)...), 401, auth.CodeAuthn) // at once on the revoking star
	poll.UntilErr(t, 5*time.Second, "star b to refuse the revoked token", func() error {
		if r := b.call("GET", "basins", nil, bearer(tok)...); r.status != 401 {
			return fmt.Errorf("%s", r)
		}
		return nil
	})
	took := time.Since(revokedAt)
	t.Logf("star b refused the revoked token %v after the revocation (cache TTL %v)", took.Round(time.Millisecond), server.TokenCacheTTL)
	if took > server.TokenCacheTTL+time.Second {
		t.Errorf("revocation took %v on the other star, more than the cache TTL %v + 1 s", took, server.TokenCacheTTL)
	}
}

// A production server cannot be built without credentials.
func TestServerNeedsAnAuthority(t *testing.T) {
	t.Parallel()
	objs, _ := mem.New("standard", "express-a", "express-b", "express-c")
	n, err := node.Open(context.Background(), node.Defaults(), node.Deps{Meta: testsvc.SQLite(t), Objects: objs, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close(context.Background()) })
	for _, c := range []auth.Config{{}, {AdminToken: testAdmin}, {InternalKey: []byte(testKey)}, {AdminToken: "short", InternalKey: []byte(testKey)}, {AdminToken: testAdmin, InternalKey: []byte("short")}} {
		if _, err := server.New(n, server.Options{Auth: c}); err == nil {
			t.Errorf("server.New with %+v: no error", c)
		}
	}
}

// A forwarded request is authorized again by the leader as the client
// (auto_prefix_streams applied once, by the star serving it); a token out
// of scope is refused by the first star, before any forward; and
// Starlog-Forwarded-By without the internal credential is ignored (the
// star forwards as usual rather than answering as the leader).
func TestForwardedRequestsAreAuthorized(t *testing.T) {
	t.Parallel()
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	ac := auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}
	a := starAuthed(t, "a", ms, objs, nil, ac)
	b := starAuthed(t, "b", ms, objs, nil, ac)
	adm := bearer(testAdmin)
	want(t, a.call("POST", "basins", jsonBody(map[string]any{"basin": "fwd-basin", "config": map[string]any{"create_stream_on_append": true}}), adm...), 201, "")
	tenant := a.issue(map[string]any{"id": "tenant", "auto_prefix_streams": true, "scope": map[string]any{
		"basins": map[string]string{"exact": "fwd-basin"}, "streams": map[string]string{"prefix": "t/"}, "ops": []string{"append", "read", "check-tail"}}})
	other := a.issue(map[string]any{"id": "other", "scope": map[string]any{
		"basins": map[string]string{"exact": "fwd-basin"}, "streams": map[string]string{"prefix": "u/"}, "ops": []string{"append"}}})
	want(t, a.appendJSON("fwd-basin", "x", textRecords("a", 1), bearer(tenant)...), 200, "") // a leads t/x
	r := b.appendJSON("fwd-basin", "x", textRecords("b", 2), bearer(tenant)...)              // forwarded to a
	want(t, r, 200, "")
	if ack, err := api.DecodeAppendAckJSON(r.body); err != nil || ack.End.SeqNum != 3 {
		t.Fatalf("forwarded tenant append: %s", r)
	}
	if tail := b.stream("fwd-basin", "GET", "streams/t%2Fx/records/tail", nil, adm...); !strings.Contains(string(tail.body), `"seq_num":3`) {
		t.Fatalf("t/x after the forward: %s", tail)
	}
	if r := a.stream("fwd-basin", "GET", "streams?prefix=t%2Ft", nil, adm...); strings.Contains(string(r.body), "t/t/") {
		t.Fatalf("the prefix was applied twice: %s", r)
	}
	want(t, b.appendJSON("fwd-basin", "t%2Fx", textRecords("o", 1), bearer(other)...), 403, auth.CodePermissionDenied)
	want(t, b.appendJSON("fwd-basin", "x", textRecords("n", 1)), 401, auth.CodeAuthn)
	// A client posing as a peer: b ignores the header and forwards.
	r = b.appendJSON("fwd-basin", "t%2Fx", textRecords("p", 1), append(adm, server.HeaderForwardedBy, "evil")...)
	want(t, r, 200, "")
	if tail := a.stream("fwd-basin", "GET", "streams/t%2Fx/records/tail", nil, adm...); !strings.Contains(string(tail.body), `"seq_num":4`) {
		t.Fatalf("t/x after the posing append: %s", tail)
	}
}

// Through a metastore outage a star keeps accepting the tokens it
// verified lately (TokenStaleIfError), so clients are not turned away;
// a token it never verified gets a retryable 503, not a 401.
func TestTokensThroughMetastoreOutage(t *testing.T) {
	t.Parallel()
	objs := memObjects(t)
	fm := mfaults.New(testsvc.SQLite(t), 1)
	t.Cleanup(func() { fm.SetUnavailable(false) })
	var clock tokenClock
	e := starServing(t, "a", fm, objs, nil, server.Options{Auth: auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}, TokenClock: clock.now})
	known := e.issue(map[string]any{"id": "known", "scope": map[string]any{"ops": []string{"list-basins"}}})
	unseen := e.issue(map[string]any{"id": "unseen", "scope": map[string]any{"ops": []string{"list-basins"}}})
	want(t, e.call("GET", "basins", nil, bearer(known)...), 200, "")
	fm.SetUnavailable(true)
	clock.advance(server.TokenCacheTTL + 100*time.Millisecond) // the cached check is stale
	r := e.call("GET", "/v1/starlog/drain", nil, bearer(known)...)
	want(t, r, 403, auth.CodePermissionDenied) // authenticated from the stale entry, then refused as a client token
	want(t, e.call("GET", "basins", nil, bearer(unseen)...), 503, "unavailable")
	fm.SetUnavailable(false)
	want(t, e.call("GET", "basins", nil, bearer(unseen)...), 200, "")
}

// A listing under an exact set shows that one name, however many names
// extend it, and says there is no more.
func TestListingsUnderExactSets(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	for _, b := range []string{"authbasin-1", "authbasin-10", "authbasin-11"} {
		want(t, e.call("POST", "basins", jsonBody(map[string]any{"basin": b}), bearer(testAdmin)...), 201, "")
	}
	for _, s := range []string{"s", "s1", "s2"} {
		want(t, e.stream("authbasin-1", "PUT", "streams/"+s, []byte(`{}`), bearer(testAdmin)...), 201, "")
	}
	tok := e.issue(map[string]any{"id": "exact", "scope": map[string]any{"basins": map[string]string{"exact": "authbasin-1"},
		"streams": map[string]string{"exact": "s"}, "access_tokens": map[string]string{"exact": "exact"},
		"ops": []string{"list-basins", "list-streams", "list-access-tokens"}}})
	e.issue(map[string]any{"id": "exact-2", "scope": map[string]any{}})
	for path, w := range map[string]string{
		"basins?limit=1":        `{"basins":[{"name":"authbasin-1",`,
		"access-tokens?limit=1": `{"access_tokens":[{"id":"exact",`,
	} {
		r := e.call("GET", path, nil, bearer(tok)...)
		if !strings.HasPrefix(string(r.body), w) || !strings.HasSuffix(string(r.body), `"has_more":false}`) || strings.Count(string(r.body), `"name"`)+strings.Count(string(r.body), `"id"`) != 1 {
			t.Errorf("%s: %s", path, r)
		}
	}
	r := e.stream("authbasin-1", "GET", "streams?limit=1", nil, bearer(tok)...)
	if !strings.HasPrefix(string(r.body), `{"streams":[{"name":"s",`) || !strings.HasSuffix(string(r.body), `"has_more":false}`) {
		t.Errorf("streams: %s", r)
	}
}
