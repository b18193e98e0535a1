package server_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/durable/durabletest"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// nextWake is the hook's next wake, within d; its signature must verify
// against pub.
func nextWake(t *testing.T, hook *durabletest.Webhook, d time.Duration, pub ed25519.PublicKey) durabletest.Wake {
	t.Helper()
	r := hook.Next(t, d)
	if !r.Verify(pub, time.Minute) {
		t.Fatalf("a wake's signature %q does not verify with the JWK Set's key: %s", r.Signature, r.Body)
	}
	return r.Wake(t)
}

// subscribingStar is a star of a cluster sharing ms and objs, with the
// Durable Streams face on (loopback webhooks allowed, audits every audit)
// and auth as ac.
func subscribingStar(t *testing.T, id string, ms meta.Store, objs objstore.Store, ac auth.Config, audit time.Duration) *env {
	return starServing(t, id, ms, objs, nil, server.Options{Auth: ac, Durable: &durable.Config{
		AllowLoopbackWebhooks: true, LongPoll: time.Second, SubscriptionAudit: audit,
	}})
}

// dsAdmin sends a Durable Streams request with the admin token.
func (e *env) dsAdmin(method, path, body string, headers ...string) resp {
	e.t.Helper()
	var b []byte
	if body != "" {
		b = []byte(body)
	}
	return e.call(method, "/ds/"+path, b, append(bearer(testAdmin), headers...)...)
}

func jwksKey(t *testing.T, e *env) ed25519.PublicKey {
	t.Helper()
	r := e.call("GET", "/ds/__ds/jwks.json", nil)
	want(t, r, 200, "")
	var set struct{ Keys []struct{ X string } }
	if err := json.Unmarshal(r.body, &set); err != nil || len(set.Keys) == 0 {
		t.Fatalf("jwks: %s", r)
	}
	pub, _ := base64.RawURLEncoding.DecodeString(set.Keys[len(set.Keys)-1].X)
	return pub
}

// callback finishes a wake through e: acks path at its snapshot tail.
func callback(t *testing.T, e *env, w durabletest.Wake, path string) {
	t.Helper()
	body := jsonBody(map[string]any{"wake_id": w.WakeID, "generation": w.Generation, "done": true,
		"acks": []map[string]string{{"stream": path, "offset": w.Tail(path)}}})
	r := e.call("POST", w.CallbackPath(), body, "Authorization", "Bearer "+w.Token, "Content-Type", "application/json")
	want(t, r, 200, "")
}

