package settle_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
	"github.com/starlog/starlog/shared/settle/quarantine"
	"github.com/starlog/starlog/star/reader"
)

// failingStreams injects a fault into one stream's settle: its state
// lookup fails while broken is set.
type failingStreams struct {
	inner  settle.Streams
	id     string
	broken atomic.Bool
}

var errInjected = errors.New("injected: stream state unavailable")

func (f *failingStreams) StreamState(ctx context.Context, id string) (bool, string, error) {
	if id == f.id && f.broken.Load() {
		return false, "", errInjected
	}
	return f.inner.StreamState(ctx, id)
}

// qtick plans at now and runs every job it plans, settle jobs first,
// keeping the settle errors (a failing stream fails its job).
func qtick(t *testing.T, st *settle.Stores, now time.Time) (reps []settle.Report, errs []error) {
	t.Helper()
	ctx := context.Background()
	st.Now = func() time.Time { return now }
	jobs, err := plan.Plan(ctx, st, now)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.Kind == settle.KindSettle {
			rep, err := settle.Settle(ctx, st, j)
			reps = append(reps, rep)
			if err != nil {
				errs = append(errs, err)
			}
		}
	}
	for _, j := range jobs {
		if j.Kind == settle.KindTrim {
			if _, err := reclaim.TrimCheck(ctx, st, j.Chain, now); err != nil {
				t.Fatalf("trim-check: %v", err)
			}
		}
	}
	return reps, errs
}

// slotKeys lists the chain slot keys left in the express buckets.
func slotKeys(t *testing.T, e *env) []string {
	t.Helper()
	var keys []string
	for _, b := range e.cfg.Buckets {
		for info, err := range e.objs.Bucket(b).List(context.Background(), "chains/") {
			if err != nil {
				t.Fatal(err)
			}
			keys = append(keys, b+"/"+info.Key)
		}
	}
	return keys
}

