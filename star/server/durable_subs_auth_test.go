package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/durable/durabletest"
)

// The Durable Streams subscription routes under TestAuthMatrix's rules:
// a subscription is authorized against every stream it names or links,
// with the stream scope of the token, as the S2 face authorizes a stream.

// dsSubs dumps the subscriptions a request can create, delete, configure
// or link: each row's key, config and links (not the wake state or the
// cursors, which the driver moves on its own).
func (e *env) dsSubs() string {
	e.t.Helper()
	var b strings.Builder
	q := meta.Query{PK: "ds#" + durable.DefaultBasin, From: "u#", To: "u#\U0010FFFF"}
	for {
		pg, err := e.n.Meta().Query(context.Background(), q)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, it := range pg.Items {
			var row struct {
				Config json.RawMessage `json:"config"`
				Links  []struct {
					Path     string `json:"path"`
					Explicit bool   `json:"explicit"`
				} `json:"links"`
			}
			if err := json.Unmarshal(it.Val, &row); err != nil {
				e.t.Fatal(err)
			}
			fmt.Fprintf(&b, "%s %s %v\n", it.SK, row.Config, row.Links)
		}
		if pg.Next == "" {
			return b.String()
		}
		q.PageToken = pg.Next
	}
}

// dsMessages is the JSON messages of a Durable Streams stream, read as
// the admin.
func (e *env) dsMessages(path string) []json.RawMessage {
	e.t.Helper()
	r := e.dsAdmin("GET", path+"?offset=-1", "")
	want(e.t, r, 200, "")
	var out []json.RawMessage
	if err := json.Unmarshal(r.body, &out); err != nil {
		e.t.Fatalf("%s: %v: %s", path, err, r)
	}
	return out
}

// dsScoped is a token of the face's basin with every stream and basin
// operation (reconfigure-basin included), on the streams of set (nil:
// no stream scope at all).
func (e *env) dsScoped(id string, set map[string]string, autoPrefix bool) string {
	scope := map[string]any{"basins": map[string]string{"exact": durable.DefaultBasin}, "op_groups": map[string]any{
		"basin": map[string]bool{"read": true, "write": true}, "stream": map[string]bool{"read": true, "write": true}}}
	if set != nil {
		scope["streams"] = set
	}
	return e.issue(map[string]any{"id": id, "scope": scope, "auto_prefix_streams": autoPrefix})
}

