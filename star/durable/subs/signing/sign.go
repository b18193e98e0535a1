package signing

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// What the subscription keys sign: webhook signatures (published in the
// JWK Set) and wake tokens. Which key signs is keyset.go's rule.

// JWKS is the public JWK Set (protocol §6.5) at now: every key not
// dropped, so a receiver finds a new kid before it signs and an old one
// while its signatures may still arrive.
func (s *Set) JWKS(now time.Time) []byte {
	keys := []map[string]string{}
	for _, k := range s.live(now) {
		keys = append(keys, map[string]string{
			"kty": "OKP", "crv": "Ed25519", "kid": k.kid, "use": "sig", "alg": "EdDSA",
			"x": base64.RawURLEncoding.EncodeToString(k.pub),
		})
	}
	b, _ := json.Marshal(map[string]any{"keys": keys})
	return b
}

// Kid is the key's id (its thumbprint), as the JWK Set and signatures
// name it.
func (k *Key) Kid() string { return k.kid }

// Signature is the Webhook-Signature header of body at unix time t:
// "t=<t>,kid=<kid>,ed25519=<base64url signature of "<t>.<body>">".
func (k *Key) Signature(body []byte, t int64) string {
	ts := strconv.FormatInt(t, 10)
	msg := append([]byte(ts+"."), body...)
	return "t=" + ts + ",kid=" + k.kid + ",ed25519=" + base64.RawURLEncoding.EncodeToString(ed25519.Sign(k.priv, msg))
}

// VerifySignature checks a Webhook-Signature header as a receiver would
// (the tests use it): the key, the signature, and t within maxSkew of now.
func VerifySignature(pub ed25519.PublicKey, kid, header string, body []byte, now time.Time, maxSkew time.Duration) bool {
	var ts, gotKid, sig string
	for _, part := range strings.Split(header, ",") {
		k, v, _ := strings.Cut(part, "=")
		switch k {
		case "t":
			ts = v
		case "kid":
			gotKid = v
		case "ed25519":
			sig = v
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || gotKid != kid {
		return false
	}
	if d := now.Sub(time.Unix(t, 0)); d > maxSkew || d < -maxSkew {
		return false
	}
	raw, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		return false
	}
	return ed25519.Verify(pub, append([]byte(ts+"."), body...), raw)
}

// WakeToken is what a callback or claim token stands for: one wake of one
// subscription. It is stateless (HMAC-signed), so any star verifies it;
// the row decides whether the wake is still current (checkWake).
type WakeToken struct {
	Root        string `json:"r"`
	ID          string `json:"i"`
	Incarnation string `json:"n"`
	Generation  uint64 `json:"g"`
	WakeID      string `json:"w"`
}

const tokenPrefix = "dsw_"

// MintToken signs a wake token with k (the signing key at the time).
func (k *Key) MintToken(t WakeToken) string {
	payload, _ := json.Marshal(t)
	mac := hmac.New(sha256.New, k.tokenKey)
	mac.Write(payload)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// parseToken verifies a wake token under every key live at now.
func (s *Set) parseToken(tok string, now time.Time) (WakeToken, bool) {
	for _, k := range s.live(now) {
		if t, ok := k.parseToken(tok); ok {
			return t, true
		}
	}
	return WakeToken{}, false
}

func (k *Key) parseToken(s string) (WakeToken, bool) {
	body, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return WakeToken{}, false
	}
	p64, m64, ok := strings.Cut(body, ".")
	if !ok {
		return WakeToken{}, false
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p64)
	got, err2 := base64.RawURLEncoding.DecodeString(m64)
	if err1 != nil || err2 != nil {
		return WakeToken{}, false
	}
	mac := hmac.New(sha256.New, k.tokenKey)
	mac.Write(payload)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return WakeToken{}, false
	}
	var t WakeToken
	if err := json.Unmarshal(payload, &t); err != nil {
		return WakeToken{}, false
	}
	return t, true
}