// TestDurableSubscriptionsAcrossStars runs one webhook subscription over
// two streams led by two different stars, with authentication on: a
// subscription has one owner among the live stars (only it audits and
// runs the timers), an append through either star wakes it whichever
// star leads the stream, the callback counts on any star, the owner's
// tail checks of a stream the other star leads are forwarded with the
// internal credential (no pass fails), and when the owner stops the
// other star takes the subscription over: a lease that ran out is
// withdrawn and woken again by the survivor.
func TestDurableSubscriptionsAcrossStars(t *testing.T) {
	t.Parallel()
	objs := memObjects(t)
	ms := testsvc.SQLite(t)
	ac := auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}
	const audit = 300 * time.Millisecond
	a := subscribingStar(t, "a", ms, objs, ac, audit)
	b := subscribingStar(t, "b", ms, objs, ac, audit)
	stars := map[string]*env{"a": a, "b": b}

	// x is led by a, y by b: each is created through its star.
	want(t, a.dsAdmin("PUT", "orders/x", "", "Content-Type", "text/plain"), 201, "")
	want(t, b.dsAdmin("PUT", "orders/y", "", "Content-Type", "text/plain"), 201, "")
	hook := durabletest.NewWebhook(t)
	sub := jsonBody(map[string]any{"type": "webhook", "streams": []string{"orders/x", "orders/y"},
		"webhook": map[string]string{"url": hook.URL + "/hook"}, "lease_ttl_ms": 1500})
	want(t, a.call("PUT", "/ds/__ds/subscriptions/s1", sub, append(bearer(testAdmin), "Content-Type", "application/json")...), 201, "")
	pub := jwksKey(t, b) // the same key on every star

	// Both stars' audits agree on one owner.
	owner := ""
	poll.UntilErr(t, 10*time.Second, "a single owner", func() error {
		oa, ob := a.metric("starlog_durable_subscriptions_owned"), b.metric("starlog_durable_subscriptions_owned")
		switch {
		case oa == 1 && ob == 0:
			owner = "a"
		case oa == 0 && ob == 1:
			owner = "b"
		default:
			return fmt.Errorf("a owns %v, b owns %v", oa, ob)
		}
		return nil
	})
	other := map[string]string{"a": "b", "b": "a"}[owner]
	t.Logf("owner %s", owner)

	// A Durable Streams append to y through a (b leads y) wakes it.
	want(t, a.dsAdmin("POST", "orders/y", "one", "Content-Type", "text/plain"), 204, "")
	w := nextWake(t, hook, 5*time.Second, pub)
	if p := w.Pending(); len(p) != 1 || p[0] != "orders/y" {
		t.Fatalf("first wake's pending streams %v, want [orders/y]", p)
	}
	callback(t, b, w, "orders/y")

	// An S2 API append to x through b (a leads x) wakes it too.
	want(t, b.appendJSON("durable-streams", "orders%2Fx", textRecords("s2-", 1), bearer(testAdmin)...), 200, "")
	w = nextWake(t, hook, 5*time.Second, pub)
	if p := w.Pending(); len(p) != 1 || p[0] != "orders/x" {
		t.Fatalf("second wake's pending streams %v, want [orders/x]", p)
	}
	callback(t, a, w, "orders/x")
	hook.Quiet(t, 4*audit) // both acked: the audits find nothing

	// A wake nobody answers: its lease runs out and the owner wakes again.
	want(t, b.dsAdmin("POST", "orders/x", "two", "Content-Type", "text/plain"), 204, "")
	w1 := nextWake(t, hook, 5*time.Second, pub)
	w2 := nextWake(t, hook, 5*time.Second, pub)
	if w2.Generation <= w1.Generation || len(w2.Pending()) != 1 {
		t.Fatalf("re-wake after the lease: generation %d after %d, pending %v", w2.Generation, w1.Generation, w2.Pending())
	}
	owned := func(e *env) float64 {
		return e.metric("starlog_durable_subscription_passes_total", "trigger", "timer") + e.metric("starlog_durable_subscription_passes_total", "trigger", "audit")
	}
	if n := owned(stars[other]); n != 0 {
		t.Errorf("star %s (not the owner) made %v timer or audit passes", other, n)
	}
	if n := owned(stars[owner]); n == 0 {
		t.Errorf("the owner %s made no timer or audit pass", owner)
	}
	for id, e := range stars {
		if n := e.metric("starlog_durable_subscription_passes_total", "result", "error"); n != 0 {
			t.Errorf("star %s: %v passes failed (a forwarded tail check refused?)", id, n)
		}
	}

	// The owner stops; the survivor takes the subscription over and
	// withdraws the next lease that runs out.
	stars[owner].stop(t)
	hook.Drop() // wakes the owner issued before it stopped
	s := stars[other]
	w3 := nextWake(t, hook, 10*time.Second, pub)
	w4 := nextWake(t, hook, 10*time.Second, pub)
	if w4.Generation <= w3.Generation || w3.Generation <= w2.Generation {
		t.Fatalf("generations after the owner stopped: %d, %d (last before: %d)", w3.Generation, w4.Generation, w2.Generation)
	}
	if got := s.metric("starlog_durable_subscriptions_owned"); got != 1 {
		t.Fatalf("the survivor owns %v subscriptions, want 1", got)
	}
	callback(t, s, w4, "orders/x")
	r := s.call("GET", "/ds/__ds/subscriptions/s1", nil, bearer(testAdmin)...)
	want(t, r, 200, "")
	if !strings.Contains(string(r.body), `"acked_offset":"`+w4.Tail("orders/x")+`"`) {
		t.Fatalf("cursor after the survivor's wake: %s", r)
	}
}