func TestAuthMatrixDurableSubscriptions(t *testing.T) {
	t.Parallel()
	e := subscribingStar(t, "solo", testsvc.SQLite(t), memObjects(t), auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}, 200*time.Millisecond)
	jsonCT := []string{"Content-Type", "application/json"}
	for _, s := range []string{"room/a", "room/b", "room/wake", "room/wake2", "victim/json", "victim/wake"} {
		want(t, e.dsAdmin("PUT", s, "", jsonCT...), 201, "")
	}
	hook := durabletest.NewWebhook(t)
	room := e.dsScoped("room", map[string]string{"prefix": "room/"}, false)
	noStreams := e.dsScoped("no-streams", nil, false)
	prefixed := e.dsScoped("prefixed", map[string]string{"prefix": "room/"}, true)
	webhook := func(streams ...string) string {
		return string(jsonBody(map[string]any{"type": "webhook", "streams": streams, "webhook": map[string]string{"url": hook.URL}}))
	}
	pattern := func(p string) string {
		return string(jsonBody(map[string]any{"type": "webhook", "pattern": p, "webhook": map[string]string{"url": hook.URL}}))
	}
	pull := func(wakeStream string, streams ...string) string {
		return string(jsonBody(map[string]any{"type": "pull-wake", "streams": streams, "wake_stream": wakeStream}))
	}
	claim := `{"worker":"w1"}`

	// The admin's subscriptions, over the victim's streams too.
	want(t, e.dsAdmin("PUT", "__ds/subscriptions/adm", webhook("room/a", "victim/json"), jsonCT...), 201, "")
	want(t, e.dsAdmin("PUT", "__ds/subscriptions/adm-pull", pull("room/wake2", "room/a", "victim/json"), jsonCT...), 201, "")
	want(t, e.dsAdmin("PUT", "__ds/subscriptions/adm-wake", pull("victim/wake", "room/a"), jsonCT...), 201, "")
	// Work pending for the claims below.
	want(t, e.dsAdmin("POST", "room/a", `{"n":1}`, jsonCT...), 204, "")
	want(t, e.dsAdmin("POST", "victim/json", `{"n":1}`, jsonCT...), 204, "")

	type step struct {
		name, tok, method, path, body string
		status                        int
	}
	steps := []step{
		// Creation: every stream named, the pattern's reach and the wake
		// stream lie in the token's scope.
		{"create over in-scope streams", room, "PUT", "__ds/subscriptions/mine", webhook("room/a"), 201},
		{"create pull-wake in scope", room, "PUT", "__ds/subscriptions/mine-pull", pull("room/wake", "room/a"), 201},
		{"create with an in-scope pattern", room, "PUT", "__ds/subscriptions/mine-glob", pattern("room/**"), 201},
		{"create under an in-scope root", room, "PUT", "room/__ds/subscriptions/rooted", pattern("**"), 201},
		{"create, auto-prefixed", prefixed, "PUT", "__ds/subscriptions/pre", webhook("a"), 201},
		{"link another stream", room, "PUT", "__ds/subscriptions/x1", webhook("room/a", "victim/json"), 403},
		{"link only another stream", room, "PUT", "__ds/subscriptions/x2", webhook("victim/json"), 403},
		{"pattern over another prefix", room, "PUT", "__ds/subscriptions/x3", pattern("victim/*"), 403},
		{"pattern over every stream", room, "PUT", "__ds/subscriptions/x4", pattern("**"), 403},
		{"pattern with a leading wildcard", room, "PUT", "__ds/subscriptions/x5", pattern("*/json"), 403},
		{"pattern naming another stream", room, "PUT", "__ds/subscriptions/x6", pattern("victim/json"), 403},
		{"wake into another stream", room, "PUT", "__ds/subscriptions/x7", pull("victim/wake", "room/a"), 403},
		{"root outside the scope", room, "PUT", "victim/__ds/subscriptions/x8", pattern("**"), 403},
		{"no stream scope", noStreams, "PUT", "__ds/subscriptions/x10", webhook("room/a"), 403},
		{"same id and config as the admin's", room, "PUT", "__ds/subscriptions/adm", webhook("room/a", "victim/json"), 403},
		// Reading, deleting and relinking: the whole subscription lies in
		// the scope.
		{"get own", room, "GET", "__ds/subscriptions/mine", "", 200},
		{"get the admin's", room, "GET", "__ds/subscriptions/adm", "", 403},
		{"get, no stream scope", noStreams, "GET", "__ds/subscriptions/mine", "", 403},
		{"link in scope", room, "POST", "__ds/subscriptions/mine/streams", `{"streams":["room/b"]}`, 204},
		{"link another stream to own", room, "POST", "__ds/subscriptions/mine/streams", `{"streams":["victim/json"]}`, 403},
		{"link to the admin's", room, "POST", "__ds/subscriptions/adm/streams", `{"streams":["room/b"]}`, 403},
		{"link, no stream scope", noStreams, "POST", "__ds/subscriptions/mine/streams", `{"streams":["room/b"]}`, 403},
		{"unlink from the admin's", room, "DELETE", "__ds/subscriptions/adm/streams/room%2Fa", "", 403},
		{"unlink, no stream scope", noStreams, "DELETE", "__ds/subscriptions/mine/streams/room%2Fb", "", 403},
		{"unlink own", room, "DELETE", "__ds/subscriptions/mine/streams/room%2Fb", "", 204},
		{"delete the admin's", room, "DELETE", "__ds/subscriptions/adm", "", 403},
		{"delete, no stream scope", noStreams, "DELETE", "__ds/subscriptions/mine", "", 403},
		// Claims: the wake stream and every link are the worker's to read.
		{"append (work for mine-pull)", testAdmin, "POST", "room/a", `{"n":2}`, 204},
		{"claim own", room, "POST", "__ds/subscriptions/mine-pull/claim", claim, 200},
		{"claim one linking another stream", room, "POST", "__ds/subscriptions/adm-pull/claim", claim, 403},
		{"claim one waking another stream", room, "POST", "__ds/subscriptions/adm-wake/claim", claim, 403},
		{"claim, no stream scope", noStreams, "POST", "__ds/subscriptions/mine-pull/claim", claim, 403},
		{"delete own", room, "DELETE", "__ds/subscriptions/mine-glob", "", 204},
	}
	for _, s := range steps {
		before := e.dsSubs()
		headers := bearer(s.tok)
		if s.body != "" {
			headers = append(headers, jsonCT...)
		}
		var body []byte
		if s.body != "" {
			body = []byte(s.body)
		}
		r := e.call(s.method, "/ds/"+s.path, body, headers...)
		if r.status != s.status {
			t.Errorf("%s: %s /ds/%s: want %d, got %s", s.name, s.method, s.path, s.status, r)
			continue
		}
		if s.status == 403 {
			if !strings.Contains(string(r.body), `"PERMISSION_DENIED"`) {
				t.Errorf("%s: want PERMISSION_DENIED, got %s", s.name, r)
			}
			if after := e.dsSubs(); after != before {
				t.Errorf("%s: a refused request changed the metastore:\nbefore:\n%s\nafter:\n%s", s.name, before, after)
			}
		}
		if s.status == 200 && strings.Contains(string(r.body), "victim") {
			t.Errorf("%s: the answer names another stream: %s", s.name, r)
		}
	}
	// The auto-prefixed token's root is its prefix: its subscription is
	// room/'s, over room/a.
	r := e.dsAdmin("GET", "room/__ds/subscriptions/pre", "")
	want(t, r, 200, "")
	if !strings.Contains(string(r.body), `"path":"a"`) {
		t.Errorf("an auto-prefixed subscription's links: %s", r)
	}
	// A refused create left nothing that could wake into the victim's
	// streams: an append there finds no subscription of the room token.
	want(t, e.dsAdmin("POST", "victim/json", `{"n":2}`, jsonCT...), 204, "")
	for _, id := range []string{"x1", "x2", "x3", "x4", "x5", "x6", "x7", "x10"} {
		want(t, e.dsAdmin("GET", "__ds/subscriptions/"+id, ""), 404, "")
	}
}

