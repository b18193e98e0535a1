package signing

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/durable/durabletest"
)

func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	_ = c.Write(&m)
	return m.GetCounter().GetValue()
}

// testLoader is one star's key loader over ms.
func testLoader(ms meta.Store, c *durabletest.Clock) *Loader {
	return NewLoader(ms, RowKey("durable-streams"), c.Now, DefaultKeyRotation, slog.New(slog.DiscardHandler), NewMetrics())
}

// rowKids reads the row's kids straight from the metastore.
func rowKids(t *testing.T, ms meta.Store) []string {
	t.Helper()
	k := RowKey("durable-streams")
	it, err := ms.Get(context.Background(), k.PK, k.SK)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Decode(it.Val)
	if err != nil {
		t.Fatal(err)
	}
	return s.kids()
}

// barrierStore holds the first n Gets after arm until all n arrived, so
// racing stars read the same version of the row and all try to write it.
type barrierStore struct {
	meta.Store
	mu      sync.Mutex
	waiting int
	release chan struct{}
}

func (b *barrierStore) arm(n int) {
	b.mu.Lock()
	b.waiting, b.release = n, make(chan struct{})
	b.mu.Unlock()
}

func (b *barrierStore) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	b.mu.Lock()
	ch := b.release
	if b.waiting > 0 {
		b.waiting--
		if b.waiting == 0 {
			close(ch)
		}
	} else {
		ch = nil
	}
	b.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-time.After(10 * time.Second):
			return meta.Item{}, context.DeadlineExceeded
		}
	}
	return b.Store.Get(ctx, pk, sk)
}

