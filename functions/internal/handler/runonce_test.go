package handler_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/functions/internal/handler"
	"github.com/starlog/starlog/functions/internal/testenv"
	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auditor"
)

var dyn testsvc.SharedDynamo

func TestMain(m *testing.M) {
	code := m.Run()
	dyn.Stop()
	os.Exit(code)
}

// gated holds the first bundle GET until released.
type gated struct {
	objstore.Store
	once             sync.Once
	entered, release chan struct{}
}

func (g *gated) Bucket(name string) objstore.Bucket { return gatedBucket{g.Store.Bucket(name), g} }

type gatedBucket struct {
	objstore.Bucket
	g *gated
}

func (b gatedBucket) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if strings.HasPrefix(key, "chains/") {
		first := false
		b.g.once.Do(func() { first = true })
		if first {
			close(b.g.entered)
			select {
			case <-b.g.release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}
	return b.Bucket.Get(ctx, key, off, n)
}

// The Lambda path and the in-process runner share the era claim: a settle
// job the settle function is running (held mid-way at its first bundle
// read) is planned and run again by a `star dev` runner on the same
// stores, which leaves it alone; every object is published once
// (versitygw and DynamoDB Local). The runner plans on its own, after more
// time has passed, so its era may end further on than the function's: the
// claim is the era's first slot, which both share. Without the claim the
// runner settles the era beside the function, which then adopts what it
// published.
func TestSettleRunsOnceAcrossRuntimes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts versitygw and DynamoDB Local (make tools)")
	}
	e := testenv.New(t, &dyn)
	ctx := context.Background()
	for _, id := range []string{"a", "b", "c"} {
		e.Write(id, 8, 4, 500)
	}
	e.WaitAbsorbed()
	e.Loglet.Close()
	e.WaitRipe()
	jobs, err := auditjob.Plan(ctx, e.Stores, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	var job auditjob.Job
	for _, j := range jobs {
		if j.Kind == settle.KindSettle {
			job = j
		}
	}
	if job.Kind == "" {
		t.Fatalf("no settle job planned: %v", jobs)
	}
	e.Objects.ResetCounters()

	// The settle function, held at its first bundle read.
	g := &gated{Store: e.Objects, entered: make(chan struct{}), release: make(chan struct{})}
	lst := *e.Stores
	lst.Objects = g
	lst.Metrics = settle.NewMetrics(nil)
	rt := &handler.Runtime{Stores: &lst, Logger: quiet()}
	var resp events.SQSEventResponse
	done := make(chan struct{})
	go func() {
		defer close(done)
		resp, _ = handler.Queue(rt, settle.KindSettle)(ctx, events.SQSEvent{Records: []events.SQSMessage{{MessageId: "m1", Body: string(job.Marshal())}}})
	}()
	select {
	case <-g.entered:
	case <-time.After(time.Minute):
		t.Fatal("the settle function never reached its first bundle read")
	}

	// A dev runner on the same stores plans and runs the era meanwhile.
	reg := prometheus.NewRegistry()
	dst := *e.Stores
	dst.Metrics = settle.NewMetrics(reg)
	r, err := auditor.New(&dst, auditor.Options{Interval: time.Hour, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	stopped := make(chan struct{})
	go func() { defer close(stopped); r.Run(rctx) }() //nolint:errcheck // returns nil
	poll.Until(t, time.Minute, "the runner to run a settle job", func() bool {
		return seriesValue(t, reg, "starlog_auditor_jobs_total", "settle", "done")+seriesValue(t, reg, "starlog_auditor_jobs_total", "settle", "retried") > 0
	})
	stop()
	<-stopped
	skipped := seriesValue(t, reg, "starlog_settle_jobs_skipped_total", "express", "settle")
	// A settled object is one PUT below the part size, else a completed
	// multipart upload; the loglet is closed, so no transit PUT counts.
	publishes := func(c faults.Counters) int64 {
		return c.Op(objstore.OpPut).Requests + c.Op(objstore.OpMultipartComplete).Requests
	}
	runnerObjects := publishes(e.Objects.Counters())

	close(g.release)
	<-done
	if len(resp.BatchItemFailures) != 0 {
		t.Fatalf("the settle function failed its record: %+v", resp)
	}
	c := e.Objects.Counters()
	published := publishes(c)
	t.Logf("runner: %v skipped, %d objects published while the function ran; %d published in all", skipped, runnerObjects, published)
	if skipped == 0 || runnerObjects != 0 {
		t.Fatalf("the runner settled the era the function was running (%v skipped, %d objects published)", skipped, runnerObjects)
	}
	if published == 0 {
		t.Fatal("nothing was published")
	}
	if n := e.CheckSettled(); n == 0 {
		t.Fatal("no catalog row after the settle")
	}
	e.CheckReads()
}

// seriesValue reads one series of a counter vector from reg (0 if absent).
func seriesValue(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var vals []string
			for _, lp := range m.GetLabel() {
				vals = append(vals, lp.GetValue())
			}
			if strings.Join(vals, ",") == strings.Join(labels, ",") {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}
