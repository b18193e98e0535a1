package durable

import (
	"context"
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// subKeys are the basin's subscription secrets: the Ed25519 key that
// signs webhooks and the HMAC key of wake tokens. They are one metastore
// row, created once (IfAbsent) by the first star that needs them, so every
// star signs with the same key and verifies the same tokens, across
// restarts. Whoever can read the metastore can read them.
type subKeys struct {
	priv     ed25519.PrivateKey
	pub      ed25519.PublicKey
	kid      string
	tokenKey []byte
}

type keysRow struct {
	Seed     []byte    `json:"ed25519_seed"` // base64 in JSON
	TokenKey []byte    `json:"token_key"`
	Created  time.Time `json:"created"`
}

func keysKey(basin string) meta.Key { return meta.Key{PK: "ds#" + basin, SK: "k#subscriptions"} }

func keysFrom(r keysRow) (*subKeys, error) {
	if len(r.Seed) != ed25519.SeedSize || len(r.TokenKey) < 32 {
		return nil, errors.New("durable: malformed subscription keys row")
	}
	priv := ed25519.NewKeyFromSeed(r.Seed)
	pub := priv.Public().(ed25519.PublicKey)
	return &subKeys{priv: priv, pub: pub, kid: keyID(pub), tokenKey: r.TokenKey}, nil
}

// keyID derives the kid from the key (protocol §6.5 asks for one stable
// for the key's life): "ds_" and the RFC 7638 JWK thumbprint.
func keyID(pub ed25519.PublicKey) string {
	// The thumbprint hashes the required members in lexical order.
	canon := `{"crv":"Ed25519","kty":"OKP","x":"` + base64.RawURLEncoding.EncodeToString(pub) + `"}`
	sum := sha256.Sum256([]byte(canon))
	return "ds_" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// keyLoader loads the keys once per star (retrying after a failure).
type keyLoader struct {
	mu    sync.Mutex
	keys  *subKeys
	store meta.Store
	key   meta.Key
}

func (l *keyLoader) get(ctx context.Context) (*subKeys, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.keys != nil {
		return l.keys, nil
	}
	for range 4 {
		it, err := l.store.Get(ctx, l.key.PK, l.key.SK)
		if err == nil {
			var r keysRow
			if err := json.Unmarshal(it.Val, &r); err != nil {
				return nil, fmt.Errorf("durable: decode subscription keys: %w", err)
			}
			k, err := keysFrom(r)
			if err != nil {
				return nil, err
			}
			l.keys = k
			return k, nil
		}
		if !errors.Is(err, meta.ErrNotFound) {
			return nil, &metaError{err}
		}
		r := keysRow{Seed: make([]byte, ed25519.SeedSize), TokenKey: make([]byte, 32), Created: time.Now().UTC()}
		_, _ = rand.Read(r.Seed)
		_, _ = rand.Read(r.TokenKey)
		val, _ := json.Marshal(r)
		if _, err := l.store.Put(ctx, l.key.PK, l.key.SK, val, meta.IfAbsent()); err != nil && !errors.Is(err, meta.ErrConditionFailed) {
			return nil, &metaError{err}
		}
		// Created, or another star created it first: read what won.
	}
	return nil, errors.New("durable: subscription keys row kept changing")
}

// jwks is the public JWK Set (protocol §6.5).
func (k *subKeys) jwks() []byte {
	b, _ := json.Marshal(map[string]any{"keys": []map[string]string{{
		"kty": "OKP", "crv": "Ed25519", "kid": k.kid, "use": "sig", "alg": "EdDSA",
		"x": base64.RawURLEncoding.EncodeToString(k.pub),
	}}})
	return b
}

// signature is the Webhook-Signature header of body at unix time t:
// "t=<t>,kid=<kid>,ed25519=<base64url signature of "<t>.<body>">".
func (k *subKeys) signature(body []byte, t int64) string {
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

func (k *subKeys) mintToken(t wakeToken) string {
	payload, _ := json.Marshal(t)
	mac := hmac.New(sha256.New, k.tokenKey)
	mac.Write(payload)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(mac.Sum(nil))
}

func (k *subKeys) parseToken(s string) (wakeToken, bool) {
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
