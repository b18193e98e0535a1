package subs

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
// JWK Set) and wake tokens. Which key signs is subs_keyset.go's rule.

// jwks is the public JWK Set (protocol §6.5) at now: every key not
// dropped, so a receiver finds a new kid before it signs and an old one
// while its signatures may still arrive.
func (s *keySet) jwks(now time.Time) []byte {
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

// signature is the Webhook-Signature header of body at unix time t:
// "t=<t>,kid=<kid>,ed25519=<base64url signature of "<t>.<body>">".
func (k *signingKey) signature(body []byte, t int64) string {
	ts := strconv.FormatInt(t, 10)
	msg := append([]byte(ts+"."), body...)
	return "t=" + ts + ",kid=" + k.kid + ",ed25519=" + base64.RawURLEncoding.EncodeToString(ed25519.Sign(k.priv, msg))
}

// verifySignature checks a Webhook-Signature header as a receiver would
// (the tests use it): the key, the signature, and t within maxSkew of now.
func verifySignature(pub ed25519.PublicKey, kid, header string, body []byte, now time.Time, maxSkew time.Duration) bool {
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

// wakeToken is what a callback or claim token stands for: one wake of one
// subscription. It is stateless (HMAC-signed), so any star verifies it;
// the row decides whether the wake is still current (checkWake).
type wakeToken struct {
	Root        string `json:"r"`
	ID          string `json:"i"`
	Incarnation string `json:"n"`
	Generation  uint64 `json:"g"`
	WakeID      string `json:"w"`
}

const tokenPrefix = "dsw_"

// mintToken signs a wake token with k (the signing key at the time).
func (k *signingKey) mintToken(t wakeToken) string {
	payload, _ := json.Marshal(t)
	mac := hmac.New(sha256.New, k.tokenKey)
	mac.Write(payload)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

// parseToken verifies a wake token under every key live at now.
func (s *keySet) parseToken(tok string, now time.Time) (wakeToken, bool) {
	for _, k := range s.live(now) {
		if t, ok := k.parseToken(tok); ok {
			return t, true
		}
	}
	return wakeToken{}, false
}

func (k *signingKey) parseToken(s string) (wakeToken, bool) {
	body, ok := strings.CutPrefix(s, tokenPrefix)
	if !ok {
		return wakeToken{}, false
	}
	p64, m64, ok := strings.Cut(body, ".")
	if !ok {
		return wakeToken{}, false
	}
	payload, err1 := base64.RawURLEncoding.DecodeString(p64)
	got, err2 := base64.RawURLEncoding.DecodeString(m64)
	if err1 != nil || err2 != nil {
		return wakeToken{}, false
	}
	mac := hmac.New(sha256.New, k.tokenKey)
	mac.Write(payload)
	if !hmac.Equal(got, mac.Sum(nil)) {
		return wakeToken{}, false
	}
	var t wakeToken
	if err := json.Unmarshal(payload, &t); err != nil {
		return wakeToken{}, false
	}
	return t, true
}
