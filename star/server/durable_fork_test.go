package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// dsBasin is the Durable Streams face's basin (the default).
const dsBasin = durable.DefaultBasin

// durableStar is one star of a cluster sharing ms and objs serving the
// Durable Streams face at /ds, authenticating with ac. The balancer is
// off, so a stream stays with the star that took it.
func durableStar(t *testing.T, id string, ms meta.Store, objs objstore.Store, ac auth.Config, tweaks ...func(*node.Config)) *env {
	t.Helper()
	return durableStarOn(t, id, ms, objs, ac, nil, tweaks...)
}

// durableStarOn is durableStar with the face's clock (durable.Config.Clock;
// nil: time.Now): the streams' expiry runs on it.
func durableStarOn(t *testing.T, id string, ms meta.Store, objs objstore.Store, ac auth.Config, clock func() time.Time, tweaks ...func(*node.Config)) *env {
	t.Helper()
	tweak := func(c *node.Config) {
		c.BalanceEvery = 0
		for _, f := range tweaks {
			f(c)
		}
	}
	return starServing(t, id, ms, objs, tweak, server.Options{Auth: ac, Durable: &durable.Config{LongPoll: time.Second, Clock: clock}})
}

func durablePair(t *testing.T, ac auth.Config) (a, b *env) {
	t.Helper()
	return durablePairOn(t, ac, nil)
}

// durablePairOn is durablePair with both faces on one clock.
func durablePairOn(t *testing.T, ac auth.Config, clock func() time.Time) (a, b *env) {
	t.Helper()
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	return durableStarOn(t, "a", ms, objs, ac, clock), durableStarOn(t, "b", ms, objs, ac, clock)
}

// ds sends a Durable Streams request for path (under /ds/).
func (e *env) ds(method, path, body string, headers ...string) resp {
	e.t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	return e.do(e.h1, method, "/ds/"+path, b, headers...)
}

func dsOffset(seq uint64) string { return fmt.Sprintf("%016d_%016d", seq, 0) }

// dsReadAll reads a stream from the start to its tail through e: the
// bytes of a bytes-mode stream, or the messages of a JSON one (joined
// with commas), and the final Stream-Next-Offset.
func dsReadAll(t *testing.T, e *env, name string) (string, string) {
	t.Helper()
	off := "-1"
	var out []string
	for range 100 {
		r := e.ds("GET", name+"?offset="+off, "")
		want(t, r, 200, "")
		if strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
			var msgs []json.RawMessage
			if err := json.Unmarshal(r.body, &msgs); err != nil {
				t.Fatalf("read %s: %v (%s)", name, err, truncate(r.body))
			}
			for _, m := range msgs {
				out = append(out, string(m))
			}
		} else {
			out = append(out, string(r.body))
		}
		off = r.header.Get("Stream-Next-Offset")
		if r.header.Get("Stream-Up-To-Date") == "true" {
			if strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
				return strings.Join(out, ","), off
			}
			return strings.Join(out, ""), off
		}
	}
	t.Fatalf("read %s: not up to date after 100 reads", name)
	return "", ""
}

// leaderOf names the star leading a Durable Streams stream, as e sees it
// ("" when e leads it or nobody does).
func leaderOf(e *env, name string) string {
	if nl := e.n.LeaderOf(context.Background(), dsBasin, name); nl != nil {
		return nl.Leader.Star
	}
	return ""
}

