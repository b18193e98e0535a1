package faults_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/objstore/objstoretest"
)

func newWrapped(t *testing.T, opts ...faults.Option) *faults.Store {
	t.Helper()
	inner, err := mem.New("bucket-a", "bucket-b")
	if err != nil {
		t.Fatal(err)
	}
	return faults.Wrap(inner, opts...)
}

func TestConformanceTransparent(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) (objstore.Store, []string) {
		return newWrapped(t), []string{"bucket-a", "bucket-b"}
	})
}

func quantile(xs []time.Duration, q float64) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

func TestLatencyDistributions(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	const n = 20000
	draw := func(l faults.Latency) []time.Duration {
		xs := make([]time.Duration, n)
		for i := range xs {
			xs[i] = l.Sample(r)
		}
		return xs
	}
	within := func(name string, got, want time.Duration, tol float64) {
		t.Helper()
		if d := float64(got-want) / float64(want); d > tol || d < -tol {
			t.Errorf("%s = %v, want %v ±%.0f%%", name, got, want, tol*100)
		}
	}

	ln := draw(faults.LogNormal(10*time.Millisecond, 100*time.Millisecond))
	within("lognormal p50", quantile(ln, 0.50), 10*time.Millisecond, 0.05)
	within("lognormal p99", quantile(ln, 0.99), 100*time.Millisecond, 0.15)
	for _, x := range ln {
		if x <= 0 {
			t.Fatalf("lognormal drew %v", x)
		}
	}

	u := draw(faults.Uniform(5*time.Millisecond, 15*time.Millisecond))
	for _, x := range u {
		if x < 5*time.Millisecond || x > 15*time.Millisecond {
			t.Fatalf("uniform drew %v outside [5ms, 15ms]", x)
		}
	}
	within("uniform p50", quantile(u, 0.5), 10*time.Millisecond, 0.05)
	within("uniform p10", quantile(u, 0.1), 6*time.Millisecond, 0.05)

	for _, x := range draw(faults.Constant(3 * time.Millisecond))[:10] {
		if x != 3*time.Millisecond {
			t.Fatalf("constant drew %v", x)
		}
	}
	if x := faults.LogNormal(10*time.Millisecond, 10*time.Millisecond).Sample(r); x != 10*time.Millisecond {
		t.Fatalf("lognormal with p99 = p50 drew %v", x)
	}
}

// failurePattern writes n keys and returns which calls failed.
func failurePattern(t *testing.T, seed uint64, n int) []bool {
	s := newWrapped(t, faults.WithSeed(seed))
	s.FailRate("bucket-a", 0.3, faults.Definite, objstore.OpPut)
	b := s.Bucket("bucket-a")
	out := make([]bool, n)
	for i := range out {
		_, err := b.PutIfAbsent(context.Background(), fmt.Sprintf("k/%d", i), []byte("x"))
		if err != nil && !errors.Is(err, faults.ErrInjected) {
			t.Fatal(err)
		}
		out[i] = err != nil
	}
	return out
}

func TestSeededRateIsDeterministic(t *testing.T) {
	a, b, c := failurePattern(t, 7, 400), failurePattern(t, 7, 400), failurePattern(t, 8, 400)
	if !slices.Equal(a, b) {
		t.Fatal("same seed, different failure pattern")
	}
	if slices.Equal(a, c) {
		t.Fatal("different seeds, same failure pattern")
	}
	fails := 0
	for _, f := range a {
		if f {
			fails++
		}
	}
	if fails < 90 || fails > 150 { // 0.3 × 400 = 120, ±3σ ≈ 28
		t.Fatalf("%d of 400 calls failed at rate 0.3", fails)
	}
}