// TestS2AppendWakesSubscription: an append through the S2 API to a
// stream of the Durable Streams basin wakes a subscription at once, not
// at the next audit (set to an hour here).
func TestS2AppendWakesSubscription(t *testing.T) {
	t.Parallel()
	objs := memObjects(t)
	e := subscribingStar(t, "solo", testsvc.SQLite(t), objs, auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}, time.Hour)
	want(t, e.dsAdmin("PUT", "feed", "", "Content-Type", "application/json"), 201, "")
	hook := durabletest.NewWebhook(t)
	sub := jsonBody(map[string]any{"type": "webhook", "streams": []string{"feed"}, "webhook": map[string]string{"url": hook.URL}})
	want(t, e.call("PUT", "/ds/__ds/subscriptions/s2", sub, append(bearer(testAdmin), "Content-Type", "application/json")...), 201, "")
	pub := jwksKey(t, e)
	want(t, e.appendJSON("durable-streams", "feed", `{"records":[{"body":"{\"n\":1}"}]}`, bearer(testAdmin)...), 200, "")
	w := nextWake(t, hook, 3*time.Second, pub)
	if p := w.Pending(); len(p) != 1 || p[0] != "feed" {
		t.Fatalf("pending %v", p)
	}
}

// TestDurableClientRate: the per-client request rate covers the Durable
// Streams face, and its refusals (like the 401 of a missing token) carry
// the face's CORS headers so a browser can read them.
func TestDurableClientRate(t *testing.T) {
	t.Parallel()
	e := newEnv(t, func(_ *node.Config, o *server.Options) {
		o.Auth = auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}
		o.Durable = &durable.Config{}
		o.ClientRate = server.ClientRate{PerSec: 0.5, Burst: 3}
	})
	origin := []string{"Origin", "https://app.example"}
	r := e.call("GET", "/ds/nothing", nil, origin...)
	if r.status != 401 || r.header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("no token: %s (Access-Control-Allow-Origin %q), want 401 with CORS", r, r.header.Get("Access-Control-Allow-Origin"))
	}
	tok := e.issue(map[string]any{"id": "reader", "scope": map[string]any{"basins": map[string]string{"exact": "durable-streams"}, "streams": map[string]string{"prefix": ""}, "ops": []string{"read", "create-stream", "append"}}})
	for i := range 3 {
		want(t, e.call("PUT", "/ds/r"+string(rune('a'+i)), nil, append(bearer(tok), "Content-Type", "text/plain")...), 201, "")
	}
	r = e.call("GET", "/ds/ra?offset=-1", nil, append(bearer(tok), origin...)...)
	if r.status != 429 || r.header.Get("Retry-After") == "" || r.header.Get("Access-Control-Allow-Origin") != "https://app.example" {
		t.Fatalf("fourth request of the burst: %s (Retry-After %q, CORS %q), want 429", r, r.header.Get("Retry-After"), r.header.Get("Access-Control-Allow-Origin"))
	}
	if got := e.metric("starlog_rate_limited_total", "reason", "client"); got < 1 {
		t.Errorf("rate-limited count %v", got)
	}
	// Another client (the admin, by its address) has its own budget: its
	// issue, the refused request above (refusals count against their
	// address) and this one.
	want(t, e.call("GET", "/ds/ra?offset=-1", nil, bearer(testAdmin)...), 200, "")
}

// stop closes e's server and node (what a clean stop does; t.Cleanup's
// second close is a no-op).
func (e *env) stop(t *testing.T) {
	t.Helper()
	e.srv.Drain()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = e.hs.Shutdown(ctx)
	if err := e.n.Close(ctx); err != nil {
		t.Fatalf("close %s: %v", e.base, err)
	}
}