// A fork PUT served by star b of a source star a leads reads the source
// through a (the peer read), at the tail, at a middle offset, with a
// sub-offset in bytes and JSON mode (across more than one read batch),
// and of a closed source: each fork holds exactly the source's records
// up to the fork point, then its own appends. The source stays led by a.
func TestDurableForkOfRemoteSource(t *testing.T) {
	t.Parallel()
	a, b := durablePair(t, auth.Open())

	want(t, a.ds("PUT", "src", "", "Content-Type", "text/plain"), 201, "")
	for _, s := range []string{"alpha", "beta", "gamma", "delta"} {
		want(t, a.ds("POST", "src", s, "Content-Type", "text/plain"), 204, "")
	}
	// JSON: two batches of 600 messages (past one 1,000-record read),
	// then one more.
	want(t, a.ds("PUT", "jsrc", "", "Content-Type", "application/json"), 201, "")
	var all []string
	for batch := range 2 {
		var msgs []string
		for i := range 600 {
			msgs = append(msgs, strconv.Itoa(batch*600+i))
		}
		all = append(all, msgs...)
		want(t, a.ds("POST", "jsrc", "["+strings.Join(msgs, ",")+"]", "Content-Type", "application/json"), 204, "")
	}
	want(t, a.ds("POST", "jsrc", `{"a":1}`, "Content-Type", "application/json"), 204, "")
	all = append(all, `{"a":1}`)
	// Bytes: three appends of 1,000,000 bytes, one record per 1 MiB read.
	want(t, a.ds("PUT", "bsrc", "", "Content-Type", "application/octet-stream"), 201, "")
	var big []string
	for i := range 3 {
		body := strings.Repeat(string(rune('a'+i)), 1_000_000)
		big = append(big, body)
		want(t, a.ds("POST", "bsrc", body, "Content-Type", "application/octet-stream"), 204, "")
	}
	want(t, a.ds("PUT", "csrc", "", "Content-Type", "text/plain"), 201, "")
	want(t, a.ds("POST", "csrc", "c1", "Content-Type", "text/plain"), 204, "")
	want(t, a.ds("POST", "csrc", "c2", "Content-Type", "text/plain", "Stream-Closed", "true"), 204, "")
	for _, src := range []string{"src", "jsrc", "bsrc", "csrc"} {
		if l := leaderOf(b, src); l != "a" {
			t.Fatalf("b sees %s led by %q, want a", src, l)
		}
	}

	for _, c := range []struct {
		name, src, ct string
		hdr           []string
		next          uint64 // the fork's tail when created
		then          string // appended to the fork
		want          string // the fork read whole
	}{
		{"f-tail", "src", "text/plain", nil, 4, "+x", "alphabetagammadelta+x"},
		{"f-mid", "src", "text/plain", []string{"Stream-Fork-Offset", dsOffset(2)}, 2, "+y", "alphabeta+y"},
		{"f-sub", "src", "text/plain", []string{"Stream-Fork-Offset", dsOffset(2), "Stream-Fork-Sub-Offset", "3"}, 3, "+z", "alphabetagam+z"},
		{"f-json-tail", "jsrc", "application/json", nil, 1201, `"end"`, strings.Join(all, ",") + `,"end"`},
		{"f-json-sub", "jsrc", "application/json", []string{"Stream-Fork-Offset", dsOffset(600), "Stream-Fork-Sub-Offset", "2"}, 602, `"more"`,
			strings.Join(all[:602], ",") + `,"more"`},
		{"f-big", "bsrc", "application/octet-stream", []string{"Stream-Fork-Offset", dsOffset(2), "Stream-Fork-Sub-Offset", "10"}, 3, "!",
			big[0] + big[1] + big[2][:10] + "!"},
		{"f-closed", "csrc", "text/plain", nil, 3, "c3", "c1c2c3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			hdr := append([]string{"Stream-Forked-From", "/ds/" + c.src, "Content-Type", c.ct}, c.hdr...)
			r := b.ds("PUT", c.name, "", hdr...)
			want(t, r, 201, "")
			if got := r.header.Get("Stream-Next-Offset"); got != dsOffset(c.next) {
				t.Fatalf("fork's next offset %s, want %s", got, dsOffset(c.next))
			}
			// The same PUT again is the same fork: 200.
			want(t, b.ds("PUT", c.name, "", hdr...), 200, "")
			want(t, b.ds("POST", c.name, c.then, "Content-Type", c.ct), 204, "")
			if got, _ := dsReadAll(t, b, c.name); got != c.want {
				t.Fatalf("fork %s reads %d bytes %.200q, want %d %.200q", c.name, len(got), got, len(c.want), c.want)
			}
			if got, _ := dsReadAll(t, a, c.name); got != c.want {
				t.Fatalf("fork %s through a reads %d bytes %.200q, want %d %.200q", c.name, len(got), got, len(c.want), c.want)
			}
			if l := leaderOf(a, c.name); l != "b" {
				t.Fatalf("a sees the fork led by %q, want b", l)
			}
		})
	}
	if got, _ := dsReadAll(t, b, "src"); got != "alphabetagammadelta" {
		t.Fatalf("source reads %q after the forks", got)
	}
	if n := metricValue(t, a, `starlog_durable_requests_total{op="peer",status="200"}`); n == 0 {
		t.Fatal("a served no peer operation: the forks did not read through it")
	}
	for _, src := range []string{"src", "jsrc", "bsrc", "csrc"} {
		if l := leaderOf(b, src); l != "a" {
			t.Fatalf("after the forks b sees %s led by %q, want a", src, l)
		}
	}
	// Past the source's tail is 400, and past the next append's end with a
	// sub-offset too, through the peer read; so is a sub-offset at the tail
	// (the peer read's 416 comes back as the node's).
	want(t, b.ds("PUT", "f-past", "", "Stream-Forked-From", "/ds/src", "Content-Type", "text/plain", "Stream-Fork-Offset", dsOffset(5)), 400, "")
	want(t, b.ds("PUT", "f-past", "", "Stream-Forked-From", "/ds/src", "Content-Type", "text/plain",
		"Stream-Fork-Offset", dsOffset(3), "Stream-Fork-Sub-Offset", "6"), 400, "")
	want(t, b.ds("PUT", "f-past", "", "Stream-Forked-From", "/ds/src", "Content-Type", "text/plain",
		"Stream-Fork-Offset", dsOffset(4), "Stream-Fork-Sub-Offset", "1"), 400, "")
	want(t, b.ds("GET", "f-past?offset=-1", ""), 404, "")
}

