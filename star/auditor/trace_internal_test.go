package auditor

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle"
)

// With a tracer, every plan, janitor pass and job is a span named
// "auditor <what>", a job's with its coordinates and its error (issue 32
// item 3: the auditor's jobs are traced).
func TestTickAndJobsAreTraced(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(context.Background())
	r, err := New(emptyStores(t), Options{Interval: time.Hour, MaxAttempts: 1, Tracer: tp})
	if err != nil {
		t.Fatal(err)
	}
	ch := settle.ChainRef{Star: "s", Class: meta.Standard}
	fails, works := auditjob.ChainSettle(ch, 7), auditjob.ChainSettle(ch, 8)
	r.doJob = func(_ context.Context, _ *settle.Stores, j auditjob.Job) error {
		if j == fails {
			return errors.New("injected")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	if err := r.Tick(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Go(func() { r.work(ctx) })
	r.enqueue([]auditjob.Job{fails, works})
	poll.Until(t, 10*time.Second, "no job pending", func() bool { return r.Pending() == 0 })

	byName := map[string][]sdktrace.ReadOnlySpan{}
	for _, s := range rec.Ended() {
		byName[s.Name()] = append(byName[s.Name()], s)
	}
	if len(byName["auditor plan"]) != 1 || len(byName["auditor janitor"]) != 1 {
		t.Fatalf("spans %v: want one auditor plan and one auditor janitor", names(rec.Ended()))
	}
	jobs := byName["auditor chain-settle"]
	if len(jobs) != 2 {
		t.Fatalf("spans %v: want two auditor chain-settle", names(rec.Ended()))
	}
	for _, s := range jobs {
		attrs := map[string]string{}
		for _, a := range s.Attributes() {
			attrs[string(a.Key)] = a.Value.Emit()
		}
		if attrs["starlog.chain"] != "s/standard" || attrs["starlog.job.kind"] != "chain-settle" {
			t.Errorf("job span attributes %v", attrs)
		}
		failed := attrs["starlog.epoch"] == "7"
		if got := s.Status().Code == codes.Error; got != failed {
			t.Errorf("epoch %s: span status %v", attrs["starlog.epoch"], s.Status())
		}
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
