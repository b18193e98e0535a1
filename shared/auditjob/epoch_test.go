package auditjob_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
)

var zones = []string{"az1", "az2", "az3"}

// halted is a chain whose writer committed slots [0,5) of epoch 1 and one
// garbage slot above the cut (6, uploaded in parallel, never released),
// fenced its own epoch at cut 5 and minted epoch 2: what a halt-recovery
// leaves below the mint head.
type halted struct {
	st *settle.Stores
	c  *chain.Chain
	ch settle.ChainRef
}

func newHalted(t *testing.T) halted {
	t.Helper()
	ctx := context.Background()
	objs, err := mem.New(append(zones, "std")...)
	if err != nil {
		t.Fatal(err)
	}
	ms := testsvc.SQLite(t)
	ch := settle.ChainRef{Star: "star1", Class: meta.Express}
	c := chain.New(ch.Star, ch.Class, "star1:1", ms, objs)
	p := mintAndCommit(t, c)
	if cut, err := c.Fence(ctx, 1, true); err != nil || cut != 5 {
		t.Fatalf("own fence: cut %d, %v", cut, err)
	}
	if _, err := c.Mint(ctx, p); err != nil {
		t.Fatal(err)
	}
	st := &settle.Stores{Meta: ms, Objects: objs, SettledBucket: "std", Streams: settle.MetaStreams{Meta: ms},
		Config: settle.Config{ScratchDir: t.TempDir()}}
	return halted{st: st, c: c, ch: ch}
}