// A fork's peer read that reaches a star the source has just left (b
// still remembers a as its leader) is refused there as not the leader,
// and b's forwarder resolves the lease again and reads from the new
// leader, c: the fork is created, with the source's records.
func TestDurableForkFollowsSourceHandoff(t *testing.T) {
	t.Parallel()
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	// b trusts what it remembers of the lease long enough to ask a again.
	remember := func(c *node.Config) { c.LeaseCacheTTL = time.Minute }
	a := durableStar(t, "a", ms, objs, auth.Open(), remember)
	b := durableStar(t, "b", ms, objs, auth.Open(), remember)
	durableStar(t, "c", ms, objs, auth.Open(), remember)
	want(t, a.ds("PUT", "src", "", "Content-Type", "text/plain"), 201, "")
	want(t, a.ds("POST", "src", "one", "Content-Type", "text/plain"), 204, "")
	want(t, b.ds("PUT", "fork-1", "", "Stream-Forked-From", "/ds/src", "Content-Type", "text/plain"), 201, "")
	if l := leaderOf(b, "src"); l != "a" {
		t.Fatalf("b sees src led by %q, want a", l)
	}
	if _, err := a.n.Handoff(context.Background(), dsBasin, "src", "c"); err != nil {
		t.Fatal(err)
	}
	before := metricValue(t, b, `starlog_http_forwarded_total{result="retried"}`)
	want(t, b.ds("PUT", "fork-2", "", "Stream-Forked-From", "/ds/src", "Content-Type", "text/plain"), 201, "")
	if got, _ := dsReadAll(t, b, "fork-2"); got != "one" {
		t.Fatalf("fork-2 reads %q", got)
	}
	if after := metricValue(t, b, `starlog_http_forwarded_total{result="retried"}`); after == before {
		t.Fatal("no forward was retried: the test did not reach a after the handoff")
	}
	if l := leaderOf(b, "src"); l != "c" {
		t.Fatalf("b sees src led by %q after the handoff, want c", l)
	}
}

