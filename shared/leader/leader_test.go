package leader_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/sqlite"
)

func store(t *testing.T) meta.Store {
	t.Helper()
	ms, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	return ms
}

func TestLive(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	const dead = 30 * time.Second
	fresh := meta.Registration{Incarnation: 4, State: meta.StarLive, Heartbeat: now.Add(-29 * time.Second).UnixMilli()}
	cases := []struct {
		name  string
		reg   meta.Registration
		inc   uint64
		live  bool
		stale bool
	}{
		{"fresh", fresh, 4, true, false},
		{"other incarnation", fresh, 3, false, false},
		{"draining is live", func() meta.Registration { r := fresh; r.State = meta.StarDraining; return r }(), 4, true, false},
		{"stopped", func() meta.Registration { r := fresh; r.State = meta.StarStopped; return r }(), 4, false, false},
		{"dead", func() meta.Registration { r := fresh; r.State = meta.StarDead; return r }(), 4, false, false},
		{"at the bound", func() meta.Registration { r := fresh; r.Heartbeat = now.Add(-dead).UnixMilli(); return r }(), 4, false, true},
		{"old", func() meta.Registration { r := fresh; r.Heartbeat = now.Add(-time.Hour).UnixMilli(); return r }(), 4, false, true},
	}
	for _, c := range cases {
		if got := leader.Live(c.reg, c.inc, now, dead); got != c.live {
			t.Errorf("%s: Live = %v, want %v", c.name, got, c.live)
		}
		if got := leader.Stale(c.reg, now, dead); got != c.stale {
			t.Errorf("%s: Stale = %v, want %v", c.name, got, c.stale)
		}
	}
}

