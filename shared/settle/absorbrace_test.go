package settle_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/chainsettle"
	"github.com/starlog/starlog/star/reader"
)

// Absorbers meeting on one epoch (issue 11, defects 8 and 9): a crashed
// large pass re-run with other boundaries, two absorbers interleaved, and
// a deposed leader finishing its pass after a successor settled. Each
// starts from one epoch of genuine slots whose absorb rows were stripped,
// absorbs it its own way, then settles and trims and reads every record
// back.

// rawChain is one epoch of genuine slots (express, three zones) with every
// absorb row stripped: checkpoint 0, no span refs, no markers.
type rawChain struct {
	e     *env
	snap  snapshot
	epoch uint64
	slots []absorb.Slot
}

func newRawChain(t *testing.T) *rawChain {
	t.Helper()
	e := newEnv(t, envOpts{})
	// Rounds of concurrent appends, so every stream rides most slots and a
	// stream's ref in a pass of several slots holds several slot refs.
	for round := range 10 {
		var wg sync.WaitGroup
		for _, id := range []string{"a", "b", "c"} {
			wg.Go(func() { e.write(id, 2, 3, 150+60*round) })
		}
		wg.Wait()
	}
	e.waitAbsorbed()
	e.loglet.Close()
	ctx := context.Background()
	epoch := e.loglet.Epoch()
	c := chain.New(e.cfg.Star, e.cfg.Class, e.cfg.Incarnation, e.meta, e.objs)
	rec, _, err := c.Epoch(ctx, epoch)
	if err != nil {
		t.Fatal(err)
	}
	r := &rawChain{e: e, epoch: epoch}
	if err := c.Walk(ctx, rec, 0, rec.Checkpoint, func(sf chain.SlotFooter) error {
		r.slots = append(r.slots, absorb.Slot{Slot: sf.Slot, Extents: sf.Footer.Extents})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(r.slots) < 8 {
		t.Fatalf("only %d slots written; the tests need at least 8", len(r.slots))
	}
	snap := takeSnapshot(t, e)
	r.snap = snapshot{objects: snap.objects}
	for _, it := range snap.rows {
		switch {
		case strings.HasPrefix(it.SK, meta.RefPrefix), strings.HasPrefix(it.SK, meta.MarkerPrefix):
			continue
		case strings.HasPrefix(it.SK, "e#"):
			var x meta.Epoch
			if err := meta.Decode(it.Val, &x); err != nil {
				t.Fatal(err)
			}
			x.Checkpoint, x.Rewritten, x.Trimmed, x.Frontier, x.Rewrites = 0, 0, 0, "", nil
			it.Val = meta.Encode(x)
		}
		r.snap.rows = append(r.snap.rows, it)
	}
	return r
}

// restore is a fresh world holding the stripped chain: an env over fresh
// stores with the same acknowledged records, and no loglet.
func (r *rawChain) restore(t *testing.T) *env {
	t.Helper()
	ms, os := r.snap.restore(t)
	e := &env{t: t, meta: mfaults.New(ms, 1), objs: faults.Wrap(os, faults.WithSeed(1)), cfg: r.e.cfg,
		streams: nil, acked: r.e.acked}
	cfg := r.e.st.Config
	cfg.ScratchDir = t.TempDir()
	e.st = &settle.Stores{Meta: e.meta, Objects: e.objs, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: e.meta},
		Config: cfg, Logger: quietLog()}
	rd, err := reader.New(reader.Config{Meta: e.meta, Objects: e.objs, SettledBucket: settledB, CacheBytes: 1 << 20, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	e.rd = rd
	return e
}

// absorberOn is an absorber of e's chain that talks to ms (a wrapper of
// e's metastore), one write at a time so a test names each step.
func absorberOn(e *env, ms meta.Store) *absorb.Absorber {
	return &absorb.Absorber{Star: e.cfg.Star, Class: e.cfg.Class, Meta: ms, Rip: e.cfg.Ripening, Concurrency: 1,
		UpdateEpoch: chain.New(e.cfg.Star, e.cfg.Class, e.cfg.Incarnation, ms, nil).UpdateEpoch}
}

// absorbRun feeds slots[from:] to abs in passes of size slots, the way a
// walk does: a pass that must match a longer recorded one (ErrNeedMore)
// is offered more slots. It returns how far it got.
func absorbRun(ctx context.Context, abs *absorb.Absorber, epoch uint64, slots []absorb.Slot, from, size int) (int, error) {
	i := from
	for i < len(slots) {
		k := min(size, len(slots)-i)
		n, err := abs.Pass(ctx, epoch, slots[i:i+k])
		for errors.Is(err, absorb.ErrNeedMore) && i+k < len(slots) {
			k = min(2*k, len(slots)-i)
			n, err = abs.Pass(ctx, epoch, slots[i:i+k])
		}
		if err != nil {
			return i, err
		}
		if n <= 0 {
			return i, fmt.Errorf("pass at slot %d consumed %d slots", slots[i].Slot, n)
		}
		i += n
	}
	return i, nil
}

func checkpointOf(t *testing.T, e *env, epoch uint64) meta.Epoch {
	t.Helper()
	rec, _, err := chain.New(e.cfg.Star, e.cfg.Class, "test", e.meta, nil).Epoch(context.Background(), epoch)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// checkTiles requires every stream's rows to tile [0, acknowledged) with
// neither gap nor overlap.
func checkTiles(t *testing.T, e *env) error {
	t.Helper()
	for _, id := range e.ids() {
		var next uint64
		for _, r := range rowsOf(t, e.meta, id) {
			if r.ref.FirstSeq != next {
				return fmt.Errorf("stream %s: row [%d,%d) after rows ending at %d (gap or overlap)", id, r.ref.FirstSeq, r.ref.EndSeq, next)
			}
			next = r.ref.EndSeq
		}
		if want := uint64(len(e.acked[id])); next != want {
			return fmt.Errorf("stream %s: rows end at %d, acknowledged %d", id, next, want)
		}
	}
	return nil
}

// settleTrimCheck settles everything (cap-ripe an hour on), trims past
// the read grace, and requires the end state: rows tile, every marker is
// resolved, every slot below the checkpoint is trimmed, and every
// acknowledged record reads back from the settled objects.
func settleTrimCheck(t *testing.T, e *env, epoch uint64, now time.Time) {
	t.Helper()
	ctx := context.Background()
	if _, err := settleAll(ctx, e.st, now, false); err != nil {
		t.Fatalf("settle: %v", err)
	}
	ch := settle.ChainRef{Star: e.cfg.Star, Class: e.cfg.Class}
	for _, at := range []time.Time{now, now.Add(e.st.Config.WithDefaults().ReadGrace)} {
		if _, err := reclaim.TrimCheck(ctx, e.st, ch, at); err != nil {
			t.Fatalf("trim: %v", err)
		}
	}
	if m := liveMarkers(t, e); len(m) != 0 {
		t.Fatalf("%d markers left after a cap-ripe settle, the first %+v", len(m), m[0])
	}
	checkSettled(t, e, map[string]transit{})
	if rec := checkpointOf(t, e, epoch); rec.Trimmed != rec.Checkpoint || rec.Checkpoint == 0 {
		t.Fatalf("epoch after trim: checkpoint %d trimmed %d", rec.Checkpoint, rec.Trimmed)
	}
	e.checkReads(e.rd)
}

// A crash after every step of a large pass (each metastore write, before
// it lands or after with its reply lost), then a re-run by a fresh
// absorber from the durable checkpoint with smaller passes, with larger
// ones, or by a chain settlement's walk: the rows never overlap, the
// group settle and the trim complete, and every record reads back.
func TestCrashInALargePassThenOtherBoundaries(t *testing.T) {
	rc := newRawChain(t)
	ctx := context.Background()
	n := len(rc.slots)
	now := time.Now().Add(time.Hour)
	large := rc.slots[1 : n-1] // a pass in the middle, of all but two slots

	// The steps of the large pass, counted on an uncrashed run.
	e := rc.restore(t)
	if _, err := absorberOn(e, e.meta).Pass(ctx, rc.epoch, rc.slots[:1]); err != nil {
		t.Fatal(err)
	}
	count := &crasher{left: 1 << 30}
	if _, err := absorberOn(e, crashMeta{e.meta, count}).Pass(ctx, rc.epoch, large); err != nil {
		t.Fatal(err)
	}
	steps := count.steps
	t.Logf("%d slots; the large pass of %d slots takes %d metastore writes", n, len(large), steps)

	reruns := map[string]func(e *env, from int) error{
		"smaller": func(e *env, from int) error {
			_, err := absorbRun(ctx, absorberOn(e, e.meta), rc.epoch, rc.slots, from, 2)
			return err
		},
		"larger": func(e *env, from int) error {
			_, err := absorbRun(ctx, absorberOn(e, e.meta), rc.epoch, rc.slots, from, n)
			return err
		},
		"walk": func(e *env, _ int) error {
			succ := chain.New(e.cfg.Star, e.cfg.Class, chain.Incarnation("star2", 1), e.meta, e.objs)
			abs := &absorb.Absorber{Star: e.cfg.Star, Class: e.cfg.Class, Meta: e.meta, Rip: e.cfg.Ripening, UpdateEpoch: succ.UpdateEpoch}
			return chainsettle.Epoch(ctx, succ, abs, rc.epoch)
		},
	}
	for _, name := range []string{"smaller", "larger", "walk"} {
		for _, after := range []bool{false, true} {
			for k := range steps {
				t.Run(fmt.Sprintf("%s/after=%v/step=%d", name, after, k), func(t *testing.T) {
					e := rc.restore(t)
					if _, err := absorberOn(e, e.meta).Pass(ctx, rc.epoch, rc.slots[:1]); err != nil {
						t.Fatal(err)
					}
					c := &crasher{left: k, after: after}
					if _, err := absorberOn(e, crashMeta{e.meta, c}).Pass(ctx, rc.epoch, large); !errors.Is(err, errCrash) {
						t.Fatalf("the crash at step %d did not hit: %v", k, err)
					}
					from := int(checkpointOf(t, e, rc.epoch).Checkpoint)
					if err := reruns[name](e, from); err != nil {
						t.Fatalf("re-run from slot %d: %v", from, err)
					}
					if err := checkTiles(t, e); err != nil {
						t.Fatal(err)
					}
					e.checkReads(e.rd)
					settleTrimCheck(t, e, rc.epoch, now)
				})
			}
		}
	}
}

// interleaver orders the metastore calls of several actors: each call
// blocks until the schedule picks its actor among those waiting at a call,
// so one seed replays one interleaving exactly.
type interleaver struct {
	ev    chan int // an actor arriving at a call, or ^id when it is done
	gates []chan struct{}
	// retired counts span ref deletes by actors 0 and 1 (the absorbers):
	// rows they re-created after a settle and took back (or found the
	// settle had taken back already).
	retired atomic.Int64
}

func newInterleaver(n int) *interleaver {
	il := &interleaver{ev: make(chan int)}
	for range n {
		il.gates = append(il.gates, make(chan struct{}))
	}
	return il
}

// run schedules until every actor is done: once each live actor waits at
// a call, it lets one of them proceed, picked by rng with per-actor
// weights redrawn every few steps (swarm style: an actor starved for a
// phase lags far behind, as a paused leader does).
func (il *interleaver) run(rng *rand.Rand) {
	weight := make([]float64, len(il.gates))
	live := len(il.gates)
	var waiting []int
	for step := 0; live > 0; step++ {
		if step%24 == 0 { // a new phase: who runs, who is (nearly) paused
			for i := range weight {
				weight[i] = []float64{0.01, 0.3, 1}[rng.IntN(3)]
			}
		}
		for len(waiting) < live {
			id := <-il.ev
			if id < 0 {
				live--
				continue
			}
			waiting = append(waiting, id)
		}
		if live == 0 {
			return
		}
		slices.Sort(waiting)
		var sum float64
		for _, id := range waiting {
			sum += weight[id]
		}
		i, x := 0, rng.Float64()*sum
		for ; i < len(waiting)-1 && x >= weight[waiting[i]]; i++ {
			x -= weight[waiting[i]]
		}
		id := waiting[i]
		waiting = slices.Delete(waiting, i, i+1)
		il.gates[id] <- struct{}{}
	}
}

type actorMeta struct {
	meta.Store
	il *interleaver
	id int
}

func (a actorMeta) wait() { a.il.ev <- a.id; <-a.il.gates[a.id] }
func (a actorMeta) done() { a.il.ev <- ^a.id }

func (a actorMeta) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	a.wait()
	return a.Store.Get(ctx, pk, sk)
}

func (a actorMeta) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	a.wait()
	return a.Store.Put(ctx, pk, sk, val, cond)
}

func (a actorMeta) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	a.wait()
	if a.id < 2 && strings.HasPrefix(sk, meta.RefPrefix) {
		a.il.retired.Add(1)
	}
	return a.Store.Delete(ctx, pk, sk, cond)
}

func (a actorMeta) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	a.wait()
	return a.Store.Query(ctx, q)
}