// Deleting the last fork (led by b) of a soft-deleted source (led by a)
// deletes the source's starlog stream on a, the star that holds it open:
// the path created again on a is a new, empty stream.
func TestDurableForkDeleteCascadesToRemoteSource(t *testing.T) {
	t.Parallel()
	a, b := durablePair(t, auth.Open())
	want(t, a.ds("PUT", "src", "", "Content-Type", "text/plain"), 201, "")
	want(t, a.ds("POST", "src", "old", "Content-Type", "text/plain"), 204, "")
	want(t, b.ds("PUT", "fork", "", "Stream-Forked-From", "/ds/src", "Content-Type", "text/plain"), 201, "")
	if l := leaderOf(b, "src"); l != "a" {
		t.Fatalf("b sees src led by %q, want a", l)
	}
	want(t, a.ds("DELETE", "src", ""), 204, "")
	want(t, a.ds("GET", "src?offset=-1", ""), 410, "")
	want(t, b.ds("DELETE", "fork", ""), 204, "")
	want(t, a.ds("GET", "src?offset=-1", ""), 404, "")

	r := a.ds("PUT", "src", "", "Content-Type", "text/plain")
	want(t, r, 201, "")
	if got := r.header.Get("Stream-Next-Offset"); got != dsOffset(0) {
		t.Fatalf("src created again at %s, want an empty stream", got)
	}
	if got, _ := dsReadAll(t, b, "src"); got != "" {
		t.Fatalf("src created again reads %q, want nothing", got)
	}
}

// Expiry across stars. A source led by another star past its absolute
// expiry is removed (on the star that holds it open) and the fork is 404.
// A sliding TTL is judged by the stream's leader, which saw its reads: a
// source (led by a) that a saw read within its window can be forked
// through b, and a fork (led by b) that b saw read within its window is
// live when a deletes its source (soft deletion), whatever the other
// star's own view of the window. Both stars' faces run on one clock that
// the test moves.
func TestDurableForkOfRemoteExpiredSource(t *testing.T) {
	t.Parallel()
	clock := newStepClock()
	a, b := durablePairOn(t, auth.Open(), clock.now)

	at := clock.now().Add(time.Second).UTC().Format(time.RFC3339Nano)
	want(t, a.ds("PUT", "gone", "", "Content-Type", "text/plain", "Stream-Expires-At", at), 201, "")
	want(t, a.ds("POST", "gone", "old", "Content-Type", "text/plain"), 204, "")
	clock.advance(1200 * time.Millisecond)
	want(t, b.ds("PUT", "fork-gone", "", "Stream-Forked-From", "/ds/gone", "Content-Type", "text/plain"), 404, "")
	r := a.ds("PUT", "gone", "", "Content-Type", "text/plain")
	want(t, r, 201, "")
	if got := r.header.Get("Stream-Next-Offset"); got != dsOffset(0) {
		t.Fatalf("gone created again at %s, want an empty stream", got)
	}

	// TTL 2 s: read through their leaders at 1.5 s; at 2.5 s the star
	// that never saw the read would call them expired, the leader (1 s
	// since the read) does not.
	want(t, a.ds("PUT", "ttl", "", "Content-Type", "text/plain", "Stream-TTL", "2"), 201, "")
	want(t, a.ds("POST", "ttl", "kept", "Content-Type", "text/plain"), 204, "")
	want(t, a.ds("PUT", "src", "", "Content-Type", "text/plain"), 201, "")
	want(t, a.ds("POST", "src", "s", "Content-Type", "text/plain"), 204, "")
	want(t, b.ds("PUT", "fork-ttl-2", "", "Stream-Forked-From", "/ds/src", "Content-Type", "text/plain", "Stream-TTL", "2"), 201, "")
	clock.advance(1500 * time.Millisecond)
	want(t, b.ds("GET", "ttl?offset=-1", ""), 200, "")        // forwarded to a
	want(t, a.ds("GET", "fork-ttl-2?offset=-1", ""), 200, "") // forwarded to b
	clock.advance(time.Second)
	want(t, b.ds("PUT", "fork-ttl", "", "Stream-Forked-From", "/ds/ttl", "Content-Type", "text/plain"), 201, "")
	if got, _ := dsReadAll(t, b, "fork-ttl"); got != "kept" {
		t.Fatalf("fork of the TTL source reads %q", got)
	}
	want(t, a.ds("DELETE", "src", ""), 204, "")
	want(t, a.ds("GET", "src?offset=-1", ""), 410, "") // soft-deleted: its fork lives
	if got, _ := dsReadAll(t, a, "fork-ttl-2"); got != "s" {
		t.Fatalf("the TTL fork reads %q", got)
	}
}