// TestDurableSubscriptionActsAsItsCreator: a pull-wake subscription's wake
// events are appended as the token that created it. Once that token is
// revoked its subscription appends nothing more, while a like
// subscription of a live token keeps waking; its webhook subscription
// posts nothing either.
func TestDurableSubscriptionActsAsItsCreator(t *testing.T) {
	t.Parallel()
	e := subscribingStar(t, "solo", testsvc.SQLite(t), memObjects(t), auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}, 200*time.Millisecond)
	jsonCT := []string{"Content-Type", "application/json"}
	for _, s := range []string{"room/a", "room/wake-live", "room/wake-gone"} {
		want(t, e.dsAdmin("PUT", s, "", jsonCT...), 201, "")
	}
	live := e.dsScoped("live", map[string]string{"prefix": "room/"}, false)
	gone := e.dsScoped("gone", map[string]string{"prefix": "room/"}, false)
	pull := func(wakeStream string) []byte {
		return jsonBody(map[string]any{"type": "pull-wake", "streams": []string{"room/a"}, "wake_stream": wakeStream})
	}
	want(t, e.call("PUT", "/ds/__ds/subscriptions/live", pull("room/wake-live"), append(bearer(live), jsonCT...)...), 201, "")
	want(t, e.call("PUT", "/ds/__ds/subscriptions/gone", pull("room/wake-gone"), append(bearer(gone), jsonCT...)...), 201, "")
	hook := durabletest.NewWebhook(t)
	hooked := jsonBody(map[string]any{"type": "webhook", "streams": []string{"room/a"}, "webhook": map[string]string{"url": hook.URL}})
	want(t, e.call("PUT", "/ds/__ds/subscriptions/gone-hook", hooked, append(bearer(gone), jsonCT...)...), 201, "")
	want(t, e.call("DELETE", "/v1/access-tokens/gone", nil, bearer(testAdmin)...), 204, "")

	refused := func() float64 {
		return e.metric("starlog_durable_subscription_deliveries_total", "type", "pull-wake", "result", "refused")
	}
	hookRefused := func() float64 {
		return e.metric("starlog_durable_subscription_deliveries_total", "type", "webhook", "result", "refused")
	}
	want(t, e.dsAdmin("POST", "room/a", `{"n":1}`, jsonCT...), 204, "")
	poll.UntilErr(t, 10*time.Second, "a live wake event and both refusals", func() error {
		if live, r, h := len(e.dsMessages("room/wake-live")), refused(), hookRefused(); live == 0 || r < 1 || h < 1 {
			return fmt.Errorf("live wake events %d, refused deliveries %v (webhook %v)", live, r, h)
		}
		return nil
	})
	if got := e.dsMessages("room/wake-gone"); len(got) != 0 {
		t.Fatalf("the revoked creator's subscription appended %d wake events: %s", len(got), got)
	}
	// It tries again after its backoff, and is refused again, even once
	// another token is issued under the revoked one's id.
	e.dsScoped("gone", map[string]string{"prefix": "room/"}, false)
	n := refused()
	poll.Until(t, 15*time.Second, "a refusal after the id was issued again", func() bool { return refused() >= n+1 })
	if got := e.dsMessages("room/wake-gone"); len(got) != 0 {
		t.Fatalf("the revoked creator's subscription appended %d wake events: %s", len(got), got)
	}
	hook.Quiet(t, 100*time.Millisecond)
	if slices.ContainsFunc(e.dsMessages("room/wake-live"), func(m json.RawMessage) bool { return !strings.Contains(string(m), `"subscription_id":"live"`) }) {
		t.Fatalf("the live wake stream holds another subscription's events")
	}
}