// Two absorbers on one epoch with their own pass boundaries, their
// metastore calls interleaved in many orders: the live leader's loop
// (passes of five, from its own index) and a walk that reads the
// checkpoint and takes passes of two, or one larger pass; in half the
// orders an auditor settles (cap-ripe) over and over meanwhile, so the
// absorber that loses a pass meets refs already settled and deleted.
// Whatever the order, both finish, no settle job fails, the rows tile
// without overlap, and (with the auditor, and for some orders without)
// the settle and the trim complete with every record reading back.
func TestTwoAbsorbersInterleavedConverge(t *testing.T) {
	rc := newRawChain(t)
	ctx := context.Background()
	n := len(rc.slots)
	now := time.Now().Add(time.Hour)
	var retired int64
	defer func() { t.Logf("absorbers took back %d re-created span refs over all orders", retired) }()
	for seed := range uint64(64) {
		withSettle := seed%2 == 1
		t.Run(fmt.Sprintf("seed=%d/settle=%v", seed, withSettle), func(t *testing.T) {
			e := rc.restore(t)
			actors := 2
			if withSettle {
				actors = 3
			}
			il := newInterleaver(actors)
			live, walk := actorMeta{e.meta, il, 0}, actorMeta{e.meta, il, 1}
			walkSize := 2
			if seed%3 == 2 {
				walkSize = n
			}
			var errs [3]error
			var wg sync.WaitGroup
			var absorbing atomic.Int64 // absorbers still running
			absorbing.Store(2)
			wg.Go(func() {
				defer absorbing.Add(-1)
				defer live.done()
				_, errs[0] = absorbRun(ctx, absorberOn(e, live), rc.epoch, rc.slots, 0, 5)
			})
			wg.Go(func() {
				defer absorbing.Add(-1)
				defer walk.done()
				rec, _, err := chain.New(e.cfg.Star, e.cfg.Class, "walker", walk, nil).Epoch(ctx, rc.epoch)
				if err != nil {
					errs[1] = err
					return
				}
				_, errs[1] = absorbRun(ctx, absorberOn(e, walk), rc.epoch, rc.slots, int(rec.Checkpoint), walkSize)
			})
			if withSettle {
				aud := actorMeta{e.meta, il, 2}
				cfg := e.st.Config
				cfg.Workers = 1 // one call at a time, as the interleaver needs
				st := &settle.Stores{Meta: aud, Objects: e.objs, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: aud},
					Config: cfg, Logger: quietLog()}
				wg.Go(func() {
					defer aud.done()
					for range 100 {
						if _, err := settleAll(ctx, st, now, false); err != nil {
							errs[2] = err
							return
						}
						if absorbing.Load() == 0 {
							return
						}
					}
				})
			}
			il.run(rand.New(rand.NewPCG(seed, 11)))
			wg.Wait()
			retired += il.retired.Load()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("actor %d: %v", i, err)
				}
			}
			if cp := checkpointOf(t, e, rc.epoch).Checkpoint; cp != uint64(n) {
				t.Fatalf("checkpoint %d after both absorbed %d slots", cp, n)
			}
			if err := checkTiles(t, e); err != nil {
				t.Fatal(err)
			}
			if withSettle || seed%8 == 0 {
				e.checkReads(e.rd)
				settleTrimCheck(t, e, rc.epoch, now)
			}
		})
	}
}

