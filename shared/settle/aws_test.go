package settle_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
	"github.com/starlog/starlog/star/loglet"
)

// The production adapters end to end, on a small subset: the s3 backend
// against versitygw (ranged UploadPartCopy from the express buckets,
// uploaded parts, create-once CompleteMultipartUpload, DeleteObjects) and
// the dynamo backend against DynamoDB Local (conditional puts and deletes,
// backward queries). Two settlers race on every job, so one loses the
// create-once Complete (S3's 412) and adopts the standing object.
func TestAWSBackends(t *testing.T) {
	if testing.Short() {
		t.Skip("starts versitygw and DynamoDB Local")
	}
	cfg := defaultSettleConfig(t)
	cfg.OutputCap = 16 << 20
	e := newEnv(t, envOpts{aws: true, settle: cfg, tweak: func(c *loglet.Config) {
		c.TargetFlight, c.FlushInterval, c.PoolBudget = 8<<20, 2*time.Second, 32<<20
	}})
	ctx := context.Background()
	var wg sync.WaitGroup
	wg.Go(func() { e.write("big", 7, 1, 900<<10) })
	wg.Go(func() { e.write("small", 6, 3, 300) })
	wg.Go(func() { e.write("tiny", 2, 1, 10) })
	wg.Wait()
	e.waitAbsorbed()
	e.checkReads(e.rd)
	tr := captureTransit(t, e)

	now := time.Now().Add(time.Hour)
	e.st.Now = func() time.Time { return now }
	jobs, err := plan.Plan(ctx, e.st, now)
	if err != nil {
		t.Fatal(err)
	}
	// The first Complete's reply is lost, as a slow one retried into a
	// 412 was in a clean-clone run: its settler adopts what it published.
	e.objs.FailNext(settledB, 1, faults.LostReply, objstore.OpMultipartComplete)
	var total settle.Report
	for _, j := range jobs {
		if j.Kind != settle.KindSettle {
			continue
		}
		var reps [2]settle.Report
		var errs [2]error
		var race sync.WaitGroup
		for i := range 2 {
			race.Go(func() { reps[i], errs[i] = settle.Settle(ctx, e.st, j) })
		}
		race.Wait()
		for i := range 2 {
			if errs[i] != nil {
				t.Fatalf("settle %s: %v", j, errs[i])
			}
			total.Objects += reps[i].Objects
			total.Adopted += reps[i].Adopted
			total.Copied += reps[i].Copied
		}
	}
	t.Logf("settled on S3 and DynamoDB: %+v", total)
	// The bytes were copied server-side whichever settler the race credits:
	// a settler whose Complete went through unheard adopts its own object
	// (Report.Copied counts only an object its settler saw published), so
	// the copy is judged at the store.
	c := e.objs.Counters()
	if cp := c.Op(objstore.OpMultipartCopy); cp.Bytes < 5<<20 || c.Op(objstore.OpMultipartComplete).Requests == 0 {
		t.Fatalf("nothing copied server-side: UploadPartCopy %+v, CompleteMultipartUpload %+v; settlers %+v", cp, c.Op(objstore.OpMultipartComplete), total)
	}
	if total.Adopted == 0 {
		t.Fatalf("no settler adopted an object (a lost Complete reply and a lost race each adopt one): %+v", total)
	}
	checkSettled(t, e, tr)
	e.checkReads(e.rd)
	ch := settle.ChainRef{Star: e.cfg.Star, Class: e.cfg.Class}
	for _, at := range []time.Time{now, now.Add(6 * time.Minute)} {
		if _, err := reclaim.TrimCheck(ctx, e.st, ch, at); err != nil {
			t.Fatal(err)
		}
	}
	rec := epochRecord(t, e)
	if rec.Trimmed != rec.Checkpoint || rec.Checkpoint == 0 {
		t.Fatalf("trimmed %d of %d slots", rec.Trimmed, rec.Checkpoint)
	}
	e.checkReads(e.rd)
}

