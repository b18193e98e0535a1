package settle_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
)

// gatedStreams blocks the first StreamState call until release closes, so
// a settle job can be held deterministically in the middle of its era.
type gatedStreams struct {
	inner   settle.Streams
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (g *gatedStreams) StreamState(ctx context.Context, id string) (bool, string, error) {
	first := false
	g.once.Do(func() { first = true })
	if first {
		close(g.entered)
		select {
		case <-g.release:
		case <-ctx.Done():
			return false, "", ctx.Err()
		}
	}
	return g.inner.StreamState(ctx, id)
}

// settledWrites counts the requests that write a settled object.
func settledWrites(e *env) int64 {
	c := e.objs.Counters()
	var n int64
	for _, op := range []objstore.Op{objstore.OpPut, objstore.OpMultipartCreate, objstore.OpMultipartPart, objstore.OpMultipartCopy, objstore.OpMultipartComplete} {
		n += c[settledB][op].Requests
	}
	return n
}

// A settle job run while another run of the same era is in flight (a
// duplicated SQS message, an era re-planned a minute later, a second
// in-process runner) does no work: it finds the era's in-flight claim and
// returns at once; the first run settles the era alone. The first run goes
// through settle.RunSettle (what settle.Do runs), the second through
// auditjob.Do, the entry point of both the Lambda queue handler and the
// in-process runner. Without the claim the second run settles the whole
// era while the first is held, and its settled-object writes show.
func TestSettleJobRunsOnce(t *testing.T) {
	reg := prometheus.NewRegistry()
	e := newEnv(t, envOpts{registry: reg})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, id := range []string{"a", "b", "c"} {
		e.write(id, 20, 4, 300)
	}
	e.waitAbsorbed()
	now := time.Now().Add(time.Hour)
	e.st.Now = func() time.Time { return now }
	jobs, err := plan.Plan(ctx, e.st, now)
	if err != nil {
		t.Fatal(err)
	}
	var job settle.Job
	for _, j := range jobs {
		if j.Kind == settle.KindSettle {
			job = j
			break
		}
	}
	if job.Kind == "" {
		t.Fatalf("no settle job planned: %v", jobs)
	}
	g := &gatedStreams{inner: e.st.Streams, entered: make(chan struct{}), release: make(chan struct{})}
	e.st.Streams = g

	type result struct {
		rep settle.Report
		ran bool
		err error
	}
	first := make(chan result, 1)
	go func() {
		rep, ran, err := settle.RunSettle(ctx, e.st, job)
		first <- result{rep, ran, err}
	}()
	select {
	case <-g.entered:
	case <-ctx.Done():
		t.Fatal("the first run never judged a stream")
	}
	before := settledWrites(e)
	if err := auditjob.Do(ctx, e.st, auditjob.FromSettle(job)); err != nil {
		t.Fatalf("second run: %v", err)
	}
	if d := settledWrites(e) - before; d != 0 {
		t.Fatalf("the second run of %s wrote %d settled-object requests while the first was in flight; want 0", job, d)
	}
	if v := metricValue(t, reg, "starlog_settle_jobs_skipped_total"); v != 1 {
		t.Fatalf("jobs skipped = %v, want 1", v)
	}
	close(g.release)
	r := <-first
	if r.err != nil || !r.ran {
		t.Fatalf("first run: ran %v, err %v", r.ran, r.err)
	}
	if r.rep.Objects == 0 || r.rep.Adopted != 0 {
		t.Fatalf("first run committed %d objects, %d adopted; want > 0 objects, all its own", r.rep.Objects, r.rep.Adopted)
	}
	// The claim is freed: a later run of the era takes it (and finds the
	// era settled).
	if _, ran, err := settle.RunSettle(ctx, e.st, job); err != nil || !ran {
		t.Fatalf("a run after the first: ran %v, err %v", ran, err)
	}
}

// An era planned again while its first run is in flight may end further
// on (more markers ripened meanwhile: the planner cuts eras from the same
// first slot while their markers stand, up to EraMaxSlots). That run
// must not settle the era beside the first either: the in-flight claim is
// the era's epoch and first slot, not its end. (Keyed by the end too, the
// second run settled the era, 9 settled-object writes, and the first then
// adopted them.)
func TestSettleReplannedLongerEraRunsOnce(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, id := range []string{"a", "b", "c"} {
		e.write(id, 20, 4, 300)
	}
	e.waitAbsorbed()
	e.loglet.Close()
	now := time.Now().Add(time.Hour)
	e.st.Now = func() time.Time { return now }
	jobs, err := plan.Plan(ctx, e.st, now)
	if err != nil {
		t.Fatal(err)
	}
	var job settle.Job
	for _, j := range jobs {
		if j.Kind == settle.KindSettle {
			job = j
			break
		}
	}
	if job.Kind == "" {
		t.Fatalf("no settle job planned: %v", jobs)
	}
	longer := job
	longer.End += 8 // the same era as planned a minute later, grown
	g := &gatedStreams{inner: e.st.Streams, entered: make(chan struct{}), release: make(chan struct{})}
	e.st.Streams = g
	first := make(chan error, 1)
	go func() {
		_, _, err := settle.RunSettle(ctx, e.st, job)
		first <- err
	}()
	select {
	case <-g.entered:
	case <-ctx.Done():
		t.Fatal("the first run never judged a stream")
	}
	before := settledWrites(e)
	_, ran, err := settle.RunSettle(ctx, e.st, longer)
	if err != nil {
		t.Fatal(err)
	}
	d := settledWrites(e) - before
	close(g.release)
	if err := <-first; err != nil {
		t.Fatal(err)
	}
	if ran || d != 0 {
		t.Fatalf("the re-planned %s ran beside %s (ran %v, %d settled-object writes)", longer, job, ran, d)
	}
}