// pauser holds one actor's metastore call (the at-th after arm, counting
// from 0) until resume is closed: a leader paused mid-pass.
type pauser struct {
	meta.Store
	mu     sync.Mutex
	n, at  int
	paused chan struct{}
	resume chan struct{}
}

func (p *pauser) arm(at int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n, p.at = 0, at
	p.paused, p.resume = make(chan struct{}), make(chan struct{})
}

func (p *pauser) gate() {
	p.mu.Lock()
	hit := p.paused != nil && p.n == p.at
	p.n++
	paused, resume := p.paused, p.resume
	p.mu.Unlock()
	if hit {
		close(paused)
		<-resume
	}
}

func (p *pauser) calls() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n
}

func (p *pauser) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	p.gate()
	return p.Store.Get(ctx, pk, sk)
}

func (p *pauser) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	p.gate()
	return p.Store.Put(ctx, pk, sk, val, cond)
}

func (p *pauser) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	p.gate()
	return p.Store.Delete(ctx, pk, sk, cond)
}

func (p *pauser) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	p.gate()
	return p.Store.Query(ctx, q)
}

// A leader paused before each metastore call of its pass, while a
// successor fences the epoch, walks and absorbs it (its own pass
// boundaries), settles every stream into catalog rows, deletes the span
// refs, resolves the markers and trims the slots; then the deposed leader
// resumes and finishes its pass. It must resurrect no span ref and no
// marker: the rows still tile, a later settle and trim complete, and every
// record reads back.
func TestPausedLeaderAfterSuccessorSettled(t *testing.T) {
	rc := newRawChain(t)
	ctx := context.Background()
	n := len(rc.slots)
	now := time.Now().Add(time.Hour)
	pass := rc.slots[1 : n-1]

	e := rc.restore(t)
	p := &pauser{Store: e.meta}
	leader := absorberOn(e, p)
	if _, err := leader.Pass(ctx, rc.epoch, rc.slots[:1]); err != nil {
		t.Fatal(err)
	}
	p.arm(-1)
	if _, err := leader.Pass(ctx, rc.epoch, pass); err != nil {
		t.Fatal(err)
	}
	calls := p.calls()
	t.Logf("%d slots; the leader's pass of %d slots makes %d metastore calls", n, len(pass), calls)

	for at := range calls {
		t.Run(fmt.Sprintf("paused-before-call=%d", at), func(t *testing.T) {
			e := rc.restore(t)
			p := &pauser{Store: e.meta}
			leader := absorberOn(e, p)
			if _, err := leader.Pass(ctx, rc.epoch, rc.slots[:1]); err != nil {
				t.Fatal(err)
			}
			p.arm(at)
			type result struct {
				n   int
				err error
			}
			done := make(chan result, 1)
			go func() {
				n, err := leader.Pass(ctx, rc.epoch, pass)
				done <- result{n, err}
			}()
			select {
			case <-p.paused:
			case r := <-done:
				t.Fatalf("the pass ended (%d, %v) before call %d", r.n, r.err, at)
			}

			// The successor settles the chain, then the auditor settles
			// every stream and trims past the grace.
			succ := chain.New(e.cfg.Star, e.cfg.Class, chain.Incarnation("star2", 1), e.meta, e.objs)
			abs := &absorb.Absorber{Star: e.cfg.Star, Class: e.cfg.Class, Meta: e.meta, Rip: e.cfg.Ripening, UpdateEpoch: succ.UpdateEpoch}
			if err := chainsettle.Epoch(ctx, succ, abs, rc.epoch); err != nil {
				t.Fatalf("successor's chain settlement: %v", err)
			}
			settleTrimCheck(t, e, rc.epoch, now)

			close(p.resume)
			r := <-done
			if r.err != nil {
				t.Fatalf("the deposed leader's pass: %v", r.err)
			}
			t.Logf("the deposed leader resumed and made %d more metastore calls", p.calls()-at)
			if r.n != len(pass) {
				t.Fatalf("the deposed leader's pass consumed %d of %d slots", r.n, len(pass))
			}
			if err := checkTiles(t, e); err != nil {
				t.Fatalf("after the deposed leader's pass: %v", err)
			}
			for _, id := range e.ids() {
				for _, row := range rowsOf(t, e.meta, id) {
					if row.ref.Span != nil {
						t.Fatalf("stream %s: span ref [%d,%d) stands after everything settled", id, row.ref.FirstSeq, row.ref.EndSeq)
					}
				}
			}
			if m := liveMarkers(t, e); len(m) != 0 {
				t.Fatalf("the deposed leader left marker %+v", m[0])
			}
			settleTrimCheck(t, e, rc.epoch, now.Add(time.Hour))
		})
	}
}
