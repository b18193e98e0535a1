package signing

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// The subscription keys rotate (docs/durable-streams.md, "Where it
// lives"). This file is the pure part: the key set the row holds, which
// key signs at a time, and what a rotation or a drop makes of the set.
// Every rule takes the time as an argument; loader.go does the I/O.

// Timing of the subscription keys.
const (
	// DefaultKeyRotation is how often a new key is added when
	// Config.KeyRotation is 0.
	DefaultKeyRotation = 30 * 24 * time.Hour
	// MinKeyRotation is the shortest rotation period: with KeyPublishLead
	// and KeyRetain below it the row holds at most three keys.
	MinKeyRotation = time.Hour
	// JWKSMaxAge is the JWK Set's Cache-Control max-age.
	JWKSMaxAge = 5 * time.Minute
	// KeyReload is how often a star rereads the keys row (and adds or
	// drops a key when one is due).
	KeyReload = time.Minute
	// KeyPublishLead is how long a new key is in the JWK Set before it
	// signs: longer than the last star takes to learn of it (KeyReload)
	// plus a receiver's cache of the JWK Set (JWKSMaxAge), so a receiver
	// knows the kid before a signature uses it.
	KeyPublishLead = 10 * time.Minute
	// KeyRetain is how long a key stays in the row after it stopped
	// signing: its webhooks in flight (subs' webhookTimeout) and those of stars
	// that have not reread the row (KeyReload) still verify, and so do
	// its wake tokens, used between callbacks at most a lease apart
	// (subs' maxLeaseTTL).
	KeyRetain = time.Hour
	// keyMissReload spaces the rereads a token that verifies under none
	// of the cached keys triggers (a key another star just added).
	keyMissReload = 5 * time.Second
	// maxKeys bounds the keys in the row.
	maxKeys = 8
)

// ErrTooManyKeys refuses a rotation that would hold more than maxKeys.
var ErrTooManyKeys = fmt.Errorf("durable: the subscription keys row holds %d keys; wait until retired ones are dropped", maxKeys)

// Key is one subscription key: the Ed25519 key that signs webhooks
// and the HMAC key of wake tokens, when it was added and when it starts
// signing.
type Key struct {
	priv      ed25519.PrivateKey
	pub       ed25519.PublicKey
	kid       string
	tokenKey  []byte
	created   time.Time
	signsFrom time.Time
}

// keyMaterial is a new key's secrets (random; passed in so the rules stay
// deterministic).
type keyMaterial struct {
	seed, tokenKey []byte
}

func newSigningKey(m keyMaterial, created, signsFrom time.Time) (*Key, error) {
	if len(m.seed) != ed25519.SeedSize || len(m.tokenKey) < 32 {
		return nil, errors.New("durable: malformed subscription key")
	}
	priv := ed25519.NewKeyFromSeed(m.seed)
	pub := priv.Public().(ed25519.PublicKey)
	return &Key{priv: priv, pub: pub, kid: keyID(pub), tokenKey: m.tokenKey, created: created.UTC(), signsFrom: signsFrom.UTC()}, nil
}

// keyID derives the kid from the key (protocol §6.5 asks for one stable
// for the key's life): "ds_" and the RFC 7638 JWK thumbprint.
func keyID(pub ed25519.PublicKey) string {
	// The thumbprint hashes the required members in lexical order.
	canon := `{"crv":"Ed25519","kty":"OKP","x":"` + base64.RawURLEncoding.EncodeToString(pub) + `"}`
	sum := sha256.Sum256([]byte(canon))
	return "ds_" + base64.RawURLEncoding.EncodeToString(sum[:])
}

// Set is the keys of the row, in the order they were added; their
// starts never decrease. A key signs from its start until the next key's
// (it is then retired) and is dropped KeyRetain after that. Until dropped
// it is in the JWK Set and verifies wake tokens.
type Set struct{ keys []*Key }

// retiredAt is when key i stopped signing: the next key's start (zero for
// the newest).
func (s *Set) retiredAt(i int) time.Time {
	if i+1 < len(s.keys) {
		return s.keys[i+1].signsFrom
	}
	return time.Time{}
}

// dropAt is when key i leaves the set (zero for the newest).
func (s *Set) dropAt(i int) time.Time {
	if r := s.retiredAt(i); !r.IsZero() {
		return r.Add(KeyRetain)
	}
	return time.Time{}
}

func (s *Set) dropped(i int, now time.Time) bool {
	d := s.dropAt(i)
	return !d.IsZero() && !now.Before(d)
}

// Signer is the key that signs at now: the newest that has started. A
// clock behind the writer's may find none started; the oldest key, which
// signed before the others were added, signs then.
func (s *Set) Signer(now time.Time) *Key {
	k := s.keys[0]
	for _, c := range s.keys[1:] {
		if !now.Before(c.signsFrom) {
			k = c
		}
	}
	return k
}

// live are the keys not dropped at now: the JWK Set, and the keys a wake
// token may verify under (the set as the row last held it: a key past its
// drop is refused even before a star removes it from the row).
func (s *Set) live(now time.Time) []*Key {
	out := make([]*Key, 0, len(s.keys))
	for i, k := range s.keys {
		if !s.dropped(i, now) {
			out = append(out, k)
		}
	}
	return out
}

