package chain_test

import (
	"context"
	"errors"
	"hash/crc32"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/stores"
)

// faultEnv is a three-zone set behind the fault wrapper, with a log of
// every create-once write by key.
type faultEnv struct {
	meta  meta.Store
	mem   *mem.Store
	store *faults.Store
	puts  *putLog
}

func newFaultEnv(t testing.TB) faultEnv {
	t.Helper()
	m, err := mem.New(buckets...)
	if err != nil {
		t.Fatal(err)
	}
	log := &putLog{keys: map[string]int{}}
	return faultEnv{meta: testsvc.SQLite(t), mem: m, store: faults.Wrap(loggingStore{m, log}, faults.WithSeed(1)), puts: log}
}

func (e faultEnv) chain(star, me string) *chain.Chain {
	c := chain.New(star, meta.Express, me, e.meta, e.store)
	c.AttemptTimeout = 200 * time.Millisecond
	c.OwnFenceWait = 300 * time.Millisecond
	return c.Seed(7)
}

// putLog counts PutIfAbsent calls by key.
type putLog struct {
	mu   sync.Mutex
	keys map[string]int
}

func (l *putLog) count(prefix string) (n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, c := range l.keys {
		if strings.HasPrefix(k, prefix) {
			n += c
		}
	}
	return n
}

type loggingStore struct {
	objstore.Store
	log *putLog
}

func (s loggingStore) Bucket(name string) objstore.Bucket {
	return loggingBucket{s.Store.Bucket(name), s.log}
}

type loggingBucket struct {
	objstore.Bucket
	log *putLog
}

func (b loggingBucket) PutIfAbsent(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	b.log.mu.Lock()
	b.log.keys[key]++
	b.log.mu.Unlock()
	return b.Bucket.PutIfAbsent(ctx, key, body)
}

// place writes body at slot's key in the named buckets directly,
// bypassing the writer (a copy the writer left, or an injected occupant).
func (e faultEnv) place(t testing.TB, ep meta.Epoch, slot uint64, body []byte, in ...string) {
	t.Helper()
	key := chain.SlotKey("star1", meta.Express, ep.Epoch, slot)
	for _, b := range in {
		if _, err := e.mem.Bucket(b).PutIfAbsent(context.Background(), key, body); err != nil {
			t.Fatalf("place %s in %s: %v", key, b, err)
		}
	}
}

// fill copies slot's flight copy into every bucket that lacks it: a
// commit returns at W copies and the writer's Close cancels the rest.
func (e faultEnv) fill(t testing.TB, ep meta.Epoch, slot uint64) {
	t.Helper()
	ctx := context.Background()
	key := chain.SlotKey("star1", meta.Express, ep.Epoch, slot)
	var obj []byte
	for _, b := range buckets {
		if got, err := e.mem.Bucket(b).Get(ctx, key, 0, -1); err == nil {
			obj = got
			break
		}
	}
	if obj == nil {
		t.Fatalf("no copy of %s", key)
	}
	for _, b := range buckets {
		if _, err := e.mem.Bucket(b).PutIfAbsent(ctx, key, obj); err != nil && !errors.Is(err, objstore.ErrExists) {
			t.Fatal(err)
		}
	}
}

// rewrite replaces the object at slot's key in bucket with f(its bytes):
// damage at rest, which create-once writes can never do.
func (e faultEnv) rewrite(t testing.TB, ep meta.Epoch, slot uint64, bucket string, f func([]byte) []byte) {
	t.Helper()
	ctx := context.Background()
	key := chain.SlotKey("star1", meta.Express, ep.Epoch, slot)
	b := e.mem.Bucket(bucket)
	obj, err := b.Get(ctx, key, 0, -1)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Delete(ctx, key); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutIfAbsent(ctx, key, f(obj)); err != nil {
		t.Fatal(err)
	}
}

func flipBit(obj []byte) []byte {
	out := append([]byte(nil), obj...)
	out[10] ^= 0x01 // in the epoch field: the envelope's CRC fails
	return out
}

