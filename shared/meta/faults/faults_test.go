package faults

import (
	"context"
	"errors"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/metatest"
	"github.com/starlog/starlog/shared/meta/sqlite"
)

func newInner(t *testing.T) meta.Store {
	t.Helper()
	s, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// With no faults set the wrapper is transparent: it passes the suite.
func TestConformanceTransparent(t *testing.T) {
	metatest.Run(t, func(t *testing.T) meta.Store { return New(newInner(t), 1) })
}

func TestCounts(t *testing.T) {
	ctx := context.Background()
	s := New(newInner(t), 1)
	if _, err := s.Put(ctx, "p", "a", []byte("1"), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Put(ctx, "p", "a", []byte("1"), meta.IfAbsent()); !errors.Is(err, meta.ErrConditionFailed) {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "p", "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.BatchPut(ctx, []meta.Item{{PK: "p", SK: "b"}, {PK: "p", SK: "c"}, {PK: "p", SK: "d"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query(ctx, meta.Query{PK: "p"}); err != nil {
		t.Fatal(err)
	}
	if err := s.BatchDelete(ctx, []meta.Key{{PK: "p", SK: "b"}, {PK: "p", SK: "c"}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(ctx, "p", "a", meta.Always()); err != nil {
		t.Fatal(err)
	}
	want := Counts{Get: 1, Put: 2, Delete: 1, Query: 1, Batch: 2, BatchItems: 5, QueryItems: 4}
	if got := s.Counts(); got != want {
		t.Fatalf("counts %+v, want %+v", got, want)
	}
	if w := s.Counts().Writes(); w != 8 {
		t.Fatalf("Writes() = %d, want 8", w)
	}
	s.ResetCounts()
	if got := s.Counts(); got != (Counts{}) {
		t.Fatalf("after reset: %+v", got)
	}
}

func TestFailNextBefore(t *testing.T) {
	ctx := context.Background()
	s := New(newInner(t), 1)
	boom := errors.New("boom")
	s.FailNext(2, boom, Before, OpPut)
	for i := range 2 {
		if _, err := s.Put(ctx, "p", "a", []byte("x"), meta.Always()); !errors.Is(err, boom) {
			t.Fatalf("put %d = %v, want the injected error", i, err)
		}
		// Other kinds are untouched, and nothing was written.
		if _, err := s.Get(ctx, "p", "a"); !errors.Is(err, meta.ErrNotFound) {
			t.Fatalf("get after a failed put = %v, want ErrNotFound", err)
		}
	}
	if v, err := s.Put(ctx, "p", "a", []byte("x"), meta.Always()); err != nil || v != 1 {
		t.Fatalf("third put = %d, %v", v, err)
	}
	if c := s.Counts(); c.Injected != 2 || c.Put != 1 || c.Get != 2 {
		t.Fatalf("counts %+v", c)
	}
}

func TestFailNextAfterApplies(t *testing.T) {
	ctx := context.Background()
	s := New(newInner(t), 1)
	lost := errors.New("reply lost")
	s.FailNext(1, lost, After)
	if _, err := s.Put(ctx, "p", "a", []byte("x"), meta.IfAbsent()); !errors.Is(err, lost) {
		t.Fatalf("put = %v, want the injected error", err)
	}
	it, err := s.Get(ctx, "p", "a")
	if err != nil || string(it.Val) != "x" {
		t.Fatalf("the write should have applied: %+v, %v", it, err)
	}
	// Its retry now meets its own write.
	if _, err := s.Put(ctx, "p", "a", []byte("x"), meta.IfAbsent()); !errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("retry = %v", err)
	}
	if c := s.Counts(); c.Injected != 1 || c.Put != 2 {
		t.Fatalf("counts %+v", c)
	}
}

func TestInjectionsQueueInOrder(t *testing.T) {
	ctx := context.Background()
	s := New(newInner(t), 1)
	e1, e2 := errors.New("first"), errors.New("second")
	s.FailNext(1, e1, Before, OpGet)
	s.FailNext(1, e2, Before)
	if _, err := s.Put(ctx, "p", "a", nil, meta.Always()); !errors.Is(err, e2) {
		t.Fatalf("put = %v, want the any-kind injection", err)
	}
	if _, err := s.Get(ctx, "p", "a"); !errors.Is(err, e1) {
		t.Fatalf("get = %v, want the get injection", err)
	}
	if _, err := s.Get(ctx, "p", "a"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("get = %v, want the store's answer", err)
	}
}

func TestUnavailable(t *testing.T) {
	ctx := context.Background()
	s := New(newInner(t), 1)
	s.SetUnavailable(true)
	if _, err := s.Put(ctx, "p", "a", nil, meta.Always()); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("put = %v", err)
	}
	if _, err := s.Query(ctx, meta.Query{PK: "p"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("query = %v", err)
	}
	if err := s.BatchPut(ctx, []meta.Item{{PK: "p", SK: "a"}}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("batch = %v", err)
	}
	s.SetUnavailable(false)
	if _, err := s.Get(ctx, "p", "a"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("get after recovery = %v", err)
	}
	if c := s.Counts(); c.Injected != 3 || c.Put != 0 || c.Get != 1 {
		t.Fatalf("counts %+v", c)
	}
}

func TestSlowAndContext(t *testing.T) {
	ctx := context.Background()
	s := New(newInner(t), 1)
	s.SetLatency(Constant(80*time.Millisecond), OpGet)
	start := time.Now()
	if _, err := s.Put(ctx, "p", "a", nil, meta.Always()); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 70*time.Millisecond {
		t.Fatalf("put took %v; latency was set for gets only", d)
	}
	start = time.Now()
	if _, err := s.Get(ctx, "p", "a"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 80*time.Millisecond {
		t.Fatalf("get took %v, want at least 80ms", d)
	}
	// A caller that gives up first never reaches the store.
	cctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := s.Get(cctx, "p", "a"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("get with a short deadline = %v", err)
	}
	if c := s.Counts(); c.Get != 1 {
		t.Fatalf("counts %+v: the abandoned get reached the store", c)
	}
	s.SetLatency(Latency{})
	start = time.Now()
	if _, err := s.Get(ctx, "p", "a"); err != nil || time.Since(start) > 70*time.Millisecond {
		t.Fatalf("get after clearing latency: %v in %v", err, time.Since(start))
	}
}

func TestLogNormalQuantiles(t *testing.T) {
	l := LogNormal(10*time.Millisecond, 100*time.Millisecond)
	r := rand.New(rand.NewPCG(7, 8))
	const n = 40000
	ds := make([]time.Duration, n)
	for i := range ds {
		ds[i] = l.sample(r)
	}
	slices.Sort(ds)
	p50, p99 := ds[n/2], ds[n*99/100]
	if p50 < 9500*time.Microsecond || p50 > 10500*time.Microsecond {
		t.Errorf("p50 %v, want about 10ms", p50)
	}
	if p99 < 85*time.Millisecond || p99 > 115*time.Millisecond {
		t.Errorf("p99 %v, want about 100ms", p99)
	}
	if c := Constant(5 * time.Millisecond).sample(r); c != 5*time.Millisecond {
		t.Errorf("constant sample %v", c)
	}
	if d := LogNormal(10*time.Millisecond, time.Millisecond).sample(r); d != 10*time.Millisecond {
		t.Errorf("p99 below p50 should be constant at p50, got %v", d)
	}
	if d := (Latency{}).sample(r); d != 0 {
		t.Errorf("zero latency sampled %v", d)
	}
}

func TestSeedIsDeterministic(t *testing.T) {
	draws := func(seed uint64) []time.Duration {
		s := New(nil, seed)
		l := LogNormal(time.Millisecond, 50*time.Millisecond)
		out := make([]time.Duration, 50)
		for i := range out {
			out[i] = l.sample(s.rng)
		}
		return out
	}
	if a, b := draws(42), draws(42); !slices.Equal(a, b) {
		t.Fatal("same seed, different latency draws")
	}
	if a, b := draws(42), draws(43); slices.Equal(a, b) {
		t.Fatal("different seeds, same latency draws")
	}
}
