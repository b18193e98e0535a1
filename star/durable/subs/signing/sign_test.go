package signing

import (
	"crypto/ed25519"
	"encoding/base64"
	"strings"
	"testing"
	"time"
)

func testKeys(t *testing.T) *Key {
	t.Helper()
	seed := make([]byte, ed25519.SeedSize)
	for i := range seed {
		seed[i] = byte(i)
	}
	k, err := newSigningKey(keyMaterial{seed: seed, tokenKey: []byte(strings.Repeat("k", 32))}, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func TestWebhookSignature(t *testing.T) {
	k := testKeys(t)
	if !strings.HasPrefix(k.kid, "ds_") || k.kid != keyID(k.pub) {
		t.Fatalf("kid %q: want ds_ and the thumbprint", k.kid)
	}
	body := []byte(`{"subscription_id":"s","generation":1}`)
	now := time.Unix(1_700_000_000, 0)
	h := k.Signature(body, now.Unix())
	parts := strings.Split(h, ",")
	if len(parts) != 3 || parts[0] != "t=1700000000" || parts[1] != "kid="+k.kid || !strings.HasPrefix(parts[2], "ed25519=") {
		t.Fatalf("header %q: want t=…,kid=…,ed25519=…", h)
	}
	sig := strings.TrimPrefix(parts[2], "ed25519=")
	if strings.ContainsAny(sig, "+/=") {
		t.Fatalf("signature %q is not unpadded base64url", sig)
	}
	// The signed message is "<t>.<body>", checked with the bare key too.
	raw, _ := base64.RawURLEncoding.DecodeString(sig)
	if !ed25519.Verify(k.pub, []byte("1700000000."+string(body)), raw) {
		t.Fatal("signature does not verify over <t>.<body>")
	}
	if !VerifySignature(k.pub, k.kid, h, body, now.Add(time.Minute), 5*time.Minute) {
		t.Fatal("VerifySignature refuses a good signature")
	}
	for name, tc := range map[string]struct {
		body []byte
		at   time.Time
		hdr  string
	}{
		"changed body":   {[]byte(`{"subscription_id":"t","generation":1}`), now, h},
		"outside skew":   {body, now.Add(6 * time.Minute), h},
		"other kid":      {body, now, strings.Replace(h, k.kid, "ds_other", 1)},
		"other time":     {body, now, strings.Replace(h, "t=1700000000", "t=1700000001", 1)},
		"no signature":   {body, now, "t=1700000000,kid=" + k.kid},
		"garbled base64": {body, now, "t=1700000000,kid=" + k.kid + ",ed25519=!!"},
	} {
		if VerifySignature(k.pub, k.kid, tc.hdr, tc.body, tc.at, 5*time.Minute) {
			t.Errorf("%s: verified", name)
		}
	}
	// The JWK Set names the key as the suite looks for it.
	if j := string((&Set{keys: []*Key{k}}).JWKS(now)); !strings.Contains(j, `"kty":"OKP"`) || !strings.Contains(j, `"crv":"Ed25519"`) ||
		!strings.Contains(j, `"alg":"EdDSA"`) || !strings.Contains(j, `"kid":"`+k.kid+`"`) {
		t.Fatalf("jwks %s", j)
	}
}

func TestWakeToken(t *testing.T) {
	k := testKeys(t)
	want := WakeToken{Root: "v1/stream/", ID: "sub-1", Incarnation: "abc", Generation: 7, WakeID: "w_1"}
	tok := k.MintToken(want)
	got, ok := k.parseToken(tok)
	if !ok || got != want {
		t.Fatalf("round trip: %v %+v", ok, got)
	}
	// Any change to the payload or the MAC is refused.
	p64, m64, _ := strings.Cut(strings.TrimPrefix(tok, tokenPrefix), ".")
	other := k.MintToken(WakeToken{Root: "v1/stream/", ID: "sub-1", Incarnation: "abc", Generation: 8, WakeID: "w_1"})
	o64, _, _ := strings.Cut(strings.TrimPrefix(other, tokenPrefix), ".")
	for _, bad := range []string{"", "dsw_", tok[:len(tok)-1], tokenPrefix + o64 + "." + m64, tokenPrefix + p64, strings.TrimPrefix(tok, tokenPrefix)} {
		if _, ok := k.parseToken(bad); ok {
			t.Errorf("token %q accepted", bad)
		}
	}
	k2 := testKeys(t)
	k2.tokenKey = []byte(strings.Repeat("x", 32))
	if _, ok := k2.parseToken(tok); ok {
		t.Error("a token verified under another key")
	}
}
