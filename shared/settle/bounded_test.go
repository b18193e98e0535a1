package settle_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
)

// boundedEra writes streams one after another (so each rides its own
// flights), absorbs them, and returns the era's single settle job.
func boundedEra(t *testing.T, cfg settle.Config) (*env, settle.Job) {
	t.Helper()
	e := newEnv(t, envOpts{settle: cfg})
	for _, id := range []string{"s1", "s2", "s3", "s4", "s5", "s6"} {
		e.write(id, 6, 4, 400)
		e.waitAbsorbed()
	}
	now := time.Now().Add(time.Hour)
	e.st.Now = func() time.Time { return now }
	jobs, err := plan.Plan(context.Background(), e.st, now)
	if err != nil {
		t.Fatal(err)
	}
	var sj []settle.Job
	for _, j := range jobs {
		if j.Kind == settle.KindSettle {
			sj = append(sj, j)
		}
	}
	if len(sj) != 1 {
		t.Fatalf("planned %d settle jobs, want one era: %v", len(sj), sj)
	}
	return e, sj[0]
}

// A settle era whose bundles pass the job's scratch limit settles in
// rounds of streams, each holding at most the limit on scratch (and its
// footer entries within the footer limit), and ends settled. Without the
// limit one fetch cache holds the whole era (PeakScratch = BundleBytes,
// above the limit).
func TestSettleEraInBoundedRounds(t *testing.T) {
	ctx := context.Background()
	// The whole era in one cache, for its size.
	e0, j0 := boundedEra(t, defaultSettleConfig(t))
	whole, err := settle.Settle(ctx, e0.st, j0)
	if err != nil {
		t.Fatal(err)
	}
	if whole.Rounds != 1 || whole.PeakScratch != whole.BundleBytes || whole.Settled != 6 {
		t.Fatalf("unbounded era: %+v; want 1 round holding all %d bundle bytes, 6 streams settled", whole, whole.BundleBytes)
	}
	t.Logf("unbounded: %d bundles, %d bytes, footer %d B", whole.Bundles, whole.BundleBytes, whole.PeakFooter)

	cfg := defaultSettleConfig(t)
	cfg.ScratchBytes = whole.BundleBytes / 2
	cfg.FooterBytes = max(whole.PeakFooter/2, 1)
	e, j := boundedEra(t, cfg)
	rep, err := settle.Settle(ctx, e.st, j)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("bounded (scratch %d, footer %d): %d rounds, peak scratch %d, peak footer %d, %d bundles", cfg.ScratchBytes, cfg.FooterBytes, rep.Rounds, rep.PeakScratch, rep.PeakFooter, rep.Bundles)
	if rep.Rounds < 2 || rep.PeakScratch > cfg.ScratchBytes || rep.PeakFooter > cfg.FooterBytes {
		t.Fatalf("bounded era: %d rounds, peak scratch %d (limit %d), peak footer %d (limit %d); want ≥ 2 rounds within both",
			rep.Rounds, rep.PeakScratch, cfg.ScratchBytes, rep.PeakFooter, cfg.FooterBytes)
	}
	if rep.Settled != 6 || rep.Failed != 0 || rep.Resolved != rep.Markers {
		t.Fatalf("bounded era: %+v; want all 6 streams settled and every marker resolved", rep)
	}

	// A stream whose own window passes the limit fails with the typed
	// error (here every stream: a limit of one byte), writing nothing.
	cfg.ScratchBytes = 1
	e2, j2 := boundedEra(t, cfg)
	rep, err = settle.Settle(ctx, e2.st, j2)
	if !errors.Is(err, settle.ErrScratchBudget) || rep.Failed != 6 || rep.Objects != 0 {
		t.Fatalf("scratch limit 1 byte: %+v, err %v; want every stream failed with ErrScratchBudget, nothing written", rep, err)
	}
}