// asVersion rewrites the envelope's version byte and fixes its CRC: a copy
// a newer build wrote.
func asVersion(v byte) func([]byte) []byte {
	return func(obj []byte) []byte {
		out := append([]byte(nil), obj...)
		out[4] = v
		sum := crc32.Checksum(out[:56], crc32.MakeTable(crc32.Castagnoli))
		out[56], out[57], out[58], out[59] = byte(sum), byte(sum>>8), byte(sum>>16), byte(sum>>24)
		return out
	}
}

// writeSlots mints epoch 1 for star1:1 and commits slots [0, n) through
// the writer, with the given buckets down meanwhile (hanging).
func (e faultEnv) writeSlots(t testing.TB, n uint64, down ...string) (*chain.Chain, *chain.Writer, meta.Epoch) {
	t.Helper()
	ctx := context.Background()
	c := e.chain("star1", "star1:1")
	ep, err := c.Mint(ctx, params(2, 4))
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Writer(ep, chain.WriterOptions{Deadline: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(w.Close)
	for _, b := range down {
		e.store.SetDown(b, faults.Down{Hang: true})
	}
	for s := range n {
		if err := w.Commit(ctx, s, flightBody(t, w, s)); err != nil {
			t.Fatalf("commit %d: %v", s, err)
		}
	}
	w.Close() // no straggler lands later
	for _, b := range down {
		e.store.SetUp(b)
	}
	return c, w, ep
}

func fenceWithin(t testing.TB, c *chain.Chain, epoch uint64, d time.Duration) (uint64, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.Fence(ctx, epoch, false)
}

// Defect 1: an acknowledged slot committed at W=2 of 3 (its third copy
// never landed) whose copy in one bucket is damaged at rest, or was
// written by a newer build, is still committed: the unreadable copy counts
// neither way, the lone good copy is rolled forward, and the cut is above
// the slot. (The old probe counted the unreadable copy as poison and cut
// at the acknowledged slot.)
func TestUnreadableCopyIsNotPoison(t *testing.T) {
	for name, damage := range map[string]func([]byte) []byte{"flipped bit": flipBit, "newer version": asVersion(2)} {
		t.Run(name, func(t *testing.T) {
			e := newFaultEnv(t)
			_, w, ep := e.writeSlots(t, 4, "az3") // copies in az1 and az2 only
			e.rewrite(t, ep, 2, "az1", damage)
			succ := e.chain("star1", "star2:1")
			cut, err := fenceWithin(t, succ, 1, 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if cut != 4 {
				t.Fatalf("cut %d: the acknowledged slot 2 was disowned (want cut 4)", cut)
			}
			rec, _, _ := succ.Epoch(context.Background(), 1)
			ta, _ := succ.Classify(context.Background(), rec, 2)
			if ta.Fate() != chain.Committed || ta.Seen(0) != chain.Unreadable || ta.Seen(2) != chain.Flight {
				t.Fatalf("slot 2 after the fence: %v %v (want the good copy rolled into az3)", ta.Fate(), ta.Occupants())
			}
			var walked []uint64
			if err := succ.Walk(context.Background(), rec, 0, cut, func(sf chain.SlotFooter) error {
				walked = append(walked, sf.Slot)
				return nil
			}); err != nil || len(walked) != 4 {
				t.Fatalf("walk %v %v", walked, err)
			}
			_ = w
		})
	}
}

// A slot whose buckets hold one good copy and two unreadable ones can be
// neither committed nor killed: the fence stops with a permanent
// *UndecidableError naming the key, and writes nothing into the slot.
func TestUndecidableSlotStopsTheFence(t *testing.T) {
	e := newFaultEnv(t)
	_, _, ep := e.writeSlots(t, 4)
	e.fill(t, ep, 1)
	e.rewrite(t, ep, 1, "az1", flipBit)
	e.rewrite(t, ep, 1, "az2", asVersion(9))
	key := chain.SlotKey("star1", meta.Express, 1, 1)
	before := e.puts.count(key)
	_, err := fenceWithin(t, e.chain("star1", "star2:1"), 1, 10*time.Second)
	var ue *chain.UndecidableError
	if !errors.As(err, &ue) || !ue.Permanent || ue.Key != key || ue.Slot != 1 {
		t.Fatalf("fence: %v (want a permanent UndecidableError for %s)", err, key)
	}
	if !strings.Contains(err.Error(), key) {
		t.Fatalf("error %q does not name the key", err)
	}
	if n := e.puts.count(key); n != before {
		t.Fatalf("the fence wrote %d times into the undecidable slot", n-before)
	}
}

// Defect 2: the fence decides slot by slot. With az3 black-holed, slot 6
// holds one flight copy and one poison (undecidable until az3 returns),
// but slot 5 is empty: the cut is 5 and the fence returns at once. (The
// old fence waited for a whole round of 64 slots.)
func TestUndecidableSlotAboveTheCutDoesNotHoldItUp(t *testing.T) {
	e := newFaultEnv(t)
	_, w, ep := e.writeSlots(t, 5)
	e.place(t, ep, 6, flightBody(t, w, 6), "az1")
	e.place(t, ep, 6, format.EncodePoison(1, 6, format.Nonce{7}), "az2")
	e.store.SetDown("az3", faults.Down{Hang: true})
	start := time.Now()
	cut, err := fenceWithin(t, e.chain("star1", "star2:1"), 1, 5*time.Second)
	if err != nil || cut != 5 {
		t.Fatalf("fence with az3 down: cut %d, %v (want 5)", cut, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("fence took %v with one zone down", d)
	}
}

// Defect 2, roll forward: with az3 black-holed, the first slot the writer
// never released holds its copy in az1 only (its az3 copy may exist, so it
// may have been acknowledged): the fence copies it into az2, commits it,
// and cuts above it. A poison-only fence could not decide it.
func TestOneZoneDownRollsALoneCopyForward(t *testing.T) {
	e := newFaultEnv(t)
	_, w, ep := e.writeSlots(t, 3)
	e.place(t, ep, 3, flightBody(t, w, 3), "az1")
	e.store.SetDown("az3", faults.Down{Hang: true})
	succ := e.chain("star1", "star2:1")
	cut, err := fenceWithin(t, succ, 1, 5*time.Second)
	if err != nil || cut != 4 {
		t.Fatalf("fence: cut %d, %v (want 4: slot 3 rolled forward)", cut, err)
	}
	e.store.SetUp("az3")
	rec, _, _ := succ.Epoch(context.Background(), 1)
	if ta, _ := succ.Classify(context.Background(), rec, 3); ta.Fate() != chain.Committed || ta.Seen(1) != chain.Flight {
		t.Fatalf("slot 3: %v %v", ta.Fate(), ta.Occupants())
	}
	if ta, _ := succ.Classify(context.Background(), rec, 4); ta.Fate() != chain.Dead {
		t.Fatalf("cut slot 4: %v %v", ta.Fate(), ta.Occupants())
	}
}

// A fence writes at most the minted window past its cut.
func TestFenceWritesAtMostTheWindowPastTheCut(t *testing.T) {
	e := newFaultEnv(t)
	_, _, ep := e.writeSlots(t, 10)
	cut, err := fenceWithin(t, e.chain("star1", "star2:1"), 1, 5*time.Second)
	if err != nil || cut != 10 {
		t.Fatalf("fence: %d %v", cut, err)
	}
	var past int
	for s := cut; s < cut+100; s++ {
		past += e.puts.count(chain.SlotKey("star1", meta.Express, 1, s))
	}
	if limit := ep.Params.Window * len(buckets); past > limit {
		t.Fatalf("%d poison writes at or past the cut, at most the window (%d slots × %d buckets = %d)", past, ep.Params.Window, len(buckets), limit)
	}
	if past < 2 {
		t.Fatalf("only %d poison writes: the cut slot needs K−W+1", past)
	}
}

// Defect 3: a zombie incarnation. star1:2 settled star1:1's epoch 1 and
// minted epoch 2; star1:1's own fence and its mint report deposition
// (before: the fence returned the recorded cut as if nothing happened and
// the mint failed with the retryable ErrNotFenced forever). And once
// star1:2's epoch is settled too, star1:1 still may not mint.
func TestZombieIncarnationIsDeposed(t *testing.T) {
	ctx := context.Background()
	e := newFaultEnv(t)
	old, _, _ := e.writeSlots(t, 3)
	newer := e.chain("star1", "star1:2")
	settleEpoch(t, newer, 1)
	if ep, err := newer.Mint(ctx, params(2, 4)); err != nil || ep.Epoch != 2 {
		t.Fatalf("restart mint: %+v %v", ep, err)
	}
	if _, err := old.Fence(ctx, 1, true); !errors.Is(err, chain.ErrDeposed) {
		t.Fatalf("zombie's own fence: %v", err)
	}
	if _, err := old.FenceOwn(ctx, 1, chain.Known{Released: 3}); !errors.Is(err, chain.ErrDeposed) {
		t.Fatalf("zombie's own fence with knowledge: %v", err)
	}
	if _, err := old.Mint(ctx, params(2, 4)); !errors.Is(err, chain.ErrDeposed) {
		t.Fatalf("zombie's mint: %v", err)
	}
	// The janitor settles epoch 2 (star1:2 died): the zombie still loses.
	settleEpoch(t, e.chain("star1", "auditor"), 2)
	if _, err := old.Mint(ctx, params(2, 4)); !errors.Is(err, chain.ErrDeposed) {
		t.Fatalf("zombie's mint over a later incarnation's settled epoch: %v", err)
	}
	if ep, err := e.chain("star1", "star1:3").Mint(ctx, params(2, 4)); err != nil || ep.Epoch != 3 {
		t.Fatalf("a newer incarnation mints: %+v %v", ep, err)
	}
}

// settleEpoch fences an epoch and marks it and the head settled, as
// shared/settle does after its walk (the walk is not needed here).
func settleEpoch(t testing.TB, c *chain.Chain, epoch uint64) {
	t.Helper()
	ctx := context.Background()
	if _, err := c.Fence(ctx, epoch, false); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpdateEpoch(ctx, epoch, func(e *meta.Epoch) bool { e.Settled = true; return true }); err != nil {
		t.Fatal(err)
	}
	h, ver, _, err := c.Head(ctx)
	if err != nil {
		t.Fatal(err)
	}
	h.State = meta.HeadSettled
	k := meta.HeadKey(c.Star, c.Class)
	if _, err := c.Meta.Put(ctx, k.PK, k.SK, meta.Encode(h), meta.IfVer(ver)); err != nil {
		t.Fatal(err)
	}
}

// A rolling upgrade: an older build (reads envelope version 1) and a newer
// one (reads up to 2) on one chain. Following the policy, the newer build
// still writes version 1, and either build fences the other's epoch. A
// newer build that broke the policy and wrote version 2 leaves the older
// build's fence stuck with a permanent UndecidableError (never a guess),
// while a newer fencer decides it.
func TestRollingUpgradeFencedByEither(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct{ writerVersion, fencerVersion uint8 }{{1, 2}, {2, 1}} {
		e := newFaultEnv(t)
		wc := e.chain("star1", "star1:1")
		wc.ReadVersion = tc.writerVersion
		ep, err := wc.Mint(ctx, params(2, 4))
		if err != nil {
			t.Fatal(err)
		}
		w, _ := wc.Writer(ep, chain.WriterOptions{})
		for s := range uint64(3) {
			if err := w.Commit(ctx, s, flightBody(t, w, s)); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
		f := e.chain("star1", "star2:1")
		f.ReadVersion = tc.fencerVersion
		if cut, err := f.Fence(ctx, 1, false); err != nil || cut != 3 {
			t.Fatalf("writer reads v%d, fencer reads v%d: cut %d, %v", tc.writerVersion, tc.fencerVersion, cut, err)
		}
	}
	// The policy broken: a newer build wrote version 2 copies.
	e := newFaultEnv(t)
	_, _, ep := e.writeSlots(t, 3)
	e.fill(t, ep, 1)
	for _, b := range buckets {
		e.rewrite(t, ep, 1, b, asVersion(2))
	}
	older := e.chain("star1", "star2:1")
	_, err := older.Fence(ctx, 1, false)
	var ue *chain.UndecidableError
	if !errors.As(err, &ue) || !ue.Permanent || ue.Slot != 1 {
		t.Fatalf("older fencer over version 2 copies: %v", err)
	}
	newerF := e.chain("star1", "star3:1")
	newerF.ReadVersion = 2
	if cut, err := newerF.Fence(ctx, 1, false); err != nil || cut != 3 {
		t.Fatalf("newer fencer: cut %d, %v", cut, err)
	}
}

// A writer fencing its own epoch with a zone black-holed: the first slot
// it never released holds its copy in az2 and an injected poison in az1
// (undecidable without az3). A successor would wait for az3; the writer,
// which knows it never released the slot, cuts there within OwnFenceWait,
// and mints the next epoch.
func TestOwnFenceCutsAnUnreleasedSlotItCannotDecide(t *testing.T) {
	ctx := context.Background()
	e := newFaultEnv(t)
	c, w, ep := e.writeSlots(t, 5)
	e.place(t, ep, 5, format.EncodePoison(1, 5, format.Nonce{7}), "az1")
	e.place(t, ep, 5, flightBody(t, w, 5), "az2")
	e.store.SetDown("az3", faults.Down{Hang: true})

	if _, err := fenceWithin(t, e.chain("star1", "star2:1"), 1, 800*time.Millisecond); err == nil {
		t.Fatal("a successor decided slot 5 without az3")
	} else if ue := (*chain.UndecidableError)(nil); !errors.As(err, &ue) || ue.Permanent || ue.Slot != 5 {
		t.Fatalf("successor: %v (want a waiting UndecidableError at slot 5)", err)
	}
	// The successor's claim deposes the writer: start over with a writer
	// that fences itself first.
	e2 := newFaultEnv(t)
	c, w, ep = e2.writeSlots(t, 5)
	e2.place(t, ep, 5, format.EncodePoison(1, 5, format.Nonce{7}), "az1")
	e2.place(t, ep, 5, flightBody(t, w, 5), "az2")
	e2.store.SetDown("az3", faults.Down{Hang: true})
	start := time.Now()
	cut, err := c.FenceOwn(ctx, 1, chain.Known{Released: 5})
	if err != nil || cut != 5 {
		t.Fatalf("own fence: cut %d, %v", cut, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("own fence took %v", d)
	}
	if ep2, err := c.Mint(ctx, params(2, 4)); err != nil || ep2.Epoch != 2 {
		t.Fatalf("mint after own fence: %+v %v", ep2, err)
	}
}

// Slot deletion has one owner, the auditor's trim: a star's settlement
// (fence, walk, garbage probe) deletes nothing, and leaves the flight
// copies in the garbage window for ReapGarbage, which replaces each with
// poison and leaves poison and unreadable objects alone.
func TestOnlyTheTrimDeletesSlots(t *testing.T) {
	ctx := context.Background()
	e := newFaultEnv(t)
	_, w, ep := e.writeSlots(t, 3)
	for _, s := range []uint64{4, 5} { // uploaded in parallel, never released
		e.place(t, ep, s, flightBody(t, w, s), buckets...)
	}
	e.place(t, ep, 6, flightBody(t, w, 6), "az1")
	e.rewrite(t, ep, 6, "az1", asVersion(9))
	e.store.ResetCounters()
	star := e.chain("star1", "star2:1")
	cut, err := star.Fence(ctx, 1, false)
	if err != nil || cut != 3 {
		t.Fatalf("fence: %d %v", cut, err)
	}
	rec, _, _ := star.Epoch(ctx, 1)
	if err := star.ProbeGarbage(ctx, rec, cut); err != nil {
		t.Fatal(err)
	}
	for b, c := range e.store.Counters() {
		if n := c[objstore.OpDelete].Requests + c[objstore.OpDeleteMany].Requests; n != 0 {
			t.Fatalf("a star's fence and garbage probe deleted %d times in %s", n, b)
		}
	}
	if ta, _ := star.Classify(ctx, rec, 4); ta.Fate() != chain.Committed {
		t.Fatalf("slot 4 before the reap: %v (the probe does not delete)", ta.Fate())
	}
	if err := e.chain("star1", "auditor").ReapGarbage(ctx, rec, cut); err != nil {
		t.Fatal(err)
	}
	for s := cut; s < cut+uint64(rec.Params.Window); s++ {
		ta, _ := star.Classify(ctx, rec, s)
		if ta.Flights() != 0 || ta.Fate() != chain.Dead {
			t.Fatalf("garbage slot %d after the reap: %v %v", s, ta.Fate(), ta.Occupants())
		}
	}
	if ta, _ := star.Classify(ctx, rec, 6); ta.Seen(0) != chain.Unreadable {
		t.Fatalf("the reap touched an unreadable object: %v", ta.Occupants())
	}
}

// Without s3:ListBucket a missing slot key answers 403: the fence never
// takes that for absence (it would poison on it) and stops with an
// UndecidableError whose cause names the refusal; with the grant the same
// epoch fences at once.
func TestFenceNeedsListBucket(t *testing.T) {
	ctx := context.Background()
	bs := []string{"std"}
	for _, grant := range []bool{true, false} {
		var st objstore.Store
		if grant {
			st = stores.S3(t, bs...)
		} else {
			st = stores.S3NoListBucket(t, bs...)
		}
		ms := testsvc.SQLite(t)
		c := chain.New("star1", meta.Standard, "star1:1", ms, st)
		c.AttemptTimeout = 500 * time.Millisecond
		ep, err := c.Mint(ctx, meta.EpochParams{Buckets: bs, W: 1, Window: 2})
		if err != nil {
			t.Fatal(err)
		}
		w, _ := c.Writer(ep, chain.WriterOptions{})
		for s := range uint64(2) {
			if err := w.Commit(ctx, s, flightBody(t, w, s)); err != nil {
				t.Fatal(err)
			}
		}
		w.Close()
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		cut, err := chain.New("star1", meta.Standard, "star2:1", ms, st).Fence(fctx, 1, false)
		cancel()
		if grant {
			if err != nil || cut != 2 {
				t.Fatalf("with s3:ListBucket: cut %d, %v", cut, err)
			}
			continue
		}
		var ue *chain.UndecidableError
		if !errors.As(err, &ue) || ue.Slot != 2 || !errors.Is(err, objstore.ErrAccessDenied) {
			t.Fatalf("without s3:ListBucket: cut %d, %v (want an UndecidableError at slot 2 caused by access denied)", cut, err)
		}
		if _, gerr := st.Bucket("std").Get(ctx, chain.SlotKey("star1", meta.Standard, 1, 2), 0, -1); !errors.Is(gerr, objstore.ErrAccessDenied) {
			t.Fatalf("the fence wrote into slot 2 on a 403: %v", gerr)
		}
	}
}

// oneBucketStore serves one bucket through wrap and the others as they are.
type oneBucketStore struct {
	objstore.Store
	name string
	wrap func(objstore.Bucket) objstore.Bucket
}

func (s oneBucketStore) Bucket(name string) objstore.Bucket {
	if name != s.name {
		return s.Store.Bucket(name)
	}
	return s.wrap(s.Store.Bucket(name))
}

// slowPutBucket delays every create-once write and, like the directory
// store, does not stop a write its context ends in the middle of.
type slowPutBucket struct {
	objstore.Bucket
	s slowPuts
}

type slowPuts struct {
	delay  time.Duration
	active *sync.WaitGroup
	mu     *sync.Mutex
	ended  *[]time.Time
}

func (b slowPutBucket) PutIfAbsent(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	b.s.active.Add(1)
	defer b.s.active.Done()
	time.Sleep(b.s.delay)
	info, err := b.Bucket.PutIfAbsent(context.WithoutCancel(ctx), key, body)
	b.s.mu.Lock()
	*b.s.ended = append(*b.s.ended, time.Now())
	b.s.mu.Unlock()
	return info, err
}

// A fence decides a slot at W answers and returns only once its other
// requests have ended: a poison still being written into the slowest
// bucket must not land after Fence returned (found as a test's temporary
// folder written to during its removal, after a foreign fence).
func TestFenceLeavesNoWriteBehind(t *testing.T) {
	e := newFaultEnv(t)
	_, _, ep := e.writeSlots(t, 2)
	var (
		active sync.WaitGroup
		mu     sync.Mutex
		ended  []time.Time
	)
	p := slowPuts{delay: 300 * time.Millisecond, active: &active, mu: &mu, ended: &ended}
	slow := oneBucketStore{Store: e.store, name: buckets[2], wrap: func(b objstore.Bucket) objstore.Bucket { return slowPutBucket{b, p} }}
	fencer := chain.New("star1", meta.Express, "star2:1", e.meta, slow)
	fencer.AttemptTimeout = 200 * time.Millisecond
	if _, err := fenceWithin(t, fencer, ep.Epoch, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	returned := time.Now()
	active.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(ended) == 0 {
		t.Fatal("the fence wrote nothing into the slow bucket: the test does not reach its case")
	}
	for _, at := range ended {
		if at.After(returned) {
			t.Fatalf("a write into %s ended %v after Fence returned", buckets[2], at.Sub(returned))
		}
	}
}

// hungPutBucket's PUTs never return until release is closed, whatever
// their context says: a store that ignores deadlines.
type hungPutBucket struct {
	objstore.Bucket
	release chan struct{}
	calls   *atomic.Int32
}

func (b hungPutBucket) PutIfAbsent(context.Context, string, []byte) (objstore.ObjectInfo, error) {
	b.calls.Add(1)
	<-b.release
	return objstore.ObjectInfo{}, objstore.ErrExists
}

// A fence's wait for its requests still out is bounded by one attempt's
// timeout: a bucket whose PUT ignores its deadline and never returns does
// not hold the fence once W answers decided every slot.
func TestFenceDoesNotWaitForAHungStore(t *testing.T) {
	e := newFaultEnv(t)
	_, _, ep := e.writeSlots(t, 2)
	release := make(chan struct{})
	defer close(release)
	var calls atomic.Int32
	hung := oneBucketStore{Store: e.store, name: buckets[2], wrap: func(b objstore.Bucket) objstore.Bucket { return hungPutBucket{b, release, &calls} }}
	fencer := chain.New("star1", meta.Express, "star2:1", e.meta, hung)
	fencer.AttemptTimeout = 200 * time.Millisecond
	var abandoned atomic.Int32
	fencer.OnAbandoned = func(n int) { abandoned.Add(int32(n)) }
	done := make(chan error, 1)
	go func() {
		_, err := fenceWithin(t, fencer, ep.Epoch, time.Minute)
		done <- err
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Fence has not returned after 10 s: it waits for a PUT that never returns")
	}
	if calls.Load() == 0 {
		t.Fatal("the fence wrote nothing into the hung bucket: the test does not reach its case")
	}
	if n := abandoned.Load(); n != calls.Load() {
		t.Fatalf("the fence reported %d requests left running, want the %d hung ones", n, calls.Load())
	}
}