// TestDurableSubscriptionAcksWithinTheClaimersScope: a worker's wake
// token acks only the streams its access token may read, even a link
// added after the claim.
func TestDurableSubscriptionAcksWithinTheClaimersScope(t *testing.T) {
	t.Parallel()
	e := subscribingStar(t, "solo", testsvc.SQLite(t), memObjects(t), auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}, time.Hour)
	jsonCT := []string{"Content-Type", "application/json"}
	for _, s := range []string{"room/a", "room/wake", "victim/json"} {
		want(t, e.dsAdmin("PUT", s, "", jsonCT...), 201, "")
	}
	room := e.dsScoped("room", map[string]string{"prefix": "room/"}, false)
	sub := jsonBody(map[string]any{"type": "pull-wake", "streams": []string{"room/a"}, "wake_stream": "room/wake"})
	want(t, e.dsAdmin("PUT", "__ds/subscriptions/s", string(sub), jsonCT...), 201, "")
	want(t, e.dsAdmin("POST", "room/a", `{"n":1}`, jsonCT...), 204, "")
	r := e.call("POST", "/ds/__ds/subscriptions/s/claim", []byte(`{"worker":"w"}`), append(bearer(room), jsonCT...)...)
	want(t, r, 200, "")
	var wk struct {
		WakeID     string `json:"wake_id"`
		Generation uint64 `json:"generation"`
		Token      string `json:"token"`
	}
	if err := json.Unmarshal(r.body, &wk); err != nil || wk.Token == "" {
		t.Fatalf("claim: %s", r)
	}
	// The admin links the victim's stream while the wake is held, and it
	// is written to.
	want(t, e.dsAdmin("POST", "__ds/subscriptions/s/streams", `{"streams":["victim/json"]}`, jsonCT...), 204, "")
	want(t, e.dsAdmin("POST", "victim/json", `{"n":1}`, jsonCT...), 204, "")
	h := e.dsAdmin("HEAD", "victim/json", "")
	want(t, h, 200, "")
	tail := h.header.Get("Stream-Next-Offset")
	ack := func(stream string) resp {
		body := jsonBody(map[string]any{"wake_id": wk.WakeID, "generation": wk.Generation,
			"acks": []map[string]string{{"stream": stream, "offset": tail}}})
		return e.call("POST", "/ds/__ds/subscriptions/s/ack", body, append(bearer(wk.Token), jsonCT...)...)
	}
	if r := ack("victim/json"); r.status != 403 || !strings.Contains(string(r.body), `"PERMISSION_DENIED"`) {
		t.Errorf("the room worker acked the victim's cursor: %s, want 403 PERMISSION_DENIED", r)
	}
	r = e.dsAdmin("GET", "__ds/subscriptions/s", "")
	want(t, r, 200, "")
	if strings.Contains(string(r.body), `"acked_offset":"`+tail+`"`) {
		t.Errorf("the victim's cursor moved: %s", r)
	}
}

