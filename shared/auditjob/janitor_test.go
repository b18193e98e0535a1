package auditjob_test

import (
	"context"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/chainsettle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/stores"
)

// stopped is a chain whose writer, incarnation star1:1, committed slots
// [0,5) of its open head epoch 1 (one garbage slot above, 6) and then
// stopped writing without absorbing any of it: what kill -9 leaves.
type stopped struct {
	st   *settle.Stores
	meta *mfaults.Store
	objs *faults.Store
	c    *chain.Chain
	ch   settle.ChainRef
}

const deadAfter = 10 * time.Second

var sharedDyn testsvc.SharedDynamo

func TestMain(m *testing.M) {
	code := m.Run()
	sharedDyn.Stop()
	os.Exit(code)
}

// backend is where a test's stores run: the embedded ones, or the AWS
// adapters against versitygw and DynamoDB Local.
type backend bool

const (
	embedded backend = false
	onAWS    backend = true
)

func (b backend) String() string {
	if b {
		return "s3+dynamo"
	}
	return "mem+sqlite"
}

func eachBackend(t *testing.T, f func(t *testing.T, b backend)) {
	for _, b := range []backend{embedded, onAWS} {
		t.Run(b.String(), func(t *testing.T) {
			if b == onAWS && testing.Short() {
				t.Skip("starts versitygw and DynamoDB Local")
			}
			f(t, b)
		})
	}
}

func newStopped(t *testing.T, heartbeatAge time.Duration, b backend) stopped {
	t.Helper()
	return newStoppedClass(t, heartbeatAge, b, meta.Express)
}

