package servecmd_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/durable/durabletest"
)

// TestSubscriptionOwnerKilled runs a webhook subscription on two `star
// serve` processes and kills its owner with SIGKILL while a wake waits
// for a callback that never comes: once the killed star's heartbeat is
// past --dead-after, the survivor owns the subscription, withdraws the
// wake whose lease ran out and wakes the worker again (a higher
// generation), and the worker's callback on the survivor acks it.
func TestSubscriptionOwnerKilled(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs two star serve processes")
	}
	dir := t.TempDir()
	env := func(id string) []string {
		return append(twoStarEnv(dir, id), "STARLOG_DURABLE_WEBHOOK_LOOPBACK=true", "STARLOG_DURABLE_SUBSCRIPTION_AUDIT=500ms")
	}
	stars := map[string]*proc{"a": startServe(t, env("a")), "b": startServe(t, env("b"))}
	do := func(p *proc, method, path, ct, body string, hdr ...string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(method, p.url+path, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		if ct != "" {
			req.Header.Set("Content-Type", ct)
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, out
	}
	if code, out := do(stars["a"], "PUT", "/ds/ev/x", "text/plain", ""); code != 201 {
		t.Fatalf("create the stream: %d %s", code, out)
	}
	hook := durabletest.NewWebhook(t)
	sub := `{"type":"webhook","streams":["ev/x"],"webhook":{"url":"` + hook.URL + `/h"},"lease_ttl_ms":2000}`
	if code, out := do(stars["a"], "PUT", "/ds/__ds/subscriptions/k9", "application/json", sub); code != 201 {
		t.Fatalf("create the subscription: %d %s", code, out)
	}

	owner := ""
	poll.UntilErr(t, 15*time.Second, "a single owner", func() error {
		oa := grepMetrics(t, stars["a"], "starlog_durable_subscriptions_owned")
		ob := grepMetrics(t, stars["b"], "starlog_durable_subscriptions_owned")
		switch {
		case strings.HasSuffix(oa, " 1") && strings.HasSuffix(ob, " 0"):
			owner = "a"
		case strings.HasSuffix(oa, " 0") && strings.HasSuffix(ob, " 1"):
			owner = "b"
		default:
			return fmt.Errorf("a %q, b %q", oa, ob)
		}
		return nil
	})
	survivor := map[string]string{"a": "b", "b": "a"}[owner]
	t.Logf("owner %s", owner)

	next := func(d time.Duration) durabletest.Wake {
		t.Helper()
		w := hook.Next(t, d).Wake(t)
		if len(w.Streams) != 1 {
			t.Fatalf("wake %+v: want one stream", w)
		}
		return w
	}
	if code, out := do(stars[survivor], "POST", "/ds/ev/x", "text/plain", "one"); code != 204 {
		t.Fatalf("append: %d %s", code, out)
	}
	w1 := next(10 * time.Second)

	stars[owner].kill9(t)
	hook.Drop() // re-wakes the owner made before it died
	var w2 durabletest.Wake
	for w2.Generation <= w1.Generation {
		w2 = next(30 * time.Second) // dead-after 2 s, then an audit, then the lease
	}
	ack := `{"wake_id":"` + w2.WakeID + `","generation":` + jsonUint(w2.Generation) + `,"done":true,"acks":[{"stream":"ev/x","offset":"` + w2.Streams[0].TailOffset + `"}]}`
	if code, out := do(stars[survivor], "POST", w2.CallbackPath(), "application/json", ack, "Authorization", "Bearer "+w2.Token); code != 200 {
		t.Fatalf("callback on the survivor: %d %s", code, out)
	}
	if got := grepMetrics(t, stars[survivor], "starlog_durable_subscriptions_owned"); !strings.HasSuffix(got, " 1") {
		t.Fatalf("the survivor owns %q", got)
	}
	code, out := do(stars[survivor], "GET", "/ds/__ds/subscriptions/k9", "", "")
	if code != 200 || !strings.Contains(string(out), `"acked_offset":"`+w2.Streams[0].TailOffset+`"`) {
		t.Fatalf("the cursor after the survivor's wake: %d %s", code, out)
	}
}

func jsonUint(n uint64) string { b, _ := json.Marshal(n); return string(b) }
