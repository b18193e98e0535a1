package subs_test

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/durable/durabletest"
	"github.com/starlog/starlog/star/durable/subs"
	"github.com/starlog/starlog/star/durable/subs/signing"
)

// keysStar is a real node on SQLite and in-memory buckets behind the
// handler, with the keys' clock in the test's hands. Every request is the
// admin's (the handler's own authorization is not what these test).
type keysStar struct {
	h   *durable.Handler
	url string
}

// serve starts an HTTP server for h, every request as the admin's.
func serve(t *testing.T, h *durable.Handler) *keysStar {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(auth.WithPrincipal(r.Context(), auth.AdminPrincipal())))
	}))
	t.Cleanup(func() {
		srv.Close()
		h.Close()
	})
	return &keysStar{h: h, url: srv.URL + durable.DefaultPrefix}
}

func startKeysStar(t *testing.T, ms meta.Store, c *durabletest.Clock) *keysStar {
	t.Helper()
	h, err := durable.New(durable.Config{Node: durabletest.OpenNode(t, ms), AllowLoopbackWebhooks: true, Clock: c.Now})
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, h)
}

// A period under signing.MinKeyRotation is refused; 0 is the default; negative
// is never.
func TestKeyRotationConfig(t *testing.T) {
	if _, err := durable.New(durable.Config{Node: durabletest.OpenNode(t, testsvc.SQLite(t)), KeyRotation: signing.MinKeyRotation - time.Second}); err == nil || !strings.Contains(err.Error(), "at least 1h") {
		t.Fatalf("a period under the minimum: %v", err)
	}
	for in, want := range map[time.Duration]time.Duration{0: signing.DefaultKeyRotation, -1: -1, signing.MinKeyRotation: signing.MinKeyRotation} {
		h, err := durable.New(durable.Config{Node: durabletest.OpenNode(t, testsvc.SQLite(t)), KeyRotation: in})
		if err != nil {
			t.Fatal(err)
		}
		if got := h.Subscriptions().KeyPeriod(); got != want {
			t.Errorf("KeyRotation %v: period %v, want %v", in, got, want)
		}
		h.Close()
	}
}