// pruned is the set without the keys dropped at now, and their kids.
func (s *Set) pruned(now time.Time) (*Set, []string) {
	var gone []string
	for i, k := range s.keys {
		if s.dropped(i, now) {
			gone = append(gone, k.kid)
		}
	}
	if gone == nil {
		return s, nil
	}
	return &Set{keys: s.live(now)}, gone
}

// due reports whether a scheduled rotation is due at now: the newest key
// is a period old. Never when period ≤ 0.
func (s *Set) due(now time.Time, period time.Duration) bool {
	return period > 0 && !now.Before(s.keys[len(s.keys)-1].created.Add(period))
}

// rotated is the set after a rotation at now with new key material (the
// dropped keys pruned): the new key is published at once and signs
// KeyPublishLead later (no earlier than the newest key's start), while
// the current signer goes on until then. An emergency rotation replaces
// every key with the new one, signing at once.
func (s *Set) rotated(now time.Time, m keyMaterial, emergency bool) (*Set, error) {
	if emergency {
		k, err := newSigningKey(m, now, now)
		if err != nil {
			return nil, err
		}
		return &Set{keys: []*Key{k}}, nil
	}
	p, _ := s.pruned(now)
	if len(p.keys) >= maxKeys {
		return nil, ErrTooManyKeys
	}
	from := now.Add(KeyPublishLead)
	if last := p.keys[len(p.keys)-1].signsFrom; from.Before(last) {
		from = last
	}
	k, err := newSigningKey(m, now, from)
	if err != nil {
		return nil, err
	}
	return &Set{keys: append(p.keys[:len(p.keys):len(p.keys)], k)}, nil
}

// firstKeys is the set of a row created at now: one key, signing at once
// (no receiver has seen a JWK Set yet).
func firstKeys(now time.Time, m keyMaterial) (*Set, error) {
	k, err := newSigningKey(m, now, now)
	if err != nil {
		return nil, err
	}
	return &Set{keys: []*Key{k}}, nil
}

// kids lists the set's kids in order.
func (s *Set) kids() []string {
	out := make([]string, len(s.keys))
	for i, k := range s.keys {
		out[i] = k.kid
	}
	return out
}

// keysRow is the metastore row. Keys is the set. The other fields are
// the row as stars before rotation wrote it (one key, forever): such a
// row reads as a one-key set, keeping its kid and tokens; a new row holds
// the key that signed when it was written there too, so a star of an
// earlier version (which reads only those and never rereads) still finds
// a key during a rolling upgrade.
type keysRow struct {
	Keys     []keyEntry `json:"keys,omitempty"`
	Seed     []byte     `json:"ed25519_seed"` // base64 in JSON
	TokenKey []byte     `json:"token_key"`
	Created  time.Time  `json:"created"`
}

type keyEntry struct {
	Seed      []byte    `json:"ed25519_seed"`
	TokenKey  []byte    `json:"token_key"`
	Created   time.Time `json:"created"`
	SignsFrom time.Time `json:"signs_from"`
}

// Decode reads a keys row, either shape.
func Decode(val []byte) (*Set, error) {
	var r keysRow
	if err := json.Unmarshal(val, &r); err != nil {
		return nil, fmt.Errorf("durable: decode subscription keys: %w", err)
	}
	entries := r.Keys
	if len(entries) == 0 {
		// The single-key row: the key signs from its creation on.
		entries = []keyEntry{{Seed: r.Seed, TokenKey: r.TokenKey, Created: r.Created, SignsFrom: r.Created}}
	}
	s := &Set{keys: make([]*Key, 0, len(entries))}
	for _, e := range entries {
		k, err := newSigningKey(keyMaterial{seed: e.Seed, tokenKey: e.TokenKey}, e.Created, e.SignsFrom)
		if err != nil {
			return nil, errors.New("durable: malformed subscription keys row")
		}
		s.keys = append(s.keys, k)
	}
	return s, nil
}

// encode is the row of the set, written at now.
func (s *Set) encode(now time.Time) []byte {
	r := keysRow{Keys: make([]keyEntry, len(s.keys))}
	for i, k := range s.keys {
		r.Keys[i] = keyEntry{Seed: k.priv.Seed(), TokenKey: k.tokenKey, Created: k.created, SignsFrom: k.signsFrom}
	}
	sig := s.Signer(now)
	r.Seed, r.TokenKey, r.Created = sig.priv.Seed(), sig.tokenKey, sig.created
	b, _ := json.Marshal(r)
	return b
}

// KeyInfo describes one subscription key to an operator (no secrets).
type KeyInfo struct {
	Kid string `json:"kid"`
	// State is pending (published, not signing yet), signing or retired
	// (published until DropAt, verifying the wake tokens it minted).
	State      string    `json:"state"`
	Created    time.Time `json:"created"`
	SignsFrom  time.Time `json:"signs_from"`
	SignsUntil time.Time `json:"signs_until,omitzero"` // the next key's start
	DropAt     time.Time `json:"drop_at,omitzero"`
}

// Info describes the live keys at now.
func (s *Set) Info(now time.Time) []KeyInfo {
	sig := s.Signer(now)
	var out []KeyInfo
	for i, k := range s.keys {
		if s.dropped(i, now) {
			continue
		}
		state := "retired"
		switch {
		case k == sig:
			state = "signing"
		case now.Before(k.signsFrom):
			state = "pending"
		}
		out = append(out, KeyInfo{Kid: k.kid, State: state, Created: k.created, SignsFrom: k.signsFrom,
			SignsUntil: s.retiredAt(i), DropAt: s.dropAt(i)})
	}
	return out
}