// The peer operations answer raw records (and delete starlog streams):
// a client never reaches them, whatever it holds — on an open star, with
// the admin token on an authenticating one, with the handler's
// server-request header, or through another star. Only a request that
// carries the stars' internal credential does (as a fork's read of a
// source led elsewhere does: it works on an authenticating cluster).
func TestDurablePeerOpIsServerOnly(t *testing.T) {
	t.Parallel()
	const secret = "raw-secret-record"
	check := func(t *testing.T, e *env, status int, headers ...string) {
		t.Helper()
		for _, c := range []struct{ method, query string }{
			{"GET", "starlog-peer=records&seq_num=0"},
			{"GET", "starlog-peer=tail"},
			{"DELETE", "starlog-peer=stream"},
			{"GET", "offset=-1&starlog-peer=records"},
		} {
			r := e.ds(c.method, "src?"+c.query, "", headers...)
			if r.status != status || strings.Contains(string(r.body), secret) {
				t.Fatalf("%s ?%s with %q: %s, want %d without records", c.method, c.query, headers, r, status)
			}
		}
	}

	t.Run("open", func(t *testing.T) {
		a, b := durablePair(t, auth.Open())
		want(t, a.ds("PUT", "src", "", "Content-Type", "text/plain"), 201, "")
		want(t, a.ds("POST", "src", secret, "Content-Type", "text/plain"), 204, "")
		check(t, a, 400)
		check(t, b, 400) // refused before it is forwarded to a
		check(t, a, 400, "Authorization", "Bearer anything")
		if got, _ := dsReadAll(t, a, "src"); got != secret {
			t.Fatalf("src reads %q after the refused peer operations", got)
		}
	})

	t.Run("authenticated", func(t *testing.T) {
		a, b := durablePair(t, auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)})
		adm := bearer(testAdmin)
		want(t, a.ds("PUT", "src", "", append(adm, "Content-Type", "text/plain")...), 201, "")
		want(t, a.ds("POST", "src", secret, append(adm, "Content-Type", "text/plain")...), 204, "")
		check(t, a, 400, adm...)
		check(t, b, 400, adm...)
		check(t, a, 400, append(adm, durable.HeaderServerRequest, "1")...)
		check(t, a, 400, append(adm, durable.HeaderServerRequest, "1", auth.HeaderInternal, "not-the-credential")...)
		check(t, a, 401, durable.HeaderServerRequest, "1", auth.HeaderInternal, "not-the-credential")

		// A star's request (the internal credential) is served.
		cred, err := auth.InternalCredential([]byte(testKey))
		if err != nil {
			t.Fatal(err)
		}
		r := a.ds("GET", "src?starlog-peer=records&seq_num=0", "", durable.HeaderServerRequest, "1", auth.HeaderInternal, cred)
		if r.status != 200 || !strings.Contains(string(r.body), secret) {
			t.Fatalf("the peer read of a star: %s", r)
		}

		// And a fork through b of the source a leads reads it through a.
		if l := leaderOf(b, "src"); l != "a" {
			t.Fatalf("b sees src led by %q, want a", l)
		}
		want(t, b.ds("PUT", "fork", "", append(adm, "Stream-Forked-From", "/ds/src", "Content-Type", "text/plain")...), 201, "")
		r = b.ds("GET", "fork?offset=-1", "", adm...)
		if r.status != 200 || string(r.body) != secret {
			t.Fatalf("fork through b: %s", r)
		}
	})
}

