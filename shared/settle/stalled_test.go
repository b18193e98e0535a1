package settle_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
)

// stallAfterRows holds a settle run just after it read a stream's rows
// (the backward query of the stream's ref partition), once: a settler
// that reads the rows and stalls.
type stallAfterRows struct {
	meta.Store
	pk      string
	once    sync.Once
	stalled chan struct{}
	resume  chan struct{}
}

func (s *stallAfterRows) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	pg, err := s.Store.Query(ctx, q)
	if q.PK == s.pk && q.Backward && q.From == meta.RefPrefix {
		s.once.Do(func() { close(s.stalled); <-s.resume })
	}
	return pg, err
}

// tiles reports whether a stream's rows chain without gap or overlap.
func tiles(t testing.TB, ms meta.Store, id string) error {
	t.Helper()
	rows := rowsOf(t, ms, id)
	for i := 1; i < len(rows); i++ {
		if p, r := rows[i-1].ref, rows[i].ref; r.FirstSeq != p.EndSeq {
			return fmt.Errorf("stream %s: row [%d,%d) follows row [%d,%d) (rev %d): rows overlap or leave a gap",
				id, r.FirstSeq, r.EndSeq, p.FirstSeq, p.EndSeq, p.Settled.Revision)
		}
	}
	return nil
}

// Issue 26, defect 3: run A reads stream x's rows and stalls; run B
// decides not to extend x's tail T (its recent revisions fill the output
// cap) and commits a new object N at T's end; the reclaim pass sees N
// follow T and deletes T's decision entry; A resumes, decides afresh (its
// clock is past the recent revisions' window, so T is extendable), and
// extends T. Its CAS on T's row must fail: otherwise x has overlapping
// catalog rows and retention never trims T again.
//
// A's decision to extend is stale: the revision it published is named by
// no row and never will be, and the reclaim deletes it.
func TestStalledSettlerNeverExtendsAFollowedTail(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	now := time.Now().Add(time.Hour)
	// T: three rounds of about 12 KiB, settled a minute apart, each
	// extending the tail: revision 2 of 36 KiB with 36 KiB of recent
	// revisions, so the next decision (cap 48 KiB) is not to extend.
	for i := range 3 {
		e.write("x", 1, 24, 500)
		e.waitAbsorbed()
		if _, err := settleAll(ctx, e.st, now.Add(time.Duration(i)*time.Minute), false); err != nil {
			t.Fatal(err)
		}
	}
	rows := rowsOf(t, e.meta, "x")
	if len(rows) != 1 || rows[0].ref.Settled == nil || rows[0].ref.Settled.Revision != 2 {
		t.Fatalf("setup: want one catalog row at revision 2, got %+v", rows)
	}
	tail := rows[0].ref
	e.write("x", 1, 24, 500)
	e.waitAbsorbed()
	tB := now.Add(3 * time.Minute)
	jobs, err := plan.Plan(ctx, e.st, tB)
	if err != nil {
		t.Fatal(err)
	}
	var job settle.Job
	for _, j := range jobs {
		if j.Kind == settle.KindSettle {
			job = j
		}
	}
	if job.Kind != settle.KindSettle {
		t.Fatalf("setup: no settle job planned at %v: %v", tB, jobs)
	}

	// Run A: reads x's rows, stalls; when it resumes its clock is an hour
	// on.
	var aNow atomic.Int64
	aNow.Store(tB.UnixMilli())
	stall := &stallAfterRows{Store: e.meta, pk: meta.RefKey("x", 0).PK, stalled: make(chan struct{}), resume: make(chan struct{})}
	cfgA := e.st.Config
	cfgA.ScratchDir = t.TempDir()
	stA := &settle.Stores{Meta: stall, Objects: e.objs, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: stall},
		Config: cfgA, Logger: quietLog(), Now: func() time.Time { return time.UnixMilli(aNow.Load()) }}
	aDone := make(chan error, 1)
	go func() {
		_, err := settle.Settle(ctx, stA, job)
		aDone <- err
	}()
	select {
	case <-stall.stalled:
	case err := <-aDone:
		t.Fatalf("run A ended (%v) before it read x's rows", err)
	}

	// Run B at tB: does not extend T, commits N at T's end.
	e.st.Now = func() time.Time { return tB }
	if _, err := settle.Settle(ctx, e.st, job); err != nil {
		t.Fatalf("run B: %v", err)
	}
	rows = rowsOf(t, e.meta, "x")
	if len(rows) != 2 || rows[0].ref.Settled.Revision != tail.Settled.Revision || rows[1].ref.Settled == nil || rows[1].ref.FirstSeq != tail.EndSeq {
		t.Fatalf("setup: run B should leave T at revision %d and commit N at %d; rows %+v", tail.Settled.Revision, tail.EndSeq, rows)
	}
	// The reclaim pass: N follows T, so T's decision is done with.
	if rep := janitor(t, e, tB); rep.Resolved != 1 {
		t.Fatalf("setup: the reclaim pass resolved %d decisions, want T's: %+v", rep.Resolved, rep)
	}

	// A resumes, an hour later by its clock.
	aNow.Store(tB.Add(time.Hour).UnixMilli())
	close(stall.resume)
	if err := <-aDone; err != nil {
		t.Fatalf("run A: %v", err)
	}
	if err := tiles(t, e.meta, "x"); err != nil {
		t.Fatal(err)
	}
	e.checkReads(e.rd)

	// The janitor's passes: retention trims T (N follows it), and the
	// reclaim deletes what A published and T's object, a grace apart.
	late := tB.Add(2 * time.Hour)
	if rep := janitor(t, e, late); rep.Orphans != 1 {
		t.Errorf("the reclaim deleted %d orphaned revisions, want A's: %+v", rep.Orphans, rep)
	}
	rep, err := reclaim.TrimStream(ctx, e.st, "x", basin, late)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Rows != 1 {
		t.Fatalf("retention past every record trimmed %d rows, want T: %+v; rows %+v", rep.Rows, rep, rowsOf(t, e.meta, "x"))
	}
	grace := e.st.Config.WithDefaults().ReadGrace
	janitor(t, e, late)
	janitor(t, e, late.Add(grace+time.Second))
	if err := onlyCurrentRevisions(t, e.meta, e.objs, e.ids()); err != nil {
		t.Fatal(err)
	}
	if left := entries(t, e); len(left) != 0 {
		t.Fatalf("reclaim entries left: %v", left)
	}
	if err := tiles(t, e.meta, "x"); err != nil {
		t.Fatal(err)
	}
}