func TestFailNextDefinite(t *testing.T) {
	ctx := context.Background()
	s := newWrapped(t)
	b := s.Bucket("bucket-a")
	s.FailNext("bucket-a", 2, faults.Definite, objstore.OpPut)
	for i := range 2 {
		_, err := b.PutIfAbsent(ctx, "k", []byte("x"))
		if !errors.Is(err, faults.ErrInjected) || objstore.IsIndefinite(err) {
			t.Fatalf("put %d: %v, want a definite injected error", i, err)
		}
		if _, err := b.Head(ctx, "k"); !errors.Is(err, objstore.ErrNotFound) {
			t.Fatalf("a definite failure wrote the object: %v", err)
		}
	}
	if _, err := b.PutIfAbsent(ctx, "k", []byte("x")); err != nil {
		t.Fatalf("third put: %v", err)
	}
	// Injected failures are requests and errors that carried no bytes.
	if got, want := s.Counters()["bucket-a"][objstore.OpPut], (faults.Count{Requests: 3, Errors: 2, Bytes: 1}); got != want {
		t.Fatalf("put counters = %+v, want %+v", got, want)
	}
	// Other buckets and other kinds were never affected.
	s.FailNext("bucket-a", 1, faults.Definite, objstore.OpPut)
	if _, err := s.Bucket("bucket-b").PutIfAbsent(ctx, "k", []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Get(ctx, "k", 0, -1); err != nil {
		t.Fatal(err)
	}
	s.ClearFaults("bucket-a")
	if _, err := b.PutIfAbsent(ctx, "k2", []byte("x")); err != nil {
		t.Fatalf("after ClearFaults: %v", err)
	}
}

func TestLostReplyAndNotDone(t *testing.T) {
	ctx := context.Background()
	s := newWrapped(t)
	b := s.Bucket("bucket-a")

	s.FailNext("bucket-a", 1, faults.LostReply, objstore.OpPut)
	_, err := b.PutIfAbsent(ctx, "lost", []byte("landed"))
	if !objstore.IsIndefinite(err) {
		t.Fatalf("lost reply: %v, want indefinite", err)
	}
	if got, err := b.Get(ctx, "lost", 0, -1); err != nil || string(got) != "landed" {
		t.Fatalf("the write whose reply was lost did not land: %q, %v", got, err)
	}
	// Losing the reply of a refused write must not leak the refusal.
	s.FailNext("bucket-a", 1, faults.LostReply, objstore.OpPut)
	_, err = b.PutIfAbsent(ctx, "lost", []byte("again"))
	if !objstore.IsIndefinite(err) || errors.Is(err, objstore.ErrExists) {
		t.Fatalf("lost reply of a refused write: %v, want indefinite and not ErrExists", err)
	}

	s.FailNext("bucket-a", 1, faults.NotDone)
	_, err = b.PutIfAbsent(ctx, "notdone", []byte("x"))
	if !objstore.IsIndefinite(err) {
		t.Fatalf("not done: %v, want indefinite", err)
	}
	if _, err := b.Head(ctx, "notdone"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("a not-done write landed: %v", err)
	}

	// Multipart Complete: done, reply lost.
	mp, err := b.NewMultipart(ctx, "mp")
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.AddPart(ctx, []byte("part")); err != nil {
		t.Fatal(err)
	}
	s.FailNext("bucket-a", 1, faults.LostReply, objstore.OpMultipartComplete)
	if _, err := mp.Complete(ctx); !objstore.IsIndefinite(err) {
		t.Fatalf("complete with lost reply: %v", err)
	}
	if got, err := b.Get(ctx, "mp", 0, -1); err != nil || string(got) != "part" {
		t.Fatalf("completed object: %q, %v", got, err)
	}
}

func TestDownAndSlow(t *testing.T) {
	ctx := context.Background()
	s := newWrapped(t)
	a, other := s.Bucket("bucket-a"), s.Bucket("bucket-b")

	s.SetDown("bucket-a", faults.Down{Delay: 20 * time.Millisecond})
	start := time.Now()
	_, err := a.PutIfAbsent(ctx, "k", []byte("x"))
	if !objstore.IsIndefinite(err) || !errors.Is(err, faults.ErrDown) {
		t.Fatalf("put on a down bucket: %v", err)
	}
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("down bucket failed after %v, want ≥ 20ms", d)
	}
	if _, err := a.Get(ctx, "k", 0, -1); !errors.Is(err, faults.ErrDown) {
		t.Fatalf("get on a down bucket: %v", err)
	}
	if _, err := other.PutIfAbsent(ctx, "k", []byte("x")); err != nil {
		t.Fatalf("the other bucket: %v", err)
	}

	s.SetDown("bucket-a", faults.Down{Hang: true})
	hctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	_, err = a.PutIfAbsent(hctx, "k", []byte("x"))
	if !objstore.IsIndefinite(err) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("put on a hung bucket: %v", err)
	}

	s.SetUp("bucket-a")
	if _, err := a.PutIfAbsent(ctx, "k", []byte("x")); err != nil {
		t.Fatalf("after SetUp: %v", err)
	}

	s.SetSlow("bucket-a", 30*time.Millisecond)
	start = time.Now()
	if _, err := a.Head(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 30*time.Millisecond {
		t.Fatalf("slow bucket answered in %v", d)
	}
	// A caller that gives up on a slow write cannot know its outcome.
	sctx, cancel2 := context.WithTimeout(ctx, 5*time.Millisecond)
	defer cancel2()
	if _, err := a.PutIfAbsent(sctx, "k2", []byte("x")); !objstore.IsIndefinite(err) {
		t.Fatalf("timed-out slow put: %v, want indefinite", err)
	}
	s.SetSlow("bucket-a", 0)
	s.SetLatency("bucket-a", faults.Constant(25*time.Millisecond))
	start = time.Now()
	if _, err := a.Head(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 25*time.Millisecond {
		t.Fatalf("latency 25ms, answered in %v", d)
	}
}

func TestCounters(t *testing.T) {
	ctx := context.Background()
	s := newWrapped(t)
	a, bb := s.Bucket("bucket-a"), s.Bucket("bucket-b")
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		_, err := a.PutIfAbsent(ctx, fmt.Sprintf("k/%d", i), make([]byte, 100))
		must(err)
	}
	_, err := a.PutIfAbsent(ctx, "k/0", make([]byte, 100)) // ErrExists: counted as an error
	if !errors.Is(err, objstore.ErrExists) {
		t.Fatal(err)
	}
	_, err = a.Get(ctx, "k/0", 10, 30)
	must(err)
	_, err = a.Head(ctx, "k/1")
	must(err)
	src := make([]byte, objstore.MinPartSize)
	_, err = bb.PutIfAbsent(ctx, "src", src)
	must(err)
	mp, err := a.NewMultipart(ctx, "mp")
	must(err)
	must(mp.AddCopyPart(ctx, "bucket-b", "src", 0, objstore.MinPartSize))
	must(mp.AddPart(ctx, make([]byte, 7)))
	_, err = mp.Complete(ctx)
	must(err)
	for range a.List(ctx, "k/") {
	}
	keys := make([]string, 2500)
	for i := range keys {
		keys[i] = fmt.Sprintf("gone/%d", i)
	}
	must(a.DeleteMany(ctx, keys))
	must(a.Delete(ctx, "k/2"))

	c := s.Counters()
	ca := c["bucket-a"]
	want := map[objstore.Op]faults.Count{
		objstore.OpPut:               {Requests: 4, Errors: 1, Bytes: 400},
		objstore.OpGet:               {Requests: 1, Bytes: 30},
		objstore.OpHead:              {Requests: 1},
		objstore.OpMultipartCreate:   {Requests: 1},
		objstore.OpMultipartCopy:     {Requests: 1, Bytes: objstore.MinPartSize},
		objstore.OpMultipartPart:     {Requests: 1, Bytes: 7},
		objstore.OpMultipartComplete: {Requests: 1},
		objstore.OpList:              {Requests: 1},
		objstore.OpDeleteMany:        {Requests: 3},
		objstore.OpDelete:            {Requests: 1},
	}
	for op := range objstore.NumOps {
		if ca[op] != want[op] {
			t.Errorf("bucket-a %s = %+v, want %+v", op, ca[op], want[op])
		}
	}
	if got := c["bucket-b"][objstore.OpPut]; got != (faults.Count{Requests: 1, Bytes: objstore.MinPartSize}) {
		t.Errorf("bucket-b put = %+v", got)
	}
	if got := c.Op(objstore.OpPut).Requests; got != 5 {
		t.Errorf("puts over all buckets = %d, want 5", got)
	}
	if got, want := c.Total().Requests, ca.Total().Requests+1; got != want {
		t.Errorf("total requests = %d, want %d", got, want)
	}

	_, err = a.Get(ctx, "k/0", 0, -1)
	must(err)
	d := s.Counters().Sub(c)
	if got := d["bucket-a"][objstore.OpGet]; got != (faults.Count{Requests: 1, Bytes: 100}) {
		t.Errorf("delta get = %+v", got)
	}
	if got := d.Total().Requests; got != 1 {
		t.Errorf("delta total = %d, want 1", got)
	}
	s.ResetCounters()
	if got := s.Counters().Total(); got != (faults.Count{}) {
		t.Errorf("after reset: %+v", got)
	}
}