// PresumeDead over the edges of a whole-cluster metastore outage, a
// single partitioned or dead star, witnesses that cannot testify, and
// rows from before ConnectedSince.
func TestPresumeDead(t *testing.T) {
	now := time.UnixMilli(10_000_000)
	const bound = 2 * time.Second
	at := func(d time.Duration) int64 { return now.Add(d).UnixMilli() }
	x := func(beat time.Duration) meta.Registration {
		return meta.Registration{Incarnation: 3, State: meta.StarLive, StartedAt: at(-time.Hour), ConnectedSince: at(-time.Hour), Heartbeat: at(beat)}
	}
	w := func(star string, since, beat time.Duration) leader.Witness {
		return leader.Witness{Star: star, Reg: meta.Registration{Incarnation: 1, State: meta.StarLive, StartedAt: at(-time.Hour), ConnectedSince: at(since), Heartbeat: at(beat)}}
	}
	with := func(wt leader.Witness, f func(*meta.Registration)) leader.Witness { f(&wt.Reg); return wt }
	for _, c := range []struct {
		name      string
		reg       meta.Registration
		witnesses []leader.Witness
		by        string
	}{
		{name: "fresh", reg: x(-time.Second), witnesses: []leader.Witness{w("y", -time.Hour, 0)}},
		{name: "stale, no witness", reg: x(-time.Hour)},
		{name: "only its own row", reg: x(-3 * time.Second), witnesses: []leader.Witness{w("x", -time.Hour, 0)}},
		// The verify run's start of an outage: x's last beat 2.1 s old, the
		// others' 1.5 s: nobody beat a bound after x did.
		{name: "outage start", reg: x(-2100 * time.Millisecond), witnesses: []leader.Witness{w("y", -time.Hour, -1500*time.Millisecond), w("z", -time.Hour, -1450*time.Millisecond)}},
		// Its end: a peer beat 62 ms ago, the first beat after its failed ones.
		{name: "outage end", reg: x(-5 * time.Second), witnesses: []leader.Witness{w("y", -62*time.Millisecond, -62*time.Millisecond)}},
		{name: "outage end, a peer reconnected for less than a bound", reg: x(-5 * time.Second), witnesses: []leader.Witness{w("y", -1999*time.Millisecond, 0)}},
		{name: "outage end, x still silent a bound after a peer came back", reg: x(-5 * time.Second), witnesses: []leader.Witness{w("y", -2*time.Second, 0)}, by: "y"},
		{name: "x alone cut off", reg: x(-2200 * time.Millisecond), witnesses: []leader.Witness{w("y", -time.Hour, -100*time.Millisecond)}, by: "y"},
		{name: "x died long ago", reg: x(-time.Hour), witnesses: []leader.Witness{w("y", -time.Minute, -100*time.Millisecond)}, by: "y"},
		{name: "exactly a bound", reg: x(-3 * time.Second), witnesses: []leader.Witness{w("y", -3*time.Second, -time.Second)}, by: "y"},
		{name: "a millisecond short", reg: x(-3 * time.Second), witnesses: []leader.Witness{w("y", -3*time.Second, -time.Second-time.Millisecond)}},
		{name: "run began after x's last beat, a bound ago", reg: x(-3 * time.Second), witnesses: []leader.Witness{w("y", -2500*time.Millisecond, -400*time.Millisecond)}, by: "y"},
		{name: "witness stale now", reg: x(-time.Hour), witnesses: []leader.Witness{w("y", -time.Hour, -bound)}},
		{name: "witness dead", reg: x(-time.Hour), witnesses: []leader.Witness{with(w("y", -time.Hour, 0), func(r *meta.Registration) { r.State = meta.StarDead })}},
		{name: "witness stopped", reg: x(-time.Hour), witnesses: []leader.Witness{with(w("y", -time.Hour, 0), func(r *meta.Registration) { r.State = meta.StarStopped })}},
		{name: "witness draining", reg: x(-time.Hour), witnesses: []leader.Witness{with(w("y", -time.Hour, 0), func(r *meta.Registration) { r.State = meta.StarDraining })}, by: "y"},
		{name: "x draining", reg: func() meta.Registration { r := x(-time.Hour); r.State = meta.StarDraining; return r }(), witnesses: []leader.Witness{w("y", -time.Hour, 0)}, by: "y"},
		{name: "x already dead", reg: func() meta.Registration { r := x(-time.Hour); r.State = meta.StarDead; return r }(), witnesses: []leader.Witness{w("y", -time.Hour, 0)}},
		{name: "x stopped", reg: func() meta.Registration { r := x(-time.Hour); r.State = meta.StarStopped; return r }(), witnesses: []leader.Witness{w("y", -time.Hour, 0)}},
		{name: "the second witness testifies", reg: x(-5 * time.Second), witnesses: []leader.Witness{w("y", -time.Second, 0), w("x", -time.Hour, 0), w("z", -time.Hour, -10*time.Millisecond)}, by: "z"},
		// Rolling upgrade: a row without ConnectedSince is read as
		// connected since it started.
		{name: "old witness, outage start", reg: x(-2100 * time.Millisecond), witnesses: []leader.Witness{with(w("y", 0, -1500*time.Millisecond), func(r *meta.Registration) { r.ConnectedSince = 0 })}},
		{name: "old witness, outage end (the old rule's flaw, kept while old stars run)", reg: x(-5 * time.Second), witnesses: []leader.Witness{with(w("y", 0, -62*time.Millisecond), func(r *meta.Registration) { r.ConnectedSince = 0 })}, by: "y"},
		{name: "old witness started after x's last beat", reg: x(-5 * time.Second), witnesses: []leader.Witness{with(w("y", 0, 0), func(r *meta.Registration) { r.ConnectedSince, r.StartedAt = 0, at(-time.Second) })}},
		{name: "old x row", reg: func() meta.Registration { r := x(-3 * time.Second); r.ConnectedSince = 0; return r }(), witnesses: []leader.Witness{w("y", -time.Hour, 0)}, by: "y"},
	} {
		t.Run(c.name, func(t *testing.T) {
			by, dead := leader.PresumeDead("x", c.reg, c.witnesses, now, bound)
			if by != c.by || dead != (c.by != "") {
				t.Fatalf("PresumeDead = %q %v, want %q", by, dead, c.by)
			}
		})
	}
}