// A pull-wake worker whose access token is revoked after its claim can no
// longer ack: the ack is 401 and moves no cursor, and the wake is
// withdrawn (the pending work wakes again for another claim) instead of
// living on as long as the revoked worker keeps acking.
func TestDurableRevokedClaimerCannotAck(t *testing.T) {
	t.Parallel()
	e := subscribingStar(t, "solo", testsvc.SQLite(t), memObjects(t), auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}, time.Hour)
	jsonCT := []string{"Content-Type", "application/json"}
	for _, s := range []string{"room/a", "room/wake"} {
		want(t, e.dsAdmin("PUT", s, "", jsonCT...), 201, "")
	}
	worker := e.dsScoped("worker", map[string]string{"prefix": "room/"}, false)
	sub := jsonBody(map[string]any{"type": "pull-wake", "streams": []string{"room/a"}, "wake_stream": "room/wake"})
	want(t, e.dsAdmin("PUT", "__ds/subscriptions/s", string(sub), jsonCT...), 201, "")
	want(t, e.dsAdmin("POST", "room/a", `{"n":1}`, jsonCT...), 204, "")
	r := e.call("POST", "/ds/__ds/subscriptions/s/claim", []byte(`{"worker":"w"}`), append(bearer(worker), jsonCT...)...)
	want(t, r, 200, "")
	var wk struct {
		WakeID     string `json:"wake_id"`
		Generation uint64 `json:"generation"`
		Token      string `json:"token"`
	}
	if err := json.Unmarshal(r.body, &wk); err != nil || wk.Token == "" {
		t.Fatalf("claim: %s", r)
	}
	h := e.dsAdmin("HEAD", "room/a", "")
	tail := h.header.Get("Stream-Next-Offset")
	ack := func() resp {
		body := jsonBody(map[string]any{"wake_id": wk.WakeID, "generation": wk.Generation,
			"acks": []map[string]string{{"stream": "room/a", "offset": tail}}})
		return e.call("POST", "/ds/__ds/subscriptions/s/ack", body, append(bearer(wk.Token), jsonCT...)...)
	}
	want(t, e.call("DELETE", "access-tokens/worker", nil, bearer(testAdmin)...), 204, "")
	if r := ack(); r.status != 401 {
		t.Fatalf("ack by the worker whose token was revoked: %s, want 401", r)
	}
	r = e.dsAdmin("GET", "__ds/subscriptions/s", "")
	want(t, r, 200, "")
	if strings.Contains(string(r.body), `"acked_offset":"`+tail+`"`) {
		t.Errorf("the revoked worker's ack moved the cursor: %s", r)
	}
	if r := ack(); r.status != 401 && r.status != 409 {
		t.Errorf("a second ack of the withdrawn wake: %s, want it refused", r)
	}
}
