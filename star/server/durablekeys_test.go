package server_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

func withDurable(_ *node.Config, o *server.Options) { o.Durable = &durable.Config{} }

// The subscription keys' routes take the internal credential only; with
// it an operator lists the keys, rotates with the publish lead, and in an
// emergency replaces every key: old kids leave the JWK Set and old wake
// tokens are refused.
func TestDurableKeyRoutes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth, withDurable)
	cred, err := auth.InternalCredential([]byte(testKey))
	if err != nil {
		t.Fatal(err)
	}
	internal := []string{auth.HeaderInternal, cred}
	for _, c := range []struct{ method, path string }{{"GET", server.DurableKeysPath}, {"POST", server.DurableRotatePath}} {
		want(t, e.call(c.method, c.path, nil), 401, auth.CodeAuthn)
		want(t, e.call(c.method, c.path, nil, bearer(testAdmin)...), 403, auth.CodePermissionDenied)
		want(t, e.call(c.method, c.path, nil, auth.HeaderInternal, "wrong"), 401, auth.CodeAuthn)
		rec := httptest.NewRecorder()
		e.srv.Public().ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if rec.Code != http.StatusNotFound {
			t.Fatalf("%s on the public listener: %d", c.path, rec.Code)
		}
	}
	want(t, e.call("POST", server.DurableKeysPath, nil, internal...), 405, api.CodeNotImplemented)

	keys := func(r resp) []durable.KeyInfo {
		t.Helper()
		want(t, r, 200, "")
		var out server.DurableKeysResponse
		if err := json.Unmarshal(r.body, &out); err != nil || out.Basin != durable.DefaultBasin {
			t.Fatalf("keys answer %s", r)
		}
		return out.Keys
	}
	jwks := func() map[string]bool {
		t.Helper()
		r := e.call("GET", "/ds/__ds/jwks.json", nil)
		want(t, r, 200, "")
		var set struct{ Keys []struct{ Kid string } }
		_ = json.Unmarshal(r.body, &set)
		out := map[string]bool{}
		for _, k := range set.Keys {
			out[k.Kid] = true
		}
		return out
	}
	if ks := keys(e.call("GET", server.DurableKeysPath, nil, internal...)); len(ks) != 0 {
		t.Fatalf("keys before any star needed them: %+v", ks)
	}
	first := jwks() // creates the row
	ks := keys(e.call("GET", server.DurableKeysPath, nil, internal...))
	if len(ks) != 1 || !first[ks[0].Kid] || ks[0].State != "signing" {
		t.Fatalf("keys %+v, jwks %v", ks, first)
	}

	// A pull-wake wake's token, minted by the first key.
	adm := append(bearer(testAdmin), "Content-Type", "application/json")
	for _, p := range []string{"/ds/wake/pool", "/ds/events/a"} {
		want(t, e.call("PUT", p, nil, adm...), 201, "")
	}
	want(t, e.call("PUT", "/ds/__ds/subscriptions/pw", []byte(`{"type":"pull-wake","pattern":"events/*","wake_stream":"wake/pool"}`), adm...), 201, "")
	r := e.call("POST", "/ds/events/a", []byte(`{"n":1}`), adm...)
	if r.status != 204 && r.status != 200 {
		t.Fatalf("append: %s", r)
	}
	r = e.call("POST", "/ds/__ds/subscriptions/pw/claim", []byte(`{"worker":"w"}`), adm...)
	want(t, r, 200, "")
	var claim struct {
		WakeID     string `json:"wake_id"`
		Generation uint64 `json:"generation"`
		Token      string `json:"token"`
	}
	_ = json.Unmarshal(r.body, &claim)
	ack := jsonBody(map[string]any{"wake_id": claim.WakeID, "generation": claim.Generation})
	tokenAuth := []string{"Authorization", "Bearer " + claim.Token, "Content-Type", "application/json"}
	want(t, e.call("POST", "/ds/__ds/subscriptions/pw/ack", ack, tokenAuth...), 200, "")

	// Rotating with the lead: the new key is published, the old still signs.
	ks = keys(e.call("POST", server.DurableRotatePath, nil, internal...))
	if len(ks) != 2 || ks[0].State != "signing" || ks[1].State != "pending" || !jwks()[ks[1].Kid] {
		t.Fatalf("after a rotation: %+v", ks)
	}
	want(t, e.call("POST", "/ds/__ds/subscriptions/pw/ack", ack, tokenAuth...), 200, "")

	// An emergency: one new key, signing; every old kid and token is gone.
	ks = keys(e.call("POST", server.DurableRotatePath, []byte(`{"emergency":true}`), append(internal, "Content-Type", "application/json")...))
	set := jwks()
	if len(ks) != 1 || ks[0].State != "signing" || len(set) != 1 || !set[ks[0].Kid] || first[ks[0].Kid] {
		t.Fatalf("after an emergency: keys %+v, jwks %v", ks, set)
	}
	r = e.call("POST", "/ds/__ds/subscriptions/pw/ack", ack, tokenAuth...)
	if r.status != 401 || !jsonHas(r.body, "TOKEN_INVALID") {
		t.Fatalf("the old token after an emergency: %s (want 401 TOKEN_INVALID)", r)
	}
}

func jsonHas(b []byte, code string) bool {
	var v struct {
		Error struct{ Code string } `json:"error"`
	}
	return json.Unmarshal(b, &v) == nil && v.Error.Code == code
}

// Without the Durable Streams face the routes say so.
func TestDurableKeyRoutesOff(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	cred, err := auth.InternalCredential([]byte(testKey))
	if err != nil {
		t.Fatal(err)
	}
	want(t, e.call("GET", server.DurableKeysPath, nil, auth.HeaderInternal, cred), 501, api.CodeNotImplemented)
}
