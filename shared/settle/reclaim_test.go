package settle_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/reclaim"
)

// storage is what a stream's settled objects take: every object under
// its prefix in the settled bucket, against the objects its catalog rows
// name (the retained bytes).
func storage(t testing.TB, e *env, id string) (stored, retained uint64, objects int) {
	t.Helper()
	ctx := context.Background()
	for info, err := range e.objs.Bucket(settledB).List(ctx, "streams/"+basin+"/"+id+"/") {
		if err != nil {
			t.Fatal(err)
		}
		stored += uint64(info.Size)
		objects++
	}
	for _, r := range rowsOf(t, e.meta, id) {
		if r.ref.Settled != nil && !r.ref.Settled.Trimmed { // a Trimmed row's object waits for the reclaim
			retained += r.ref.Settled.Bytes
		}
	}
	return stored, retained, objects
}

// janitor runs the reclaim pass as the janitor does.
func janitor(t testing.TB, e *env, now time.Time) reclaim.ReclaimReport {
	t.Helper()
	rep, err := reclaim.Reclaim(context.Background(), e.st, now)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

// A slowly written stream settled every round: each settle extends its
// tail by a new revision. Measured from the object store, what it stores
// stays within one output cap of what its catalog rows name (item 5's
// bound: stored ≤ 1.1 × retained + one output cap), with readers racing
// the deletes throughout and every record read back.
func TestSuperseded(t *testing.T) {
	cfg := defaultSettleConfig(t)
	e := newEnv(t, envOpts{settle: cfg})
	ctx := context.Background()
	e.write("slow", 1, 4, 500)
	stop := e.readers(2)
	grace, outputCap := cfg.ReadGrace, cfg.OutputCap
	now := time.Now().Add(time.Hour)
	var worst float64
	var peak uint64
	var deleted int
	const rounds = 40
	for i := range rounds {
		e.write("slow", 1, 4, 500) // about 2 KiB a round
		e.waitAbsorbed()
		now = now.Add(2 * time.Minute) // rounds inside the grace: revisions pile up unless reclaimed
		if _, err := settleAll(ctx, e.st, now, true); err != nil {
			t.Fatal(err)
		}
		deleted += janitor(t, e, now).Deleted
		stored, retained, objects := storage(t, e, "slow")
		if stored > retained+retained/10+outputCap {
			t.Errorf("round %d: %d bytes stored in %d objects for %d retained: over 1.1 × retained + one output cap (%d)", i, stored, objects, retained, outputCap)
		}
		worst = max(worst, float64(stored)/float64(retained))
		peak = max(peak, stored-retained)
		if i%10 == 9 {
			t.Logf("round %d: stored %d B in %d objects, retained %d B (%.2f×)", i, stored, objects, retained, float64(stored)/float64(retained))
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	e.checkReads(e.rd)
	t.Logf("worst stored/retained %.2f×, at most %d B above retained (output cap %d B); %d superseded revisions deleted", worst, peak, outputCap, deleted)
	if deleted == 0 {
		t.Fatal("no superseded revision was deleted")
	}
	// Quiet: two passes a grace apart reclaim every superseded revision.
	for range 2 {
		now = now.Add(grace + time.Second)
		janitor(t, e, now)
	}
	stored, retained, _ := storage(t, e, "slow")
	if stored != retained {
		t.Fatalf("idle stream: %d bytes stored for %d retained", stored, retained)
	}
	if left := entries(t, e); len(left) != 0 {
		t.Fatalf("reclaim entries left on an idle stream: %v", left)
	}
	e.checkReads(e.rd)
}

func entries(t testing.TB, e *env) []string {
	t.Helper()
	pg, err := e.meta.Query(context.Background(), meta.Query{PK: meta.ReclaimPK})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, it := range pg.Items {
		out = append(out, strings.TrimSpace(it.SK))
	}
	return out
}
