package signing

import (
	"bytes"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// testMaterial is deterministic key material number i.
func testMaterial(i int) keyMaterial {
	m := keyMaterial{seed: make([]byte, ed25519.SeedSize), tokenKey: bytes.Repeat([]byte{'k'}, 32)}
	binary.BigEndian.PutUint64(m.seed, uint64(i))
	binary.BigEndian.PutUint64(m.tokenKey, uint64(i))
	return m
}

// The constants keep their promises to each other (and to the
// subscriptions' leases: star/durable/subs's TestKeyRetainCoversAWake).
func TestKeyTimingBounds(t *testing.T) {
	if KeyPublishLead <= JWKSMaxAge+KeyReload {
		t.Errorf("publish lead %v: a receiver may cache a JWK Set without the key (max-age %v) fetched from a star that has not reread the row (%v)", KeyPublishLead, JWKSMaxAge, KeyReload)
	}
	if MinKeyRotation < KeyPublishLead {
		t.Errorf("a period shorter than the lead would add keys before the last one signs")
	}
	if DefaultKeyRotation < MinKeyRotation {
		t.Error("the default is below the minimum")
	}
}

// A table of one set: which key signs, which are published, when each
// retires and is dropped.
func TestKeySetSigner(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, err := firstKeys(t0, testMaterial(1))
	if err != nil {
		t.Fatal(err)
	}
	t1 := t0.Add(30 * 24 * time.Hour)
	if s.due(t1.Add(-time.Second), DefaultKeyRotation) || !s.due(t1, DefaultKeyRotation) || s.due(t1, -1) {
		t.Fatal("due: want exactly at the period, never when off")
	}
	s, err = s.rotated(t1, testMaterial(2), false)
	if err != nil {
		t.Fatal(err)
	}
	a, b := s.keys[0], s.keys[1]
	switchAt := t1.Add(KeyPublishLead)
	if !b.signsFrom.Equal(switchAt) || !s.retiredAt(0).Equal(switchAt) || !s.dropAt(0).Equal(switchAt.Add(KeyRetain)) || !s.dropAt(1).IsZero() {
		t.Fatalf("times: b signs from %v, a retires %v, dropped %v", b.signsFrom, s.retiredAt(0), s.dropAt(0))
	}
	for _, tc := range []struct {
		name   string
		at     time.Time
		signer *Key
		live   []string
	}{
		{"before the rotation", t1.Add(-time.Hour), a, []string{a.kid, b.kid}},
		{"the new key is published, the old signs", t1, a, []string{a.kid, b.kid}},
		{"a second before the lead", switchAt.Add(-time.Second), a, []string{a.kid, b.kid}},
		{"at the lead the new key signs", switchAt, b, []string{a.kid, b.kid}},
		{"the retired key stays for retain", switchAt.Add(KeyRetain - time.Second), b, []string{a.kid, b.kid}},
		{"then it is dropped", switchAt.Add(KeyRetain), b, []string{b.kid}},
		{"a clock behind every start", t0.Add(-time.Hour), a, []string{a.kid, b.kid}},
	} {
		if got := s.Signer(tc.at); got != tc.signer {
			t.Errorf("%s: signer %s, want %s", tc.name, got.kid, tc.signer.kid)
		}
		var live []string
		for _, k := range s.live(tc.at) {
			live = append(live, k.kid)
		}
		if strings.Join(live, ",") != strings.Join(tc.live, ",") {
			t.Errorf("%s: live %v, want %v", tc.name, live, tc.live)
		}
		var jwks struct{ Keys []struct{ Kid string } }
		if err := json.Unmarshal(s.JWKS(tc.at), &jwks); err != nil || len(jwks.Keys) != len(tc.live) {
			t.Errorf("%s: jwks %s", tc.name, s.JWKS(tc.at))
		}
	}
	// The states an operator sees.
	states := func(at time.Time) string {
		var out []string
		for _, i := range s.Info(at) {
			out = append(out, i.State)
		}
		return strings.Join(out, ",")
	}
	if got := states(t1); got != "signing,pending" {
		t.Errorf("at the rotation: %s", got)
	}
	if got := states(switchAt); got != "retired,signing" {
		t.Errorf("after the lead: %s", got)
	}
	if got := states(switchAt.Add(KeyRetain)); got != "signing" {
		t.Errorf("after retain: %s", got)
	}
	p, gone := s.pruned(switchAt.Add(KeyRetain))
	if len(p.keys) != 1 || p.keys[0] != b || len(gone) != 1 || gone[0] != a.kid {
		t.Fatalf("pruned: %v gone %v", p.kids(), gone)
	}
	if p, gone := s.pruned(switchAt); p != s || gone != nil {
		t.Fatal("pruned a key before its drop")
	}
}

// A token verifies under every live key and not after its key is dropped.
func TestKeySetTokens(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, _ := firstKeys(t0, testMaterial(1))
	w := WakeToken{Root: "r/", ID: "s", Incarnation: "i", Generation: 1, WakeID: "w_1"}
	old := s.Signer(t0).MintToken(w)
	s, _ = s.rotated(t0.Add(time.Hour), testMaterial(2), false)
	switchAt := t0.Add(time.Hour + KeyPublishLead)
	fresh := s.Signer(switchAt).MintToken(w)
	if fresh == old {
		t.Fatal("the new signer minted the old key's token")
	}
	for _, tc := range []struct {
		tok  string
		at   time.Time
		want bool
	}{
		{old, switchAt, true},
		{fresh, switchAt, true},
		{old, switchAt.Add(KeyRetain - time.Second), true},
		{old, switchAt.Add(KeyRetain), false},
		{fresh, switchAt.Add(KeyRetain), true},
	} {
		if got, ok := s.parseToken(tc.tok, tc.at); ok != tc.want || ok && got != w {
			t.Errorf("token of %s at %v: %v, want %v", tc.tok[:12], tc.at.Sub(switchAt), ok, tc.want)
		}
	}
	// An emergency rotation keeps no old key: old tokens and kids are gone.
	e, err := s.rotated(switchAt, testMaterial(3), true)
	if err != nil {
		t.Fatal(err)
	}
	if len(e.keys) != 1 || e.Signer(switchAt) != e.keys[0] || !e.keys[0].signsFrom.Equal(switchAt) {
		t.Fatalf("emergency set %v", e.kids())
	}
	if _, ok := e.parseToken(old, switchAt); ok {
		t.Error("an old token verified after an emergency rotation")
	}
	if _, ok := e.parseToken(fresh, switchAt); ok {
		t.Error("the replaced signer's token verified after an emergency rotation")
	}
	if j := string(e.JWKS(switchAt)); strings.Contains(j, s.keys[0].kid) || strings.Contains(j, s.keys[1].kid) {
		t.Errorf("old kids in the JWK Set after an emergency rotation: %s", j)
	}
}

// Manual rotations in a row keep starts in order and stop at maxKeys.
func TestKeySetManualRotations(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	s, _ := firstKeys(t0, testMaterial(1))
	var err error
	for i := 2; i <= maxKeys; i++ {
		if s, err = s.rotated(t0.Add(time.Duration(i)*time.Second), testMaterial(i), false); err != nil {
			t.Fatalf("rotation %d: %v", i, err)
		}
	}
	for i := 1; i < len(s.keys); i++ {
		if s.keys[i].signsFrom.Before(s.keys[i-1].signsFrom) {
			t.Fatalf("key %d starts before key %d", i, i-1)
		}
	}
	if _, err := s.rotated(t0.Add(time.Minute), testMaterial(99), false); !errors.Is(err, ErrTooManyKeys) {
		t.Fatalf("rotation past maxKeys: %v", err)
	}
	// Once the retired keys are dropped there is room again.
	later := s.keys[len(s.keys)-1].signsFrom.Add(KeyRetain)
	if _, err := s.rotated(later, testMaterial(99), false); err != nil {
		t.Fatalf("rotation after the drops: %v", err)
	}
	// An emergency always goes through.
	if e, err := s.rotated(t0.Add(time.Minute), testMaterial(99), true); err != nil || len(e.keys) != 1 {
		t.Fatalf("emergency at maxKeys: %v", err)
	}
}

// A simulated deployment over a year of random passes: at every instant
// exactly one live key signs, a key signs only after it was published for
// the lead (the first excepted), a token verifies from its minting until
// its key's drop, and the row stays small.
func TestKeySetLifecycle(t *testing.T) {
	for seed := range uint64(8) {
		rng := rand.New(rand.NewPCG(seed, 1))
		period := MinKeyRotation + time.Duration(rng.Int64N(int64(40*24*time.Hour)))
		if seed%2 == 0 { // the short periods, where keys overlap most
			period = MinKeyRotation + time.Duration(rng.Int64N(int64(30*time.Minute)))
		}
		t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		s, _ := firstKeys(t0, testMaterial(0))
		first := s.keys[0].kid
		type minted struct {
			tok string
			kid string
		}
		var toks []minted
		dropAt := map[string]time.Time{} // kid → when the set dropped it
		n := 1
		for now := t0; now.Before(t0.Add(365 * 24 * time.Hour)); now = now.Add(time.Duration(rng.Int64N(int64(8 * time.Hour)))) {
			// A pass: prune, and rotate when due.
			p, _ := s.pruned(now)
			if p.due(now, period) {
				var err error
				if p, err = p.rotated(now, testMaterial(n), false); err != nil {
					t.Fatalf("seed %d: rotation: %v", seed, err)
				}
				n++
			}
			for i := range p.keys {
				if d := p.dropAt(i); !d.IsZero() {
					dropAt[p.keys[i].kid] = d
				}
			}
			s = p
			if most := 3 - min(int(period/(KeyPublishLead+KeyRetain)), 1); len(s.keys) > most {
				t.Fatalf("seed %d period %v: %d keys, want at most %d", seed, period, len(s.keys), most)
			}
			// Check a few instants up to the next pass.
			for range 2 {
				at := now.Add(time.Duration(rng.Int64N(int64(8 * time.Hour))))
				sig := s.Signer(at)
				if sig.kid != first && at.Sub(sig.created) < KeyPublishLead {
					t.Fatalf("seed %d: %s signs %v after it was published", seed, sig.kid, at.Sub(sig.created))
				}
				if !strings.Contains(string(s.JWKS(at)), sig.kid) {
					t.Fatalf("seed %d: the signer is not in the JWK Set", seed)
				}
				for _, m := range toks {
					_, ok := s.parseToken(m.tok, at)
					d, retired := dropAt[m.kid]
					if want := !retired || at.Before(d); ok != want {
						t.Fatalf("seed %d: token of %s at %v (drop %v): %v", seed, m.kid, at, d, ok)
					}
				}
			}
			sig := s.Signer(now)
			toks = append(toks, minted{sig.MintToken(WakeToken{ID: "x", Generation: uint64(len(toks))}), sig.kid})
			if len(toks) > 12 {
				toks = toks[1:]
			}
		}
		if n < 2 {
			t.Fatalf("seed %d: no rotation in a year at period %v", seed, period)
		}
	}
}

// A row written before rotation is one key: its kid and its tokens stay.
// A new row also carries the signer in the old fields, for stars of an
// earlier version.
func TestKeysRowCompat(t *testing.T) {
	m := testMaterial(7)
	created := time.Date(2025, 6, 1, 0, 0, 0, 0, time.UTC)
	legacy, _ := json.Marshal(map[string]any{"ed25519_seed": m.seed, "token_key": m.tokenKey, "created": created})
	s, err := Decode(legacy)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := newSigningKey(m, created, created)
	if len(s.keys) != 1 || s.keys[0].kid != want.kid || !s.keys[0].created.Equal(created) {
		t.Fatalf("legacy row: %v", s.kids())
	}
	w := WakeToken{Root: "r/", ID: "s", Incarnation: "i", Generation: 3, WakeID: "w"}
	if got, ok := s.parseToken(want.MintToken(w), created.Add(400*24*time.Hour)); !ok || got != w {
		t.Fatal("a token of the legacy key does not verify")
	}
	// Rotated and written: the set round-trips, the legacy fields hold
	// the key signing at the write.
	now := created.Add(400 * 24 * time.Hour)
	r, err := s.rotated(now, testMaterial(8), false)
	if err != nil {
		t.Fatal(err)
	}
	for _, at := range []time.Time{now, now.Add(KeyPublishLead)} {
		b := r.encode(at)
		back, err := Decode(b)
		if err != nil || strings.Join(back.kids(), ",") != strings.Join(r.kids(), ",") {
			t.Fatalf("round trip: %v %v", back.kids(), err)
		}
		for i := range back.keys {
			if !back.keys[i].signsFrom.Equal(r.keys[i].signsFrom) || !back.keys[i].created.Equal(r.keys[i].created) {
				t.Fatalf("round trip key %d: times differ", i)
			}
		}
		var old struct {
			Seed     []byte `json:"ed25519_seed"`
			TokenKey []byte `json:"token_key"`
		}
		_ = json.Unmarshal(b, &old)
		if !bytes.Equal(old.Seed, r.Signer(at).priv.Seed()) || !bytes.Equal(old.TokenKey, r.Signer(at).tokenKey) {
			t.Fatalf("written at %v: the legacy fields do not hold the signer", at.Sub(now))
		}
	}
	for _, bad := range []string{`{}`, `{"keys":[{"ed25519_seed":"AAAA","token_key":"AAAA"}]}`, `not json`} {
		if _, err := Decode([]byte(bad)); err == nil {
			t.Errorf("%s decoded", bad)
		}
	}
}