func newStoppedClass(t *testing.T, heartbeatAge time.Duration, b backend, class meta.Class) stopped {
	t.Helper()
	ctx := context.Background()
	var inner objstore.Store
	var ms meta.Store
	if b == onAWS {
		inner, ms = stores.S3(t, append(zones, "std")...), stores.Dynamo(t, &sharedDyn)
	} else {
		m, err := mem.New(append(zones, "std")...)
		if err != nil {
			t.Fatal(err)
		}
		inner, ms = m, testsvc.SQLite(t)
	}
	objs := faults.Wrap(inner)
	mc := mfaults.New(ms, 1)
	ms = mc
	ch := settle.ChainRef{Star: "star1", Class: class}
	now := time.Now()
	reg := meta.Registration{Incarnation: 1, State: meta.StarLive, StartedAt: now.Add(-time.Hour).UnixMilli(), Heartbeat: now.Add(-heartbeatAge).UnixMilli()}
	rk := meta.RegistryKey(ch.Star)
	if _, err := ms.Put(ctx, rk.PK, rk.SK, meta.Encode(reg), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	// A live peer, connected for long: the janitor marks a stale star
	// dead only when a live star's heartbeats landed for a whole
	// dead-after bound after the stale one's last.
	peer := meta.Registration{Incarnation: 1, State: meta.StarLive, StartedAt: now.Add(-time.Hour).UnixMilli(), ConnectedSince: now.Add(-time.Hour).UnixMilli(), Heartbeat: now.UnixMilli()}
	pk := meta.RegistryKey("star2")
	if _, err := ms.Put(ctx, pk.PK, pk.SK, meta.Encode(peer), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{ch.Star, "star2"} {
		dk := meta.StarDirKey(id)
		if _, err := ms.Put(ctx, dk.PK, dk.SK, nil, meta.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	c := chain.New(ch.Star, ch.Class, chain.Incarnation(ch.Star, 1), ms, objs)
	mintAndCommit(t, c)
	st := &settle.Stores{Meta: ms, Objects: objs, SettledBucket: "std", Streams: settle.MetaStreams{Meta: ms},
		Config: settle.Config{ScratchDir: t.TempDir(), DeadAfter: deadAfter}}
	return stopped{st: st, meta: mc, objs: objs, c: c, ch: ch}
}

func (s stopped) head(t *testing.T) meta.Head {
	t.Helper()
	h, _, _, err := s.c.Head(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func (s stopped) janitor(t *testing.T) auditjob.JanitorReport {
	t.Helper()
	rep, err := auditjob.Janitor(context.Background(), s.st)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// checkSettled: the head epoch 1 is fenced at cut 5, absorbed, settled,
// the head says settled, and the rows tile [0,5).
func (s stopped) checkSettled(t *testing.T) {
	t.Helper()
	h := s.head(t)
	if h.State != meta.HeadSettled || h.Cut == nil || *h.Cut != 5 {
		t.Fatalf("head after settling: %+v", h)
	}
	halted{st: s.st, c: s.c, ch: s.ch}.checkSettled(t)
}

// objectReads counts the object reads so far (the fence's read-backs of
// taken slots, the walk's footers, the probe's classifications).
func (s stopped) objectReads() int64 {
	var n int64
	for _, b := range s.objs.Counters() {
		n += b[objstore.OpGet].Requests + b[objstore.OpHead].Requests
	}
	return n
}

// A star whose heartbeat aged past dead-after is marked dead by the
// janitor, which then queues its whole chain, head included; the job
// settles it, and the next pass finds nothing.
func TestJanitorSettlesDeadStar(t *testing.T) { eachBackend(t, testJanitorSettlesDeadStar) }

func testJanitorSettlesDeadStar(t *testing.T, b backend) {
	ctx := context.Background()
	s := newStopped(t, 2*deadAfter, b)
	rep := s.janitor(t)
	want := auditjob.ChainSettleHead(s.ch, 1, "star1:1")
	if len(rep.MarkedDead) != 1 || rep.MarkedDead[0] != "star1" || len(rep.Jobs) != 1 || rep.Jobs[0] != want || rep.Gone != 1 {
		t.Fatalf("janitor on a stale star: %+v, want star1 marked dead and %s", rep, want)
	}
	reg, _, _, err := leader.ReadRegistration(ctx, s.st.Meta, "star1")
	if err != nil || reg.State != meta.StarDead {
		t.Fatalf("registry after the pass: %+v %v", reg, err)
	}
	// The job survives its queue encoding, owner included.
	j, err := auditjob.Parse(rep.Jobs[0].Marshal())
	if err != nil || j != want {
		t.Fatalf("round trip: %+v %v", j, err)
	}
	if err := auditjob.Do(ctx, s.st, j); err != nil {
		t.Fatal(err)
	}
	s.checkSettled(t)
	if rep := s.janitor(t); len(rep.Jobs) != 0 || len(rep.MarkedDead) != 0 {
		t.Fatalf("after settling: %+v", rep)
	}
}

// When every star's heartbeat is stale at once (the stars lost the
// metastore, the janitor did not), the janitor marks none dead: deposing
// the whole cluster as it comes back would only cost a restart of every
// star. Nor when the first star is back: it reconnected after star1's
// last beat, and star1 may beat next. Once star2 has beaten for a whole
// bound without star1, star1 is marked.
func TestJanitorMarksNoneDeadWhenAllAreStale(t *testing.T) {
	s := newStopped(t, 2*deadAfter, embedded)
	old := time.Now().Add(-2 * deadAfter).UnixMilli()
	stale := meta.Registration{Incarnation: 1, State: meta.StarLive, StartedAt: old, ConnectedSince: old, Heartbeat: old}
	s.putPeer(t, stale)
	if rep := s.janitor(t); len(rep.MarkedDead) != 0 || len(rep.Jobs) != 0 || !slices.Equal(rep.Spared, []string{"star1", "star2"}) {
		t.Fatalf("janitor with every star stale: %+v", rep)
	}
	if h := s.head(t); h.State != meta.HeadOpen {
		t.Fatalf("head touched: %+v", h)
	}
	back := stale
	back.Heartbeat = time.Now().UnixMilli()
	back.ConnectedSince = back.Heartbeat
	s.putPeer(t, back)
	if rep := s.janitor(t); len(rep.MarkedDead) != 0 || len(rep.Jobs) != 0 || !slices.Equal(rep.Spared, []string{"star1"}) {
		t.Fatalf("janitor with star2 just back: %+v", rep)
	}
	back.ConnectedSince = back.Heartbeat - deadAfter.Milliseconds()
	s.putPeer(t, back)
	if rep := s.janitor(t); len(rep.MarkedDead) != 1 || rep.MarkedDead[0] != "star1" || len(rep.Jobs) != 1 {
		t.Fatalf("janitor with star2 back for a bound: %+v", rep)
	}
}

// The edges of a whole-cluster metastore outage as the verify run met
// them (dead-after 2 s there; 10 s here, the same proportions): at its
// start star1's last beat is a little older than star2's (2.1 s against
// 1.5 s), at its end star2 beat 62 ms ago, its first beat back. Neither
// marks star1 dead; a star cut off alone (star2 beat on) is marked.
func TestJanitorSparesStarsAtOutageEdges(t *testing.T) {
	for _, c := range []struct {
		name                 string
		star1, since2, beat2 time.Duration // ages
		dead                 bool
	}{
		{name: "outage start", star1: scaled(2100), since2: time.Hour, beat2: scaled(1500)},
		{name: "outage end", star1: scaled(5000), since2: scaled(62), beat2: scaled(62)},
		{name: "star1 cut off alone", star1: scaled(2300), since2: time.Hour, beat2: scaled(100), dead: true},
		{name: "star1 gone through an outage", star1: scaled(9000), since2: scaled(2300), beat2: scaled(100), dead: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStopped(t, c.star1, embedded)
			now := time.Now()
			s.putPeer(t, meta.Registration{Incarnation: 1, State: meta.StarLive, StartedAt: now.Add(-time.Hour).UnixMilli(),
				ConnectedSince: now.Add(-c.since2).UnixMilli(), Heartbeat: now.Add(-c.beat2).UnixMilli()})
			rep := s.janitor(t)
			if marked := slices.Contains(rep.MarkedDead, "star1"); marked != c.dead {
				t.Fatalf("star1 marked dead: %v, want %v (%+v)", marked, c.dead, rep)
			}
			reg, _, _, err := leader.ReadRegistration(context.Background(), s.st.Meta, "star1")
			if err != nil || (reg.State == meta.StarDead) != c.dead {
				t.Fatalf("star1's row: %+v %v", reg, err)
			}
		})
	}
}

// putPeer overwrites star2's registration.
func (s stopped) putPeer(t *testing.T, reg meta.Registration) {
	t.Helper()
	ctx := context.Background()
	pk := meta.RegistryKey("star2")
	it, err := s.st.Meta.Get(ctx, pk.PK, pk.SK)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.st.Meta.Put(ctx, pk.PK, pk.SK, meta.Encode(reg), meta.IfVer(it.Ver)); err != nil {
		t.Fatal(err)
	}
}

// A peer row written before ConnectedSince existed (a star not yet
// upgraded) testifies as connected since it started: it still spares
// star1 at an outage's start, and still marks it once it beats a bound
// after star1's last beat.
func TestJanitorReadsOldRows(t *testing.T) {
	s := newStopped(t, scaled(2100), embedded)
	now := time.Now()
	old := meta.Registration{Incarnation: 1, State: meta.StarLive, StartedAt: now.Add(-time.Hour).UnixMilli(), Heartbeat: now.Add(-scaled(1500)).UnixMilli()}
	s.putPeer(t, old)
	if rep := s.janitor(t); len(rep.MarkedDead) != 0 {
		t.Fatalf("an old peer row at an outage's start: %+v", rep)
	}
	old.Heartbeat = now.UnixMilli()
	s.putPeer(t, old)
	if rep := s.janitor(t); len(rep.MarkedDead) != 1 || rep.MarkedDead[0] != "star1" {
		t.Fatalf("an old peer row beating on: %+v", rep)
	}
}

// scaled is a duration of the verify run (dead-after 2 s) at this
// file's dead-after.
func scaled(ms int64) time.Duration {
	return time.Duration(ms) * (deadAfter / 2000)
}

// A live star's head is deferred, never displaced: the janitor queues
// nothing for it, and a head job queued by mistake is refused and leaves
// the head as it was.
func TestJanitorLeavesLiveHead(t *testing.T) {
	ctx := context.Background()
	s := newStopped(t, 0, embedded)
	if rep := s.janitor(t); len(rep.Jobs) != 0 || len(rep.MarkedDead) != 0 || rep.Gone != 0 {
		t.Fatalf("janitor on a live star: %+v", rep)
	}
	err := auditjob.Do(ctx, s.st, auditjob.ChainSettleHead(s.ch, 1, "star1:1"))
	if !errors.Is(err, auditjob.ErrHeadEpoch) {
		t.Fatalf("head job of a live star: %v", err)
	}
	if h := s.head(t); h.State != meta.HeadOpen || h.Owner != "star1:1" {
		t.Fatalf("live head displaced: %+v", h)
	}
}

// A star that closed gracefully left a settle marker for its open head:
// the janitor settles it although the registry still says live, and the
// job clears the marker. A marker left behind for an epoch settled since
// is cleared by the next pass.
func TestJanitorServesSettleMarker(t *testing.T) {
	ctx := context.Background()
	s := newStopped(t, 0, embedded)
	k := meta.SettleDueKey(s.ch.Star, s.ch.Class)
	due := meta.SettleDue{Owner: "star1:1", Epoch: 1, At: time.Now().UnixMilli()}
	if _, err := s.st.Meta.Put(ctx, k.PK, k.SK, meta.Encode(due), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	rep := s.janitor(t)
	if len(rep.Jobs) != 1 || rep.Jobs[0] != auditjob.ChainSettleHead(s.ch, 1, "star1:1") || len(rep.MarkedDead) != 0 {
		t.Fatalf("janitor with a settle marker: %+v", rep)
	}
	if err := auditjob.Do(ctx, s.st, rep.Jobs[0]); err != nil {
		t.Fatal(err)
	}
	s.checkSettled(t)
	if _, err := s.st.Meta.Get(ctx, k.PK, k.SK); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("settle marker after its job: %v", err)
	}
	if _, err := s.st.Meta.Put(ctx, k.PK, k.SK, meta.Encode(due), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	if rep := s.janitor(t); len(rep.Jobs) != 0 {
		t.Fatalf("janitor with a served marker: %+v", rep)
	}
	if _, err := s.st.Meta.Get(ctx, k.PK, k.SK); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("served settle marker still there: %v", err)
	}
}

// Concurrent settlers of one chain serialise on its claim: three jobs at
// once read from the object store what one reads, because the later ones
// wait for the first and find the work done (unserialised, each fences,
// walks and probes again: about three times the reads). A Standard chain
// (one bucket) keeps the count near exact; what varies is how many of the
// fence's read-ahead reads above the cut land before it stops them, at
// most one per slot of its read-ahead.
func TestConcurrentSettlersSerialise(t *testing.T) { eachBackend(t, testConcurrentSettlersSerialise) }

// readAheadSlack bounds the fence's read-ahead past the cut of a short
// epoch (its window, 4, plus twice the 5 committed slots).
const readAheadSlack = 14

func testConcurrentSettlersSerialise(t *testing.T, b backend) {
	ctx := context.Background()
	ch := settle.ChainRef{Star: "star1", Class: meta.Standard}
	job := auditjob.ChainSettleHead(ch, 1, "star1:1")

	one := newStoppedClass(t, 2*deadAfter, b, meta.Standard)
	one.janitor(t) // marks star1 dead
	base := one.objectReads()
	if err := auditjob.Do(ctx, one.st, job); err != nil {
		t.Fatal(err)
	}
	alone := one.objectReads() - base

	two := newStoppedClass(t, 2*deadAfter, b, meta.Standard)
	two.janitor(t)
	base = two.objectReads()
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i := range errs {
		wg.Go(func() { errs[i] = auditjob.Do(ctx, two.st, job) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if got := two.objectReads() - base; got > alone+readAheadSlack || got < alone-readAheadSlack {
		t.Fatalf("three racing settlers made %d object reads, one alone %d: they did not serialise", got, alone)
	}
	two.checkSettled(t)
	k := meta.SettleClaimKey(ch.Star, ch.Class)
	if _, err := two.st.Meta.Get(ctx, k.PK, k.SK); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("claim left behind: %v", err)
	}
}

// A claim held by a settler that died blocks the next one only until it
// lapses; one that is held and renewed blocks it for as long as the
// waiter waits.
func TestSettleClaimLapses(t *testing.T) {
	ctx := context.Background()
	s := newStopped(t, 2*deadAfter, embedded)
	s.janitor(t) // marks star1 dead
	k := meta.SettleClaimKey("star1", meta.Express)
	held := meta.SettleClaim{Holder: "other", Until: time.Now().Add(time.Hour).UnixMilli()}
	v, err := s.st.Meta.Put(ctx, k.PK, k.SK, meta.Encode(held), meta.IfAbsent())
	if err != nil {
		t.Fatal(err)
	}
	job := auditjob.ChainSettleHead(s.ch, 1, "star1:1")
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	if err := auditjob.Do(short, s.st, job); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("settle behind a held claim: %v", err)
	}
	if h := s.head(t); h.State != meta.HeadOpen {
		t.Fatalf("a waiting settler touched the head: %+v", h)
	}
	held.Until = time.Now().Add(-time.Second).UnixMilli()
	if _, err := s.st.Meta.Put(ctx, k.PK, k.SK, meta.Encode(held), meta.IfVer(v)); err != nil {
		t.Fatal(err)
	}
	if err := auditjob.Do(ctx, s.st, job); err != nil {
		t.Fatal(err)
	}
	s.checkSettled(t)
}

// chainsettle.ChainThrough never fences above the epoch it is given: an epoch
// a later incarnation minted after the caller judged the chain stays
// open, while the epochs up to it settle.
func TestChainThroughLeavesLaterEpoch(t *testing.T) {
	ctx := context.Background()
	h := newHalted(t) // epoch 1 halted at cut 5, epoch 2 open
	abs := &absorb.Absorber{Star: h.ch.Star, Class: h.ch.Class, Meta: h.st.Meta, Rip: h.st.Config.WithDefaults().Ripening(h.ch.Class), UpdateEpoch: h.c.UpdateEpoch}
	other := chain.New(h.ch.Star, h.ch.Class, "star2:1", h.st.Meta, h.st.Objects)
	if err := chainsettle.ChainThrough(ctx, other, abs, 1); err != nil {
		t.Fatal(err)
	}
	h.checkSettled(t)
	head, _, _, err := h.c.Head(ctx)
	if err != nil || head.Epoch != 2 || head.State != meta.HeadOpen || head.Owner != "star1:1" {
		t.Fatalf("head after settling through epoch 1: %+v %v", head, err)
	}
}
