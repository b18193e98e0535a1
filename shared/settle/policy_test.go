package settle_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/star/loglet"
)

// A linger-ripened era settles the stream whose bytes crossed the trigger,
// with all of its standing window, and leaves the small streams of the
// same passes standing: their markers move to the age cap. At the cap,
// everything settles and every marker resolves.
func TestLingerSettlesOnlyStreamsAtTheTrigger(t *testing.T) {
	cfg := defaultSettleConfig(t)
	cfg.Express = settle.ClassTimers{Linger: 2 * time.Second, AgeCap: time.Hour}
	e := newEnv(t, envOpts{settle: cfg})
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() {
		for range 24 {
			e.write("hot", 1, 4, 500)
		}
	})
	for _, id := range []string{"s1", "s2"} {
		wg.Go(func() {
			for range 24 {
				e.write(id, 1, 1, 20)
			}
		})
	}
	wg.Wait()
	e.waitAbsorbed()
	start := time.Now()
	var lingers int
	for _, m := range liveMarkers(t, e) {
		if m.Cause == "linger" {
			lingers++
		}
	}
	if lingers == 0 {
		t.Fatal("hot crossed the trigger but no marker ripens at linger")
	}

	reps, err := settleAll(ctx, e.st, start.Add(4*time.Second), false)
	if err != nil {
		t.Fatal(err)
	}
	var total settle.Report
	for _, r := range reps {
		total.Settled += r.Settled
		total.Left += r.Left
		total.Rescheduled += r.Rescheduled
		total.Resolved += r.Resolved
	}
	t.Logf("linger round: %+v", total)
	if total.Settled == 0 || total.Left == 0 || total.Rescheduled == 0 {
		t.Fatalf("linger round should settle hot and leave s1, s2 standing: %+v", total)
	}
	for _, id := range []string{"s1", "s2"} {
		for _, r := range rowsOf(t, e.meta, id) {
			if r.ref.Settled != nil {
				t.Fatalf("stream %s settled below the trigger in a linger era", id)
			}
		}
	}
	hot := rowsOf(t, e.meta, "hot")
	if hot[0].ref.Settled == nil {
		t.Fatal("hot did not settle at linger")
	}
	for _, m := range liveMarkers(t, e) {
		if m.Cause == "linger" && m.Ripen <= start.Add(4*time.Second).UnixMilli() {
			t.Fatalf("ripe linger marker %+v left unjudged", m)
		}
	}
	e.checkReads(e.rd)

	if _, err := settleAll(ctx, e.st, start.Add(2*time.Hour), true); err != nil {
		t.Fatal(err)
	}
	if ms := liveMarkers(t, e); len(ms) != 0 {
		t.Fatalf("%d markers left after the age cap", len(ms))
	}
	checkSettled(t, e, captureTransit(t, e))
	e.checkReads(e.rd)
}