// Stars racing to create the row, then racing each rotation (every one
// reads the same version first), end with one key created and one key
// added per period.
func TestKeyLoadersRace(t *testing.T) {
	ms := &barrierStore{Store: testsvc.SQLite(t)}
	c := durabletest.NewClock()
	ctx := context.Background()
	loaders := []*Loader{testLoader(ms, c), testLoader(ms, c), testLoader(ms, c)}
	race := func(f func(l *Loader) error) {
		t.Helper()
		ms.arm(len(loaders))
		var wg sync.WaitGroup
		errs := make([]error, len(loaders))
		start := make(chan struct{})
		for i, l := range loaders {
			wg.Go(func() {
				<-start
				errs[i] = f(l)
			})
		}
		close(start)
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	race(func(l *Loader) error { _, err := l.Get(ctx); return err })
	first := rowKids(t, ms)
	for _, l := range loaders {
		if kids := l.cached().kids(); len(first) != 1 || !slices.Equal(kids, first) {
			t.Fatalf("created %v, a star holds %v", first, kids)
		}
	}
	prev := first
	for round := range 10 {
		c.Add(DefaultKeyRotation)
		race(func(l *Loader) error { return l.Pass(ctx) })
		kids := rowKids(t, ms)
		var added []string
		for _, k := range kids {
			if !slices.Contains(prev, k) {
				added = append(added, k)
			}
		}
		// The key before the last was dropped (retired a period ago).
		if len(added) != 1 || len(kids) != 2 || kids[0] != prev[len(prev)-1] {
			t.Fatalf("round %d: row %v after %v: want the last key and one new", round, kids, prev)
		}
		var rotations float64
		for _, l := range loaders {
			rotations += counterValue(l.met.rotations.WithLabelValues(rotationScheduled))
			if got := l.cached().kids(); !slices.Equal(got, kids) {
				t.Fatalf("round %d: a star caches %v, the row is %v", round, got, kids)
			}
		}
		if rotations != float64(round+1) {
			t.Fatalf("round %d: %v rotations counted across the stars", round, rotations)
		}
		prev = kids
	}
}

// A token minted before a rotation verifies on another star after it,
// until its key is dropped; a token of the new key reaches a star that
// has not reread the row by a reread its miss triggers (rate-limited).
func TestKeyTokensAcrossRotation(t *testing.T) {
	ms := testsvc.SQLite(t)
	c := durabletest.NewClock()
	ctx := context.Background()
	a, b := testLoader(ms, c), testLoader(ms, c)
	ka, err := a.Get(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx); err != nil {
		t.Fatal(err)
	}
	w := WakeToken{Root: "", ID: "s", Incarnation: "i", Generation: 1, WakeID: "w_1"}
	old := ka.Signer(c.Now()).MintToken(w)
	verify := func(l *Loader, tok string) bool {
		t.Helper()
		got, ok, err := l.Verify(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		if ok && got != w {
			t.Fatalf("verified as %+v", got)
		}
		return ok
	}
	reads := func(l *Loader) float64 { return counterValue(l.met.reloads.WithLabelValues("ok")) }

	c.Add(DefaultKeyRotation)
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if n := len(a.cached().keys); n != 2 {
		t.Fatalf("%d keys after the rotation", n)
	}
	c.Add(KeyPublishLead)
	fresh := a.cached().Signer(c.Now()).MintToken(w)
	if fresh == old {
		t.Fatal("the new key does not sign after the lead")
	}
	before := reads(b)
	if !verify(b, old) {
		t.Fatal("the old token fails on a star after the rotation")
	}
	if reads(b) != before {
		t.Fatal("a token of a cached key caused a reread")
	}
	if !verify(b, fresh) || reads(b) != before+1 {
		t.Fatalf("the new key's token on a star that had not reread: reads %v → %v", before, reads(b))
	}
	// Bad tokens reread at most once per keyMissReload.
	forged := tokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(`{"i":"s"}`)) + ".AAAA"
	if verify(b, forged) || reads(b) != before+1 {
		t.Fatal("a forged token within keyMissReload of the last miss reread the row")
	}
	c.Add(keyMissReload)
	if verify(b, forged) || reads(b) != before+2 {
		t.Fatal("a forged token after keyMissReload did not reread the row once")
	}
	// The old key verifies for KeyRetain after it stopped signing (the
	// clock is keyMissReload past that now).
	c.Add(KeyRetain - keyMissReload - time.Second)
	if !verify(b, old) {
		t.Fatal("the old token fails before its key's retain is over")
	}
	c.Add(time.Second)
	if verify(b, old) {
		t.Fatal("the old token verifies after its key's retain (before the row drops it)")
	}
	if err := b.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if kids := rowKids(t, ms); len(kids) != 1 || !verify(a, fresh) || verify(a, old) {
		t.Fatalf("after the drop: row %v", kids)
	}
	var jwks struct{ Keys []struct{ Kid string } }
	_ = json.Unmarshal(b.cached().JWKS(c.Now()), &jwks)
	if len(jwks.Keys) != 1 || jwks.Keys[0].Kid != a.cached().Signer(c.Now()).kid {
		t.Fatalf("jwks after the drop: %+v", jwks)
	}
}

// Rotation off: no pass adds a key, however old the key.
func TestKeyRotationOff(t *testing.T) {
	ms := testsvc.SQLite(t)
	c := durabletest.NewClock()
	l := NewLoader(ms, RowKey("durable-streams"), c.Now, -1, slog.New(slog.DiscardHandler), NewMetrics())
	if _, err := l.Get(context.Background()); err != nil {
		t.Fatal(err)
	}
	c.Add(10 * 365 * 24 * time.Hour)
	if err := l.Pass(context.Background()); err != nil || len(rowKids(t, ms)) != 1 {
		t.Fatalf("pass with rotation off: %v, %v", err, rowKids(t, ms))
	}
}

// A row an earlier version wrote keeps its kid and its tokens; the first
// pass past the period adds a key beside it.
func TestKeyLegacyRowUpgrade(t *testing.T) {
	ms := testsvc.SQLite(t)
	c := durabletest.NewClock()
	m := testMaterial(42)
	legacy, _ := json.Marshal(map[string]any{"ed25519_seed": m.seed, "token_key": m.tokenKey, "created": c.Now().Add(-90 * 24 * time.Hour)})
	k := RowKey("durable-streams")
	if _, err := ms.Put(context.Background(), k.PK, k.SK, legacy, meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	old, _ := newSigningKey(m, time.Time{}, time.Time{})
	tok := old.MintToken(WakeToken{ID: "s", WakeID: "w"})
	l := testLoader(ms, c)
	s, err := l.Get(context.Background())
	if err != nil || s.Signer(c.Now()).kid != old.kid {
		t.Fatalf("legacy row: %v", err)
	}
	if err := l.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	kids := rowKids(t, ms)
	if len(kids) != 2 || kids[0] != old.kid || l.cached().Signer(c.Now()).kid != old.kid {
		t.Fatalf("after the first pass: %v", kids)
	}
	if _, ok, _ := l.Verify(context.Background(), tok); !ok {
		t.Fatal("the legacy key's token fails after the upgrade's rotation")
	}
}