// MarkPresumedDead judges the row it reads: a heartbeat that landed since
// the witnesses were read spares the star.
func TestMarkPresumedDead(t *testing.T) {
	ctx := context.Background()
	ms := store(t)
	now := time.Now()
	const bound = 2 * time.Second
	ys := []leader.Witness{{Star: "y", Reg: meta.Registration{Incarnation: 1, State: meta.StarLive, ConnectedSince: now.Add(-time.Hour).UnixMilli(), Heartbeat: now.UnixMilli()}}}
	// Stale, but a peer's last beat is no bound younger: an outage's start.
	putReg(t, ms, "a", meta.Registration{Incarnation: 2, State: meta.StarLive, Heartbeat: now.Add(-bound).UnixMilli()})
	early := []leader.Witness{{Star: "y", Reg: ys[0].Reg}}
	early[0].Reg.Heartbeat = now.Add(-time.Second).UnixMilli()
	if r, dead, by, err := leader.MarkPresumedDead(ctx, ms, "a", early, now, bound); err != nil || dead || by != "" || r.State != meta.StarLive {
		t.Fatalf("a peer beat only a second after a: %+v dead=%v by=%q err=%v", r, dead, by, err)
	}
	r, dead, by, err := leader.MarkPresumedDead(ctx, ms, "a", ys, now, bound)
	if err != nil || !dead || by != "y" || r.State != meta.StarDead {
		t.Fatalf("witnessed: %+v dead=%v by=%q err=%v", r, dead, by, err)
	}
	// A beat that lands before the CAS is judged again and wins.
	putReg(t, ms, "b", meta.Registration{Incarnation: 1, State: meta.StarLive, Heartbeat: now.Add(-time.Minute).UnixMilli()})
	k := meta.RegistryKey("b")
	racing := &racingStore{Store: ms, before: func() {
		fresh := meta.Registration{Incarnation: 1, State: meta.StarLive, Heartbeat: now.Add(-100 * time.Millisecond).UnixMilli()}
		if _, err := ms.Put(ctx, k.PK, k.SK, meta.Encode(fresh), meta.Always()); err != nil {
			t.Error(err)
		}
	}}
	if r, dead, _, err := leader.MarkPresumedDead(ctx, racing, "b", ys, now, bound); err != nil || dead || r.State != meta.StarLive {
		t.Fatalf("against a racing heartbeat: %+v dead=%v err=%v", r, dead, err)
	}
}

func putReg(t *testing.T, ms meta.Store, star string, r meta.Registration) {
	t.Helper()
	k := meta.RegistryKey(star)
	if _, err := ms.Put(context.Background(), k.PK, k.SK, meta.Encode(r), meta.Always()); err != nil {
		t.Fatal(err)
	}
}

func TestMarkDead(t *testing.T) {
	ctx := context.Background()
	ms := store(t)
	now := time.Now()
	const bound = 2 * time.Second

	if _, dead, err := leader.MarkDead(ctx, ms, "nobody", now, bound); err != nil || dead {
		t.Fatalf("unregistered star: dead=%v err=%v", dead, err)
	}
	putReg(t, ms, "a", meta.Registration{Incarnation: 2, State: meta.StarLive, Heartbeat: now.Add(-time.Second).UnixMilli()})
	if r, dead, err := leader.MarkDead(ctx, ms, "a", now, bound); err != nil || dead || r.State != meta.StarLive {
		t.Fatalf("fresh star: %+v dead=%v err=%v", r, dead, err)
	}
	putReg(t, ms, "a", meta.Registration{Incarnation: 2, State: meta.StarLive, Heartbeat: now.Add(-3 * time.Second).UnixMilli(), Address: "x:1"})
	r, dead, err := leader.MarkDead(ctx, ms, "a", now, bound)
	if err != nil || !dead || r.State != meta.StarDead || r.Incarnation != 2 || r.Address != "x:1" {
		t.Fatalf("stale star: %+v dead=%v err=%v", r, dead, err)
	}
	got, _, _, err := leader.ReadRegistration(ctx, ms, "a")
	if err != nil || got.State != meta.StarDead {
		t.Fatalf("row after MarkDead: %+v %v", got, err)
	}
	// Idempotent: a second call finds it dead and writes nothing.
	_, ver, _, _ := leader.ReadRegistration(ctx, ms, "a")
	if _, dead, err := leader.MarkDead(ctx, ms, "a", now, bound); err != nil || !dead {
		t.Fatalf("second MarkDead: dead=%v err=%v", dead, err)
	}
	if _, v2, _, _ := leader.ReadRegistration(ctx, ms, "a"); v2 != ver {
		t.Fatalf("second MarkDead rewrote the row: ver %d → %d", ver, v2)
	}
}