// A stream whose settle always fails is quarantined after QuarantineAfter
// consecutive jobs: its markers resolve without it, and the trim-check
// retires every slot of the other streams while the slots the bad stream
// rides stay pinned (it still reads back whole, from transit). Retry,
// once the fault is gone, settles it, lifts the quarantine and deletes the
// pinned slots the trim passed. Without the quarantine the bad stream's
// markers stay live and hold back the rewritten cursor, so the slots of
// the streams written after it are never trimmed.
func TestQuarantineLetsTrimProceed(t *testing.T) {
	reg := prometheus.NewRegistry()
	cfg := defaultSettleConfig(t)
	cfg.QuarantineAfter = 2
	e := newEnv(t, envOpts{settle: cfg, registry: reg})
	ctx := context.Background()
	fs := &failingStreams{inner: e.st.Streams, id: "bad"}
	fs.broken.Store(true)
	e.st.Streams = fs
	for _, id := range []string{"good1", "bad", "good2"} {
		e.write(id, 6, 4, 400)
		e.waitAbsorbed()
	}
	before := len(slotKeys(t, e))
	now := time.Now().Add(time.Hour)

	// Two failing jobs: the second quarantines the bad stream.
	_, errs := qtick(t, e.st, now)
	if len(errs) == 0 {
		t.Fatal("first tick: the bad stream's settle did not fail")
	}
	q, err := quarantine.List(ctx, e.meta)
	if err != nil || len(q) != 1 || q[0].Stream != "bad" || q[0].Failures != 1 || q[0].Quarantined != 0 {
		t.Fatalf("after one failure: %+v, %v; want bad counted once, not quarantined", q, err)
	}
	reps, errs := qtick(t, e.st, now.Add(time.Minute))
	if len(errs) != 0 {
		t.Fatalf("second tick: %v; the quarantined stream no longer fails its job", errs)
	}
	var quarantined int
	for _, r := range reps {
		quarantined += r.Quarantined
	}
	if quarantined != 1 {
		t.Fatalf("second tick quarantined %d streams, want 1: %+v", quarantined, reps)
	}
	q, err = quarantine.List(ctx, e.meta)
	if err != nil || len(q) != 1 || q[0].Quarantined == 0 || len(q[0].Pins) == 0 || !strings.Contains(q[0].Err, errInjected.Error()) {
		t.Fatalf("after two failures: %+v, %v; want bad quarantined with pins and its error", q, err)
	}
	if v := metricValue(t, reg, "starlog_settle_streams_quarantined_total"); v != 1 {
		t.Fatalf("streams quarantined = %v, want 1", v)
	}
	// Past the read grace, the trim-check retires every unpinned slot.
	qtick(t, e.st, now.Add(time.Minute+2*cfg.ReadGrace))
	qtick(t, e.st, now.Add(time.Minute+4*cfg.ReadGrace))
	left := slotKeys(t, e)
	pins := q[0].Pins
	for _, k := range left {
		var b, star, class string
		var epoch, slot uint64
		if !parseSlot(k, &b, &star, &class, &epoch, &slot) {
			t.Fatalf("unexpected key %s", k)
		}
		kept := false
		for _, p := range pins {
			kept = kept || (p.Star == star && string(p.Class) == class && p.Epoch == epoch && p.From <= slot && slot < p.End)
		}
		if !kept {
			t.Fatalf("slot %s is neither trimmed nor pinned by the quarantined stream (pins %+v; %d of %d slot copies left)", k, pins, len(left), before)
		}
	}
	t.Logf("%d of %d slot copies left, all pinned (pins %+v)", len(left), before, pins)
	if len(left) == 0 || len(left) >= before {
		t.Fatalf("%d of %d slot copies left; want the pinned ones only", len(left), before)
	}
	// The bad stream still reads back whole from its pinned slots.
	rd, err := reader.New(reader.Config{Meta: e.meta, Objects: e.objs, SettledBucket: settledB, CacheBytes: 1 << 20, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	e.checkReads(rd)

	// Retry while still broken: it stays quarantined.
	if _, err := quarantine.Retry(ctx, e.st, "bad"); !errors.Is(err, errInjected) {
		t.Fatalf("retry while broken: %v, want the injected error", err)
	}
	// Fixed: force refuses (its span refs still read the pinned slots);
	// retry settles it and lifts the quarantine.
	fs.broken.Store(false)
	if err := quarantine.Force(ctx, e.st, "bad"); err == nil || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("force with standing refs in pinned slots: %v, want refused", err)
	}
	rep, err := quarantine.Retry(ctx, e.st, "bad")
	if err != nil || rep.Settled != 1 || rep.Objects == 0 {
		t.Fatalf("retry: %+v, %v; want the stream settled", rep, err)
	}
	if q, err := quarantine.List(ctx, e.meta); err != nil || len(q) != 0 {
		t.Fatalf("after retry: %+v, %v; want no quarantine", q, err)
	}
	if left := slotKeys(t, e); len(left) != 0 {
		t.Fatalf("after retry %d slot copies left (%v); want the pinned ones deleted with the quarantine", len(left), left)
	}
	rd2, err := reader.New(reader.Config{Meta: e.meta, Objects: e.objs, SettledBucket: settledB, CacheBytes: 1 << 20, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	e.checkReads(rd2)
	if _, err := quarantine.Retry(ctx, e.st, "bad"); !errors.Is(err, quarantine.ErrNotQuarantined) {
		t.Fatalf("second retry: %v, want ErrNotQuarantined", err)
	}
}

// parseSlot parses "<bucket>/chains/<star>/<class>/<epoch>/<slot>".
func parseSlot(k string, b, star, class *string, epoch, slot *uint64) bool {
	parts := strings.Split(k, "/")
	if len(parts) != 6 || parts[1] != "chains" {
		return false
	}
	e, err1 := strconv.ParseUint(parts[4], 10, 64)
	s, err2 := strconv.ParseUint(parts[5], 10, 64)
	if err1 != nil || err2 != nil {
		return false
	}
	*b, *star, *class, *epoch, *slot = parts[0], parts[2], parts[3], e, s
	return meta.Class(*class).Valid()
}