// A marker whose streams are all deleted resolves without a byte read or
// staged, and its slots are trimmed.
func TestDeletedStreamsResolveWithoutStaging(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	e.write("x", 5, 4, 100)
	e.write("y", 3, 2, 100)
	e.waitAbsorbed()
	e.loglet.Close()
	for _, id := range []string{"x", "y"} {
		if _, err := e.meta.Put(ctx, meta.RefKey(id, 0).PK, "deleted", []byte(`{"basin":"b1"}`), meta.IfAbsent()); err != nil {
			t.Fatal(err)
		}
	}
	e.objs.ResetCounters()
	now := time.Now().Add(time.Hour)
	reps, err := settleAll(ctx, e.st, now, true)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reps {
		if r.Deleted != r.Streams || r.Objects != 0 || r.Bundles != 0 || r.Staged != 0 || r.Resolved != r.Markers {
			t.Fatalf("deleted streams: %+v", r)
		}
	}
	c := e.objs.Counters()
	if n := c.Op(objstore.OpGet).Requests + c.Op(objstore.OpMultipartCreate).Requests; n != 0 {
		t.Fatalf("%d object reads or uploads for deleted streams", n)
	}
	// The next tick records the rewrite; one after the read grace trims.
	for _, at := range []time.Time{now.Add(time.Minute), now.Add(6 * time.Minute)} {
		if _, err := reclaim.TrimCheck(ctx, e.st, settle.ChainRef{Star: e.cfg.Star, Class: e.cfg.Class}, at); err != nil {
			t.Fatal(err)
		}
	}
	// Every slot below the checkpoint is gone (a pass the closed loglet
	// did not checkpoint stays for its chain settlement).
	rec := epochRecord(t, e)
	if rec.Trimmed != rec.Checkpoint || rec.Checkpoint == 0 {
		t.Fatalf("trimmed %d of %d slots", rec.Trimmed, rec.Checkpoint)
	}
	for s := range rec.Checkpoint {
		for _, z := range zones {
			if _, err := e.objs.Bucket(z).Head(ctx, chain.SlotKey(e.cfg.Star, e.cfg.Class, rec.Epoch, s)); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("slot %d in %s after the trim: %v", s, z, err)
			}
		}
	}
}

// Extents of 5 MiB or more, and a tail object that large, are copied
// server-side (ranged UploadPartCopy); small extents are staged and
// coalesced; the settled bytes equal the transit bytes.
func TestLargeExtentsCopyServerSide(t *testing.T) {
	cfg := defaultSettleConfig(t)
	cfg.OutputCap = 40 << 20
	cfg.Trigger = 8 << 20
	e := newEnv(t, envOpts{settle: cfg, tweak: func(c *loglet.Config) {
		c.TargetFlight, c.FlushInterval, c.PoolBudget = 12<<20, 2*time.Second, 64<<20
	}})
	ctx := context.Background()
	// A round's first batch is cut at once (the chain was idle) with
	// whatever else was pooled by then, the rest one interval later: 12
	// batches of 900 KiB leave one flight at least 6 of them (5.3 MiB),
	// wherever the first cut falls. With 9 a split of 4 and 5 put every
	// extent under 5 MiB ("first settle copied 0 bytes server-side", 1 run
	// in 6 on a quiet machine).
	big := func() {
		var wg sync.WaitGroup
		wg.Go(func() { e.write("big", 12, 1, 900<<10) })
		wg.Go(func() { e.write("small", 4, 3, 200) })
		wg.Wait()
		e.waitAbsorbed()
	}
	big()
	tr := captureTransit(t, e)
	e.objs.ResetCounters()
	reps, err := settleAll(ctx, e.st, time.Now().Add(time.Hour), false)
	if err != nil {
		t.Fatal(err)
	}
	copied1 := reps[0].Copied
	if copied1 < 5<<20 {
		t.Fatalf("first settle copied %d bytes server-side: %+v", copied1, reps)
	}
	c := e.objs.Counters()
	if got := c.Op(objstore.OpMultipartCopy); got.Requests == 0 || got.Bytes != copied1 {
		t.Fatalf("copy parts %+v, report says %d bytes", got, copied1)
	}
	// Round 2 extends big's tail object: its blocks are copied too.
	big()
	for id, x := range captureTransit(t, e) {
		for seq, b := range x {
			tr[id][seq] = b
		}
	}
	reps, err = settleAll(ctx, e.st, time.Now().Add(2*time.Hour), false)
	if err != nil {
		t.Fatal(err)
	}
	if reps[0].Copied < 13<<20 {
		t.Fatalf("extension copied %d bytes server-side: %+v", reps[0].Copied, reps)
	}
	var revised bool
	for _, r := range rowsOf(t, e.meta, "big") {
		revised = revised || (r.ref.Settled != nil && r.ref.Settled.Revision > 0)
	}
	if !revised {
		t.Fatal("big's tail object was not extended")
	}
	checkSettled(t, e, tr)
	e.checkReads(e.rd)
}