// A heartbeat that lands between MarkDead's read and its CAS wins: the
// star stays live, and its own next heartbeat CAS (on the version it
// wrote) still succeeds.
func TestMarkDeadLosesToHeartbeat(t *testing.T) {
	ctx := context.Background()
	ms := store(t)
	now := time.Now()
	k := meta.RegistryKey("a")
	stale := meta.Registration{Incarnation: 1, State: meta.StarLive, Heartbeat: now.Add(-time.Minute).UnixMilli()}
	putReg(t, ms, "a", stale)
	beat := &racingStore{Store: ms, before: func() {
		fresh := stale
		fresh.Heartbeat = now.UnixMilli()
		if _, err := ms.Put(ctx, k.PK, k.SK, meta.Encode(fresh), meta.Always()); err != nil {
			t.Error(err)
		}
	}}
	r, dead, err := leader.MarkDead(ctx, beat, "a", now, time.Second)
	if err != nil || dead || r.State != meta.StarLive || r.Heartbeat != now.UnixMilli() {
		t.Fatalf("MarkDead against a racing heartbeat: %+v dead=%v err=%v", r, dead, err)
	}
}

// racingStore runs before once, just ahead of the first Put.
type racingStore struct {
	meta.Store
	once   sync.Once
	before func()
}

func (s *racingStore) Put(ctx context.Context, pk, sk string, val []byte, c meta.Cond) (int64, error) {
	s.once.Do(s.before)
	return s.Store.Put(ctx, pk, sk, val, c)
}

func TestSuccessor(t *testing.T) {
	now := time.UnixMilli(5000)
	a1 := meta.LeaseHolder{Star: "a", Incarnation: 1}
	b1 := meta.LeaseHolder{Star: "b", Incarnation: 1}
	c2 := meta.LeaseHolder{Star: "c", Incarnation: 2}

	first := leader.Successor(nil, a1, now)
	if first.LeaseHolder != a1 || first.Version != 1 || len(first.Pending) != 0 || first.AcquiredAt != 5000 {
		t.Fatalf("first lease: %+v", first)
	}
	// b takes over from a dead a: a's chain is pending.
	second := leader.Successor(&first, b1, now)
	if second.Version != 2 || !slices.Equal(second.Pending, []meta.LeaseHolder{a1}) {
		t.Fatalf("takeover: %+v", second)
	}
	// c takes over from b before b cleared its gate: both are pending.
	third := leader.Successor(&second, c2, now)
	if third.Version != 3 || !slices.Equal(third.Pending, []meta.LeaseHolder{a1, b1}) {
		t.Fatalf("takeover of an unopened lease: %+v", third)
	}
	// The inherited list is a copy.
	third.Pending[0].Star = "z"
	if second.Pending[0].Star != "a" {
		t.Fatal("Successor aliased the previous pending list")
	}
	// A clean release leaves nothing to settle.
	rel := meta.Lease{LeaseHolder: b1, Version: 7, Released: true, Frontier: 42}
	fourth := leader.Successor(&rel, c2, now)
	if fourth.Version != 8 || len(fourth.Pending) != 0 || fourth.Released {
		t.Fatalf("after a release: %+v", fourth)
	}
	// A holder already pending is not listed twice.
	dup := meta.Lease{LeaseHolder: a1, Version: 3, Pending: []meta.LeaseHolder{a1}}
	if got := leader.Successor(&dup, b1, now); len(got.Pending) != 1 {
		t.Fatalf("duplicate pending holder: %+v", got)
	}
}

