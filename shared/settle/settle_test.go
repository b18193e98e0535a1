package settle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
)

// The whole life of a byte, on the real write path: appends acknowledged by
// the express loglet, absorbed into refs and markers, settled into objects
// (extending tails, splitting refs at the output cap), then the slots
// trimmed behind the read grace. Every acknowledged record reads back
// identically before, during and after, from concurrent readers, while
// appends go on; settled blocks equal their transit blocks byte for byte;
// at most one sub-cap object per stream, and it is the last.
func TestSettleAndTrimReadBack(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOpts{registry: reg})
	ctx := context.Background()
	sizes := map[string][3]int{ // batches, records per batch, body bytes
		"hot":   {40, 8, 300},
		"warm":  {20, 4, 200},
		"cold":  {3, 2, 50},
		"tiny":  {1, 1, 10},
		"burst": {6, 50, 400},
	}
	for id, s := range sizes {
		e.write(id, s[0], s[1], s[2])
	}
	e.waitAbsorbed()
	e.checkReads(e.rd)
	stop := e.readers(3)
	tr := captureTransit(t, e)

	// Round 1: everything cap-ripe.
	now := time.Now().Add(time.Hour)
	if _, err := plan.Plan(ctx, e.st, now); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, reg, "starlog_settle_unsettled_bytes"); v < 100_000 {
		t.Fatalf("unsettled bytes %v before settling ~150 KB", v)
	}
	if v := metricValue(t, reg, "starlog_settle_lag_seconds"); v < 3000 {
		t.Fatalf("settle lag %v s; markers ripe 2 min after birth, planned an hour later", v)
	}
	reps, err := settleAll(ctx, e.st, now, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(reps) == 0 || reps[0].Objects == 0 {
		t.Fatalf("round 1 settled nothing: %+v", reps)
	}
	// More appends while settling goes on, then a second round that
	// extends the tail objects.
	for id, s := range sizes {
		e.write(id, s[0]/2+1, s[1], s[2])
	}
	e.waitAbsorbed()
	for id, x := range captureTransit(t, e) {
		for seq, b := range x {
			tr[id][seq] = b
		}
	}
	reps2, err := settleAll(ctx, e.st, now.Add(time.Hour), false)
	if err != nil {
		t.Fatal(err)
	}
	var total settle.Report
	for _, r := range append(reps, reps2...) {
		total.Objects += r.Objects
		total.Splits += r.Splits
		total.Adopted += r.Adopted
		total.Resolved += r.Resolved
	}
	t.Logf("settled: %+v", total)
	if total.Adopted != 0 {
		t.Fatalf("one settler adopted objects: %+v", total)
	}
	if n := len(liveMarkers(t, e)); n != 0 {
		t.Fatalf("%d markers left after cap-ripe settles", n)
	}
	objects, revised := checkSettled(t, e, tr)
	if objects <= len(sizes) || revised == 0 {
		t.Fatalf("%d catalog rows (%d extended tails) for %d streams: the cap should have split the hot streams and round 2 extended tails", objects, revised, len(sizes))
	}
	before := slotsLeft(t, e)
	// Trim: the first check records the rewrite, and deletes nothing until
	// the grace has passed.
	later := now.Add(2 * time.Hour)
	if rep, err := reclaim.TrimCheck(ctx, e.st, settle.ChainRef{Star: e.cfg.Star, Class: e.cfg.Class}, later); err != nil || rep.Trimmed != 0 {
		t.Fatalf("trim inside the grace: %+v %v", rep, err)
	}
	if n := slotsLeft(t, e); n != before {
		t.Fatalf("slots went from %d to %d inside the read grace", before, n)
	}
	rep, err := reclaim.TrimCheck(ctx, e.st, settle.ChainRef{Star: e.cfg.Star, Class: e.cfg.Class}, later.Add(5*time.Minute))
	if err != nil || rep.Trimmed == 0 {
		t.Fatalf("trim after the grace: %+v %v", rep, err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	e.checkReads(e.rd)
	// Every slot below the checkpoint is gone; what is left is the open
	// epoch's unabsorbed tail at most.
	rec := epochRecord(t, e)
	if rec.Trimmed != rec.Checkpoint || rec.Rewritten != rec.Checkpoint || len(rec.Rewrites) != 0 {
		t.Fatalf("epoch after trim: checkpoint %d rewritten %d trimmed %d rewrites %v", rec.Checkpoint, rec.Rewritten, rec.Trimmed, rec.Rewrites)
	}
	for s := uint64(0); s < rec.Checkpoint; s++ {
		for _, z := range zones {
			if _, err := e.objs.Bucket(z).Head(ctx, chain.SlotKey(e.cfg.Star, e.cfg.Class, rec.Epoch, s)); !errors.Is(err, objstore.ErrNotFound) {
				t.Fatalf("slot %d in %s after trim: %v", s, z, err)
			}
		}
	}
	// A reader that never saw the stream reads it back from settled
	// objects alone.
	e.checkReads(e.rd)
	if v := metricValue(t, reg, "starlog_settle_slots_trimmed_total"); v != float64(rep.Trimmed) {
		t.Fatalf("slots trimmed metric %v, trimmed %d", v, rep.Trimmed)
	}
	if v := metricValue(t, reg, "starlog_settle_object_bytes_total"); v <= 0 {
		t.Fatalf("settled bytes metric %v", v)
	}
	// The gauges Plan sets: nothing is left unsettled.
	if _, err := plan.Plan(ctx, e.st, later.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if v := metricValue(t, reg, "starlog_settle_unsettled_bytes"); v != 0 {
		t.Fatalf("unsettled bytes %v after everything settled", v)
	}
}

// metricValue sums a metric family's samples.
func metricValue(t testing.TB, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return v
}

func epochRecord(t testing.TB, e *env) meta.Epoch {
	t.Helper()
	k := meta.EpochKey(e.cfg.Star, e.cfg.Class, e.loglet.Epoch())
	it, err := e.meta.Get(context.Background(), k.PK, k.SK)
	if err != nil {
		t.Fatal(err)
	}
	var rec meta.Epoch
	if err := meta.Decode(it.Val, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}
