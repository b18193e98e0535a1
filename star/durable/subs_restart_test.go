package durable_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/durable/durabletest"
)

func do(t *testing.T, method, url, auth string, body any) (int, []byte) {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, url, rd)
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// TestSubscriptionSurvivesKill9 kills star dev with SIGKILL twice: after
// a subscription is created, and while its webhook wake waits for a
// callback. The restarted star keeps the subscription (a re-PUT is 200),
// its signing key (same kid, a signature that verifies), and the wake in
// flight: the callback minted before the kill acks it, and its replay is
// fenced.
func TestSubscriptionSurvivesKill9(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: builds star dev and kills it with SIGKILL")
	}
	root := testsvc.RepoRoot(t)
	star := startDev(t, root, t.TempDir(), "")
	h := durabletest.NewWebhook(t)
	sub := star.url + "/ds/__ds/subscriptions/r1"
	def := map[string]any{"type": "webhook", "pattern": "events/*", "webhook": map[string]string{"url": h.URL + "/hook"}, "lease_ttl_ms": 60000}

	code, b := do(t, http.MethodPut, sub, "", def)
	if code != http.StatusCreated {
		t.Fatalf("create: %d %s", code, b)
	}
	var created struct {
		Webhook struct {
			Signing struct {
				Kid     string
				JwksURL string `json:"jwks_url"`
			}
		}
	}
	_ = json.Unmarshal(b, &created)
	kid := created.Webhook.Signing.Kid
	if !strings.HasPrefix(kid, "ds_") || created.Webhook.Signing.JwksURL != star.url+"/ds/__ds/jwks.json" {
		t.Fatalf("signing metadata %s", b)
	}

	star.kill()
	star.start()
	if code, b := do(t, http.MethodPut, sub, "", def); code != http.StatusOK || !strings.Contains(string(b), kid) {
		t.Fatalf("re-confirm after kill -9: %d %s (want 200 with kid %s)", code, b, kid)
	}
	code, b = do(t, http.MethodGet, star.url+"/ds/__ds/jwks.json", "", nil)
	var jwks struct {
		Keys []struct{ Kid, X string }
	}
	if err := json.Unmarshal(b, &jwks); code != http.StatusOK || err != nil || len(jwks.Keys) != 1 || jwks.Keys[0].Kid != kid {
		t.Fatalf("jwks after restart: %d %s", code, b)
	}
	pub, _ := base64.RawURLEncoding.DecodeString(jwks.Keys[0].X)

	// A new matching stream wakes the subscription, signed with the key.
	if code, b := do(t, http.MethodPut, star.url+"/ds/events/a", "", map[string]string{"event": "created"}); code != http.StatusCreated {
		t.Fatalf("create stream: %d %s", code, b)
	}
	req := h.Next(t, 10*time.Second)
	if req.Kid() != kid || !req.Verify(pub, time.Minute) {
		t.Fatalf("signature header %q: want kid %s, verifying with the JWKS key within a minute", req.Signature, kid)
	}
	wake := req.Wake(t)
	if p := wake.Pending(); len(wake.Streams) != 1 || len(p) != 1 || p[0] != "events/a" {
		t.Fatalf("wake body %s", req.Body)
	}

	// The wake outlives a kill -9: its callback still counts.
	star.kill()
	star.start()
	ack := map[string]any{"wake_id": wake.WakeID, "generation": wake.Generation, "done": true,
		"acks": []map[string]string{{"stream": "events/a", "offset": wake.Streams[0].TailOffset}}}
	if code, b := do(t, http.MethodPost, wake.CallbackURL, wake.Token, ack); code != http.StatusOK || string(b) != `{"next_wake":false,"ok":true}` {
		t.Fatalf("callback after kill -9: %d %s", code, b)
	}
	if code, b := do(t, http.MethodPost, wake.CallbackURL, wake.Token, ack); code != http.StatusConflict || !strings.Contains(string(b), `"FENCED"`) {
		t.Fatalf("replayed callback: %d %s (want 409 FENCED)", code, b)
	}
	if code, b := do(t, http.MethodPost, wake.CallbackURL, "dsw_forged.x", ack); code != http.StatusUnauthorized {
		t.Fatalf("forged token: %d %s (want 401)", code, b)
	}
	code, b = do(t, http.MethodGet, sub, "", nil)
	if code != http.StatusOK || !strings.Contains(string(b), `"acked_offset":"`+wake.Streams[0].TailOffset+`"`) {
		t.Fatalf("cursor after the ack: %d %s", code, b)
	}
}