func TestAcquireIsACompareAndSwap(t *testing.T) {
	ctx := context.Background()
	ms := store(t)
	a1 := meta.LeaseHolder{Star: "a", Incarnation: 1}
	b1 := meta.LeaseHolder{Star: "b", Incarnation: 1}
	if _, _, ok, err := leader.ReadLease(ctx, ms, "s1"); ok || err != nil {
		t.Fatalf("lease before any acquire: ok=%v err=%v", ok, err)
	}
	v, err := leader.Acquire(ctx, ms, "s1", leader.Successor(nil, a1, time.Now()), 0)
	if err != nil {
		t.Fatal(err)
	}
	// A second first acquire loses.
	if _, err := leader.Acquire(ctx, ms, "s1", leader.Successor(nil, b1, time.Now()), 0); !errors.Is(err, leader.ErrLost) {
		t.Fatalf("second first-acquire: %v", err)
	}
	l, ver, ok, err := leader.ReadLease(ctx, ms, "s1")
	if err != nil || !ok || ver != v || l.LeaseHolder != a1 {
		t.Fatalf("lease: %+v ver %d ok %v err %v", l, ver, ok, err)
	}
	// Concurrent takeovers over one version: exactly one wins.
	var wins sync.WaitGroup
	won := make(chan meta.LeaseHolder, 8)
	for i := range 8 {
		wins.Go(func() {
			me := meta.LeaseHolder{Star: "c", Incarnation: uint64(i + 1)}
			if _, err := leader.Acquire(ctx, ms, "s1", leader.Successor(&l, me, time.Now()), ver); err == nil {
				won <- me
			} else if !errors.Is(err, leader.ErrLost) {
				t.Error(err)
			}
		})
	}
	wins.Wait()
	close(won)
	var winners []meta.LeaseHolder
	for w := range won {
		winners = append(winners, w)
	}
	if len(winners) != 1 {
		t.Fatalf("%d concurrent takeovers won, want 1: %v", len(winners), winners)
	}
	got, _, _, _ := leader.ReadLease(ctx, ms, "s1")
	if got.LeaseHolder != winners[0] || !slices.Equal(got.Pending, []meta.LeaseHolder{a1}) {
		t.Fatalf("lease after the race: %+v", got)
	}
}

func TestReadLeaseRejectsDamage(t *testing.T) {
	ctx := context.Background()
	ms := store(t)
	k := meta.LeaseKey("s1")
	for _, val := range []string{`{`, `{"version":3}`, `[]`} {
		if _, err := ms.Put(ctx, k.PK, k.SK, []byte(val), meta.Always()); err != nil {
			t.Fatal(err)
		}
		if _, _, _, err := leader.ReadLease(ctx, ms, "s1"); err == nil {
			t.Errorf("lease value %s: no error", val)
		}
	}
}

func TestRelease(t *testing.T) {
	ctx := context.Background()
	ms := store(t)
	a := meta.LeaseHolder{Star: "a", Incarnation: 1}
	b := meta.LeaseHolder{Star: "b", Incarnation: 2}
	if err := leader.Release(ctx, ms, "s1", a, 5, ""); !errors.Is(err, leader.ErrNotHolder) {
		t.Fatalf("release of an unled stream: %v, want ErrNotHolder", err)
	}
	first := leader.Successor(nil, a, time.Now())
	if _, err := leader.Acquire(ctx, ms, "s1", first, 0); err != nil {
		t.Fatal(err)
	}
	if err := leader.Release(ctx, ms, "s1", b, 5, ""); !errors.Is(err, leader.ErrNotHolder) {
		t.Fatalf("release by a non-holder: %v, want ErrNotHolder", err)
	}
	if err := leader.Release(ctx, ms, "s1", a, 42, "b"); err != nil {
		t.Fatal(err)
	}
	l, ver, ok, err := leader.ReadLease(ctx, ms, "s1")
	if err != nil || !ok {
		t.Fatalf("read lease: %v %v", ok, err)
	}
	if !l.Released || l.Frontier != 42 || l.To != "b" || l.LeaseHolder != a || l.Version != 1 {
		t.Fatalf("released lease = %+v", l)
	}
	if err := leader.Release(ctx, ms, "s1", a, 43, ""); !errors.Is(err, leader.ErrNotHolder) {
		t.Fatalf("second release: %v, want ErrNotHolder", err)
	}
	// The successor of a released lease has nothing to settle.
	next := leader.Successor(&l, b, time.Now())
	if len(next.Pending) != 0 || next.Version != 2 || next.Released || next.To != "" {
		t.Fatalf("successor of a released lease = %+v", next)
	}
	if _, err := leader.Acquire(ctx, ms, "s1", next, ver); err != nil {
		t.Fatal(err)
	}
}