// The reclaim on the production adapters: a stream settled over several
// rounds extends its tail (DynamoDB Local holds the decision entries and
// catalog rows), and the janitor's passes delete every superseded
// revision from versitygw, leaving exactly the objects the rows name;
// then a retention trim of all but its greatest row, and a deleted
// stream's reclamation, delete the rest.
func TestAWSReclaim(t *testing.T) {
	if testing.Short() {
		t.Skip("starts versitygw and DynamoDB Local")
	}
	cfg := defaultSettleConfig(t)
	e := newEnv(t, envOpts{aws: true, settle: cfg})
	ctx := context.Background()
	now := time.Now().Add(time.Hour)
	var deleted int
	for range 6 {
		e.write("slow", 1, 4, 500)
		e.waitAbsorbed()
		now = now.Add(cfg.ReadGrace + time.Second)
		if _, err := settleAll(ctx, e.st, now, true); err != nil {
			t.Fatal(err)
		}
		deleted += janitor(t, e, now).Deleted
	}
	for range 2 {
		now = now.Add(cfg.ReadGrace + time.Second)
		deleted += janitor(t, e, now).Deleted
	}
	if deleted == 0 {
		t.Fatal("no superseded revision deleted")
	}
	if err := onlyCurrentRevisions(t, e.meta, e.objs, e.ids()); err != nil {
		t.Fatal(err)
	}
	if left := entries(t, e); len(left) != 0 {
		t.Fatalf("reclaim entries left: %v", left)
	}
	stored, retained, objects := storage(t, e, "slow")
	t.Logf("%d superseded revisions deleted; %d B stored in %d objects for %d B retained", deleted, stored, objects, retained)
	e.checkReads(e.rd)

	e.write("slow", 30, 4, 1000) // past the output cap: more objects
	e.write("gone", 1, 4, 500)
	e.waitAbsorbed()
	now = now.Add(time.Hour)
	if _, err := settleAll(ctx, e.st, now, true); err != nil {
		t.Fatal(err)
	}
	cat := catalog(t, e.meta, "slow")
	if len(cat) < 2 {
		for _, r := range rowsOf(t, e.meta, "slow") {
			t.Logf("row [%d,%d) settled %+v span %v", r.ref.FirstSeq, r.ref.EndSeq, r.ref.Settled, r.ref.Span != nil)
		}
		t.Fatalf("%d catalog rows, want 2 or more", len(cat))
	}
	n, _, now, err := trimAll(ctx, e.st, "slow", time.Now().Add(time.Hour), now)
	if err != nil || n != len(cat)-1 {
		t.Fatalf("retention trim: %d rows, %v; want %d rows", n, err, len(cat)-1)
	}
	if err := reclaim.ForgetStream(ctx, e.st, basin, "gone", "gone", now); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		at := now.Add(time.Duration(i) * (cfg.ReadGrace + time.Second))
		janitor(t, e, at)
		if _, err := reclaim.ReclaimStreams(ctx, e.st, at); err != nil {
			t.Fatal(err)
		}
	}
	// The cut is past every record: retention forgets them all, and the
	// greatest row stays, marked trimmed, for the tail a read from 0
	// starts at.
	last := cat[len(cat)-1]
	if left := catalog(t, e.meta, "slow"); len(left) != 1 || left[0].FirstSeq != last.FirstSeq || !left[0].Settled.Trimmed {
		t.Fatalf("catalog after the trim: %+v, want only the greatest row [%d,%d), marked trimmed", left, last.FirstSeq, last.EndSeq)
	}
	if start, err := e.readFrom(ctx, e.rd, "slow", frontier(t, e.meta, "slow")); err != nil || start != last.EndSeq {
		t.Fatalf("read from 0 after the trim: start %d, %v; want the tail %d", start, err, last.EndSeq)
	}
	if err := onlyCurrentRevisions(t, e.meta, e.objs, e.ids()); err != nil {
		t.Fatal(err)
	}
	if stored, _, objects := storage(t, e, "gone"); objects != 0 || len(rowsOf(t, e.meta, "gone")) != 0 {
		t.Fatalf("deleted stream: %d objects (%d B), %d rows left", objects, stored, len(rowsOf(t, e.meta, "gone")))
	}
}