func (s *keysStar) call(t *testing.T, method, path, bearer, ctype, body string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(method, s.url+path, strings.NewReader(body))
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	if bearer != "" {
		req.Header.Set("Authorization", "Bearer "+bearer)
	}
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// jwks fetches the served JWK Set: kid → public key.
func (s *keysStar) jwks(t *testing.T) map[string]ed25519.PublicKey {
	t.Helper()
	resp, err := http.Get(s.url + "/__ds/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var set struct{ Keys []struct{ Kid, X string } }
	if err := json.Unmarshal(b, &set); resp.StatusCode != http.StatusOK || err != nil {
		t.Fatalf("jwks: %d %s", resp.StatusCode, b)
	}
	// The lead is set against this max-age (and the docs say 300).
	if cc := resp.Header.Get("Cache-Control"); cc != "public, max-age=300" {
		t.Fatalf("jwks Cache-Control %q", cc)
	}
	out := map[string]ed25519.PublicKey{}
	for _, k := range set.Keys {
		x, _ := base64.RawURLEncoding.DecodeString(k.X)
		out[k.Kid] = x
	}
	return out
}

// webhookWake is a delivery as the receiver sees it.
type webhookWake struct {
	sig  string
	body []byte
	kid  string
	Wake durabletest.Wake
}

func receive(t *testing.T, hook *durabletest.Webhook) webhookWake {
	t.Helper()
	d := hook.Next(t, 10*time.Second)
	return webhookWake{sig: d.Signature, body: d.Body, kid: d.Kid(), Wake: d.Wake(t)}
}

// The previous key signs until the publish lead is over, the new one
// after, and each signature verifies against the JWK Set the star serves
// then; callback tokens of the old key verify until its retain is over.
func TestRotatedKeySignsAfterLead(t *testing.T) {
	c := durabletest.NewClock()
	star := startKeysStar(t, testsvc.SQLite(t), c)
	hook := durabletest.NewWebhook(t)

	code, b := star.call(t, http.MethodPut, "/__ds/subscriptions/rot", "", "application/json",
		`{"type":"webhook","pattern":"events/*","webhook":{"url":"`+hook.URL+`/h"},"lease_ttl_ms":60000}`)
	var created struct {
		Webhook struct{ Signing struct{ Kid string } }
	}
	_ = json.Unmarshal(b, &created)
	kid1 := created.Webhook.Signing.Kid
	if code != http.StatusCreated || len(star.jwks(t)) != 1 || star.jwks(t)[kid1] == nil {
		t.Fatalf("create: %d %s", code, b)
	}

	// The period is up: the next pass adds a key, published at once.
	c.Add(signing.DefaultKeyRotation)
	if err := star.h.Subscriptions().PassKeys(context.Background()); err != nil {
		t.Fatal(err)
	}
	set := star.jwks(t)
	if len(set) != 2 || set[kid1] == nil {
		t.Fatalf("jwks after the rotation: %v", set)
	}
	// Within the lead the old key still signs.
	if code, b := star.call(t, http.MethodPut, "/events/a", "", "application/json", `{"n":1}`); code != http.StatusCreated {
		t.Fatalf("create stream: %d %s", code, b)
	}
	w1 := receive(t, hook)
	if w1.kid != kid1 || !signing.VerifySignature(set[kid1], kid1, w1.sig, w1.body, time.Now(), time.Minute) {
		t.Fatalf("within the lead: signature %q, want kid %s", w1.sig, kid1)
	}
	ack := func(w webhookWake, done bool) string {
		b, _ := json.Marshal(map[string]any{"wake_id": w.Wake.WakeID, "generation": w.Wake.Generation, "done": done,
			"acks": []map[string]string{{"stream": "events/a", "offset": w.Wake.Streams[0].TailOffset}}})
		return string(b)
	}
	callback := strings.TrimPrefix(w1.Wake.CallbackURL, star.url)
	if code, b := star.call(t, http.MethodPost, callback, w1.Wake.Token, "application/json", ack(w1, true)); code != http.StatusOK {
		t.Fatalf("callback of the old key's wake: %d %s", code, b)
	}

	// After the lead the new key signs; the receiver finds it in the JWK Set.
	c.Add(signing.KeyPublishLead)
	if code, b := star.call(t, http.MethodPost, "/events/a", "", "application/json", `{"n":2}`); code != http.StatusNoContent && code != http.StatusOK {
		t.Fatalf("append: %d %s", code, b)
	}
	w2 := receive(t, hook)
	set = star.jwks(t)
	if w2.kid == kid1 || set[w2.kid] == nil || !signing.VerifySignature(set[w2.kid], w2.kid, w2.sig, w2.body, time.Now(), time.Minute) {
		t.Fatalf("after the lead: signature %q does not verify against the served JWK Set %v", w2.sig, set)
	}
	code, b = star.call(t, http.MethodGet, "/__ds/subscriptions/rot", "", "", "")
	if code != http.StatusOK || !strings.Contains(string(b), `"kid":"`+w2.kid+`"`) {
		t.Fatalf("the subscription names the old kid after the lead: %s", b)
	}
	if code, b := star.call(t, http.MethodPost, callback, w2.Wake.Token, "application/json", ack(w2, false)); code != http.StatusOK {
		t.Fatalf("callback with the new key's token: %d %s", code, b)
	}
	// The old key's token still verifies (the wake it names is over: fenced).
	if code, b := star.call(t, http.MethodPost, callback, w1.Wake.Token, "application/json", ack(w1, true)); code != http.StatusConflict || !strings.Contains(string(b), subs.CodeFenced) {
		t.Fatalf("the old key's token within retain: %d %s (want 409 FENCED)", code, b)
	}
	// Past the retain the old key is gone: its token is invalid, its kid
	// leaves the JWK Set, and the next pass removes it from the row.
	c.Add(signing.KeyRetain)
	if code, b := star.call(t, http.MethodPost, callback, w1.Wake.Token, "application/json", ack(w1, true)); code != http.StatusUnauthorized || !strings.Contains(string(b), subs.CodeTokenInvalid) {
		t.Fatalf("the old key's token after retain: %d %s (want 401 TOKEN_INVALID)", code, b)
	}
	if set := star.jwks(t); len(set) != 1 || set[kid1] != nil {
		t.Fatalf("jwks after retain: %v", set)
	}
	if err := star.h.Subscriptions().PassKeys(context.Background()); err != nil {
		t.Fatal(err)
	}
	if keys, err := star.h.SubscriptionKeys(context.Background()); err != nil || len(keys) != 1 || keys[0].Kid != w2.kid || keys[0].State != "signing" {
		t.Fatalf("row after the drop: %+v %v", keys, err)
	}
}

// An emergency rotation drops every old key at once: tokens in flight
// are 401 TOKEN_INVALID, old kids leave the JWK Set, another star follows
// at its reread, and the wake is claimed again with a new token after its
// lease.
func TestEmergencyKeyRotation(t *testing.T) {
	c := durabletest.NewClock()
	ms := testsvc.SQLite(t)
	star := startKeysStar(t, ms, c)
	for _, p := range []string{"/wake/pool", "/events/a"} {
		if code, b := star.call(t, http.MethodPut, p, "", "application/json", ""); code != http.StatusCreated {
			t.Fatalf("create %s: %d %s", p, code, b)
		}
	}
	code, b := star.call(t, http.MethodPut, "/__ds/subscriptions/pw", "", "application/json",
		`{"type":"pull-wake","pattern":"events/*","wake_stream":"wake/pool","lease_ttl_ms":1000}`)
	if code != http.StatusCreated {
		t.Fatalf("create subscription: %d %s", code, b)
	}
	if code, b := star.call(t, http.MethodPost, "/events/a", "", "application/json", `{"n":1}`); code != http.StatusNoContent && code != http.StatusOK {
		t.Fatalf("append: %d %s", code, b)
	}
	claim := func(worker string) (string, uint64, string) {
		t.Helper()
		var code int
		var b []byte
		// The lease of the last claim may still run (409 until it ends).
		_ = poll.Wait(5*time.Second, func() error {
			code, b = star.call(t, http.MethodPost, "/__ds/subscriptions/pw/claim", "", "application/json", `{"worker":"`+worker+`"}`)
			if code == http.StatusConflict {
				return fmt.Errorf("claim: %d %s", code, b)
			}
			return nil
		})
		var r struct {
			WakeID     string `json:"wake_id"`
			Generation uint64 `json:"generation"`
			Token      string `json:"token"`
		}
		if err := json.Unmarshal(b, &r); code != http.StatusOK || err != nil {
			t.Fatalf("claim: %d %s", code, b)
		}
		return r.Token, r.Generation, r.WakeID
	}
	ack := func(tok string, gen uint64, wake string, done bool) (int, []byte) {
		body, _ := json.Marshal(map[string]any{"wake_id": wake, "generation": gen, "done": done})
		return star.call(t, http.MethodPost, "/__ds/subscriptions/pw/ack", tok, "application/json", string(body))
	}
	tok, gen, wake := claim("w1")
	if code, b := ack(tok, gen, wake, false); code != http.StatusOK {
		t.Fatalf("heartbeat ack: %d %s", code, b)
	}
	// Another star that read the keys before the rotation.
	other := signing.NewLoader(ms, signing.RowKey(durable.DefaultBasin), c.Now, signing.DefaultKeyRotation, slog.New(slog.DiscardHandler), signing.NewMetrics())
	if _, ok, err := other.Verify(context.Background(), tok); !ok || err != nil {
		t.Fatalf("the token on another star: %v %v", ok, err)
	}
	oldKids := star.jwks(t)

	keys, err := star.h.RotateSubscriptionKeys(context.Background(), true)
	if err != nil || len(keys) != 1 || keys[0].State != "signing" || oldKids[keys[0].Kid] != nil {
		t.Fatalf("emergency rotation: %+v %v", keys, err)
	}
	set := star.jwks(t)
	if len(set) != 1 || set[keys[0].Kid] == nil {
		t.Fatalf("jwks after the emergency: %v (old %v)", set, oldKids)
	}
	if code, b := ack(tok, gen, wake, false); code != http.StatusUnauthorized || !strings.Contains(string(b), subs.CodeTokenInvalid) {
		t.Fatalf("old token after the emergency: %d %s (want 401 TOKEN_INVALID)", code, b)
	}
	// The other star refuses it from its next reread on.
	c.Add(signing.KeyReload)
	if err := other.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := other.Verify(context.Background(), tok); ok {
		t.Fatal("another star accepts the old token after its reread")
	}
	// The wake is claimed again once its lease ran out, under the new key.
	tok2, gen2, wake2 := claim("w2")
	if gen2 <= gen {
		t.Fatalf("reclaim: generation %d after %d", gen2, gen)
	}
	if code, b := ack(tok2, gen2, wake2, true); code != http.StatusOK {
		t.Fatalf("ack with the new key's token: %d %s", code, b)
	}
}
