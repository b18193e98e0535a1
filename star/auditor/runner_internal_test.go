package auditor

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
)

func emptyStores(t *testing.T) *settle.Stores {
	t.Helper()
	objs, err := mem.New("std")
	if err != nil {
		t.Fatal(err)
	}
	ms := testsvc.SQLite(t)
	return &settle.Stores{Meta: ms, Objects: objs, SettledBucket: "std", Streams: settle.MetaStreams{Meta: ms}}
}

func value(t *testing.T, c prometheus.Collector) float64 {
	t.Helper()
	ch := make(chan prometheus.Metric, 1)
	c.Collect(ch)
	var m dto.Metric
	if err := (<-ch).Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// A job that keeps failing runs MaxAttempts times with growing delays and
// is dropped; one that fails once is retried and done; a job queued while
// it is pending is not queued twice; a job panicking fails, not the
// process.
func TestRetryDropAndDedupe(t *testing.T) {
	r, err := New(emptyStores(t), Options{Interval: time.Hour, Workers: 2, MaxAttempts: 3, RetryBase: 20 * time.Millisecond, RetryMax: 40 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ch := settle.ChainRef{Star: "s", Class: meta.Standard}
	poison, flaky, panics := auditjob.ChainSettle(ch, 1), auditjob.ChainSettle(ch, 2), auditjob.ChainSettle(ch, 3)
	var mu sync.Mutex
	runs := map[string][]time.Time{}
	r.doJob = func(_ context.Context, _ *settle.Stores, j auditjob.Job) error {
		mu.Lock()
		runs[j.Key()] = append(runs[j.Key()], time.Now())
		n := len(runs[j.Key()])
		mu.Unlock()
		switch {
		case j == poison, j == flaky && n == 1:
			return errors.New("injected")
		case j == panics:
			panic("injected")
		}
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(ctx) })
	defer func() { cancel(); wg.Wait() }()

	if n := r.enqueue([]auditjob.Job{poison, flaky, panics, poison}); n != 3 {
		t.Fatalf("queued %d of 3 distinct jobs", n)
	}
	if n := r.enqueue([]auditjob.Job{poison}); n != 0 {
		t.Fatal("a pending job was queued again")
	}
	poll.Until(t, 10*time.Second, "no job pending", func() bool { return r.Pending() == 0 })
	mu.Lock()
	defer mu.Unlock()
	if got := len(runs[poison.Key()]); got != 3 {
		t.Fatalf("poison ran %d times, want MaxAttempts 3", got)
	}
	if got := len(runs[panics.Key()]); got != 3 {
		t.Fatalf("the panicking job ran %d times, want 3", got)
	}
	if got := len(runs[flaky.Key()]); got != 2 {
		t.Fatalf("flaky ran %d times, want 2", got)
	}
	p := runs[poison.Key()]
	// RetryBase 20 ms, then doubled to RetryMax 40 ms, each -20% at worst.
	if gap1, gap2 := p[1].Sub(p[0]), p[2].Sub(p[1]); gap1 < 16*time.Millisecond || gap2 < 32*time.Millisecond {
		t.Fatalf("retry delays %v then %v: want ≥ 16 ms, then ≥ 32 ms", gap1, gap2)
	}
	for _, c := range []struct {
		kind, outcome string
		want          float64
	}{{"chain-settle", "dropped", 2}, {"chain-settle", "retried", 2 + 1 + 2}, {"chain-settle", "done", 1}} {
		if v := value(t, r.m.jobs.WithLabelValues(c.kind, c.outcome)); v != c.want {
			t.Fatalf("jobs_total{%s,%s} = %v, want %v", c.kind, c.outcome, v, c.want)
		}
	}
	if v := value(t, r.m.pending); v != 0 {
		t.Fatalf("pending gauge %v", v)
	}
	// Dropped: queued again when a plan finds it again.
	if n := r.enqueue([]auditjob.Job{poison}); n != 1 {
		t.Fatal("a dropped job cannot be queued again")
	}
}

func TestBackoff(t *testing.T) {
	r := &Runner{o: Options{RetryBase: time.Second, RetryMax: 10 * time.Second}}
	for n, want := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 30: 10 * time.Second} {
		for range 20 {
			d := r.backoff(n)
			if d < want*8/10 || d > want*12/10 {
				t.Fatalf("backoff(%d) = %v, want %v ±20%%", n, d, want)
			}
		}
	}
}

func TestNewRefuses(t *testing.T) {
	st := emptyStores(t)
	if _, err := New(st, Options{}); err == nil {
		t.Fatal("a zero interval was accepted")
	}
	if _, err := New(&settle.Stores{Meta: st.Meta}, Options{Interval: time.Second}); err == nil {
		t.Fatal("stores without objects were accepted")
	}
	bad := *st
	bad.Config.Standard = settle.ClassTimers{Linger: time.Hour, AgeCap: time.Minute}
	if _, err := New(&bad, Options{Interval: time.Second}); err == nil {
		t.Fatal("a linger above the age cap was accepted")
	}
}