// mintAndCommit mints epoch 1 of c (express: W=2 of the three zones;
// standard: the bucket "std"; window 4) and commits slots [0,5) plus slot
// 6, one record each of stream "s": slot 6 is garbage above the cut the
// fence will find at 5.
func mintAndCommit(t *testing.T, c *chain.Chain) meta.EpochParams {
	t.Helper()
	ctx := context.Background()
	p := meta.EpochParams{Buckets: zones, W: 2, Window: 4}
	if c.Class == meta.Standard {
		p = meta.EpochParams{Buckets: []string{"std"}, W: 1, Window: 4}
	}
	ep, err := c.Mint(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Writer(ep, chain.WriterOptions{Deadline: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, s := range []uint64{0, 1, 2, 3, 4, 6} {
		body, err := w.Render(s, []format.Batch{{StreamID: "s", Records: []format.Record{{SeqNum: s, Timestamp: 1 + s, Body: fmt.Appendf(nil, "record %d", s)}}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Commit(ctx, s, body); err != nil {
			t.Fatalf("commit %d: %v", s, err)
		}
	}
	return p
}

// absorbLive absorbs [checkpoint, cut) as the live leader does after a
// recovery (its own absorber, its own passes).
func (h halted) absorbLive(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	rec, _, err := h.c.Epoch(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	abs := &absorb.Absorber{Star: h.ch.Star, Class: h.ch.Class, Meta: h.st.Meta, Rip: h.st.Config.WithDefaults().Ripening(h.ch.Class), UpdateEpoch: h.c.UpdateEpoch}
	var slots []absorb.Slot
	if err := h.c.Walk(ctx, rec, rec.Checkpoint, *rec.Cut, func(sf chain.SlotFooter) error {
		slots = append(slots, absorb.Slot{Slot: sf.Slot, Extents: sf.Footer.Extents})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for len(slots) > 0 {
		n, err := abs.Pass(ctx, 1, slots[:min(2, len(slots))])
		if err != nil {
			t.Fatal(err)
		}
		slots = slots[n:]
	}
}

func (h halted) epoch(t *testing.T, e uint64) meta.Epoch {
	t.Helper()
	rec, _, err := h.c.Epoch(context.Background(), e)
	if err != nil {
		t.Fatal(err)
	}
	return rec
}

// checkSettled: epoch 1 is settled, absorbed to its cut, the stream's rows
// tile [0,5), and the garbage slot is dead once reaped.
func (h halted) checkSettled(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	rec := h.epoch(t, 1)
	if !rec.Settled || rec.Checkpoint != 5 {
		t.Fatalf("epoch 1 after chain-settle: settled %v checkpoint %d", rec.Settled, rec.Checkpoint)
	}
	pg, err := h.st.Meta.Query(ctx, meta.Query{PK: meta.RefKey("s", 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~"})
	if err != nil {
		t.Fatal(err)
	}
	var next uint64
	for _, it := range pg.Items {
		var r meta.Ref
		if err := meta.Decode(it.Val, &r); err != nil {
			t.Fatal(err)
		}
		if r.FirstSeq != next || r.Span == nil || r.Span.Epoch != 1 {
			t.Fatalf("row %+v after end %d", r, next)
		}
		next = r.EndSeq
	}
	if next != 5 {
		t.Fatalf("rows end at %d, want 5", next)
	}
	// The settle only poisons the garbage window (a star may not delete
	// slots); what the trim does at the cut reaps slot 6's copies.
	if err := h.c.ReapGarbage(ctx, rec, *rec.Cut); err != nil {
		t.Fatal(err)
	}
	ta, err := h.c.Classify(ctx, rec, 6)
	if err != nil || ta.Fate() != chain.Dead || ta.Flights() != 0 {
		t.Fatalf("garbage slot 6 above the cut after the reap: %v, %d flights, %v", ta.Fate(), ta.Flights(), err)
	}
	for s := range uint64(5) {
		if ta, err := h.c.Classify(ctx, rec, s); err != nil || ta.Fate() != chain.Committed {
			t.Fatalf("slot %d: %v %v", s, ta.Fate(), err)
		}
	}
}

// The janitor defers a halted epoch its leader has not absorbed to the
// cut, queues it once absorbed, and never names a head epoch; the
// chain-settle job settles it, twice at once as well as once, and then
// the janitor finds nothing.
func TestJanitorAndChainSettle(t *testing.T) {
	ctx := context.Background()
	h := newHalted(t)

	// A settle marker its star left for epoch 1 before it restarted and
	// minted epoch 2 has nothing left to authorise: the pass deletes it.
	dk := meta.SettleDueKey(h.ch.Star, h.ch.Class)
	if _, err := h.st.Meta.Put(ctx, dk.PK, dk.SK, meta.Encode(meta.SettleDue{Owner: "star1:1", Epoch: 1}), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	rep, err := auditjob.Janitor(ctx, h.st)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Chains != 1 || len(rep.Jobs) != 0 || rep.Deferred != 1 {
		t.Fatalf("before the absorb reaches the cut: %+v", rep)
	}
	if _, err := h.st.Meta.Get(ctx, dk.PK, dk.SK); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("a marker below the head survived the pass: %v", err)
	}

	h.absorbLive(t)
	rep, err = auditjob.Janitor(ctx, h.st)
	if err != nil {
		t.Fatal(err)
	}
	want := auditjob.ChainSettle(h.ch, 1)
	if len(rep.Jobs) != 1 || rep.Jobs[0] != want || rep.Deferred != 0 {
		t.Fatalf("absorbed to the cut: %+v, want one %s", rep, want)
	}

	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { errs[i] = auditjob.Do(ctx, h.st, rep.Jobs[0]) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	h.checkSettled(t)
	if err := auditjob.Do(ctx, h.st, rep.Jobs[0]); err != nil {
		t.Fatalf("re-run of a settled epoch: %v", err)
	}

	rep, err = auditjob.Janitor(ctx, h.st)
	if err != nil || len(rep.Jobs) != 0 || rep.Deferred != 0 {
		t.Fatalf("after settling: %+v %v", rep, err)
	}

	// The head epoch is never settled from a queue, and is left as it was.
	before, _, _, _ := h.c.Head(ctx)
	if err := auditjob.Do(ctx, h.st, auditjob.ChainSettle(h.ch, 2)); !errors.Is(err, auditjob.ErrHeadEpoch) {
		t.Fatalf("chain-settle of the head epoch: %v", err)
	}
	after, _, _, _ := h.c.Head(ctx)
	if after.State != meta.HeadOpen || after.Epoch != 2 || after.Owner != before.Owner {
		t.Fatalf("head displaced: %+v", after)
	}
}

// A chain-settle of an epoch nobody absorbed to its cut (its writer died
// right after recovering) walks and absorbs it itself.
func TestChainSettleWalksUnabsorbedEpoch(t *testing.T) {
	h := newHalted(t)
	if err := auditjob.Do(context.Background(), h.st, auditjob.ChainSettle(h.ch, 1)); err != nil {
		t.Fatal(err)
	}
	h.checkSettled(t)
}

func TestChainSettleUnknownChain(t *testing.T) {
	h := newHalted(t)
	err := auditjob.Do(context.Background(), h.st, auditjob.ChainSettle(settle.ChainRef{Star: "nobody", Class: meta.Express}, 1))
	if err == nil {
		t.Fatal("chain-settle of a chain with no head succeeded")
	}
}