// Deleting a source whose only fork expired unseen removes the fork
// (releasing the source's row) and then the source: 204, and it is gone.
func TestDurableDeleteSourceWhoseForkExpired(t *testing.T) {
	t.Parallel()
	var clock tokenClock
	objs := memObjects(t)
	a := durableStarOn(t, "a", testsvc.SQLite(t), objs, auth.Open(), clock.now)
	want(t, a.ds("PUT", "src", "", "Content-Type", "text/plain"), 201, "")
	want(t, a.ds("POST", "src", "s", "Content-Type", "text/plain"), 204, "")
	want(t, a.ds("PUT", "fork", "", "Stream-Forked-From", "/ds/src", "Content-Type", "text/plain", "Stream-TTL", "1"), 201, "")
	clock.advance(1200 * time.Millisecond)
	want(t, a.ds("DELETE", "src", ""), 204, "")
	want(t, a.ds("GET", "src?offset=-1", ""), 404, "")
	want(t, a.ds("GET", "fork?offset=-1", ""), 404, "")
}

// The handler's server-request header from a client is not the server's:
// a star drops it before forwarding (where it would travel with the
// internal credential and act as the admin, outside the token's scope and
// without its stream prefix).
func TestDurableServerRequestHeaderFromClient(t *testing.T) {
	t.Parallel()
	a, b := durablePair(t, auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)})
	adm := bearer(testAdmin)
	tenant := bearer(a.issue(map[string]any{"id": "tenant", "auto_prefix_streams": true, "scope": map[string]any{
		"basins": map[string]string{"exact": dsBasin}, "streams": map[string]string{"prefix": "t/"},
		"ops": []string{"create-stream", "append", "read", "check-tail"}}}))
	want(t, a.ds("PUT", "x", "", append(tenant, "Content-Type", "text/plain")...), 201, "") // t/x, led by a
	want(t, a.ds("POST", "x", "mine", append(tenant, "Content-Type", "text/plain")...), 204, "")
	want(t, a.ds("PUT", "x", "", append(adm, "Content-Type", "text/plain")...), 201, "") // x, the admin's
	want(t, a.ds("POST", "x", "admin-only", append(adm, "Content-Type", "text/plain")...), 204, "")
	if l := leaderOf(b, "t/x"); l != "a" {
		t.Fatalf("b sees t/x led by %q, want a", l)
	}
	r := b.ds("GET", "x?offset=-1", "", append(tenant, durable.HeaderServerRequest, "1")...)
	if r.status != 200 || string(r.body) != "mine" {
		t.Fatalf("the tenant's read through b with the server-request header: %s, want its own t/x", r)
	}
}

// stepClock stands still until advanced: the TTL windows a test measures
// on it do not stretch with the real time a loaded machine takes between
// the test's steps (tokenClock runs with real time).
type stepClock struct{ at atomic.Int64 }

func newStepClock() *stepClock {
	c := &stepClock{}
	c.at.Store(time.Now().UnixNano())
	return c
}

func (c *stepClock) now() time.Time          { return time.Unix(0, c.at.Load()) }
func (c *stepClock) advance(d time.Duration) { c.at.Add(int64(d)) }
