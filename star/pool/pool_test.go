package pool

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/poll"
)

// fakeClock hands out strictly increasing times, one second apart.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(time.Second)
	return c.now
}

// admitAsync starts an Admit and returns a channel receiving its result.
func admitAsync[T any](ctx context.Context, p *Pool[T], v T, size int64) <-chan error {
	ch := make(chan error, 1)
	go func() { ch <- p.Admit(ctx, v, size) }()
	return ch
}

// startWaiter starts an Admit that must block, and returns once it is queued,
// so that waiters are queued in a known order.
func startWaiter[T any](t *testing.T, ctx context.Context, p *Pool[T], v T, size int64) <-chan error {
	t.Helper()
	n := p.Stats().Waiters
	ch := admitAsync(ctx, p, v, size)
	poll.Until(t, 10*time.Second, "waiter queued", func() bool { return p.Stats().Waiters == n+1 })
	return ch
}

func assertBlocked(t *testing.T, ch <-chan error) {
	t.Helper()
	select {
	case err := <-ch:
		t.Fatalf("Admit returned (%v) while it should block", err)
	case <-time.After(20 * time.Millisecond):
	}
}

func recv(t *testing.T, ch <-chan error) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(10 * time.Second):
		t.Fatalf("Admit did not return")
		return nil
	}
}

func values[T any](es []Entry[T]) []T {
	out := make([]T, len(es))
	for i, e := range es {
		out[i] = e.Value
	}
	return out
}

func equal[T comparable](a, b []T) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestAdmitCutRelease(t *testing.T) {
	clk := &fakeClock{now: time.Unix(1000, 0)}
	p := New[string](100, clk.Now)
	ctx := context.Background()
	if _, ok := p.Oldest(); ok {
		t.Fatalf("empty pool has an oldest entry")
	}
	if got := p.Cut(100); got != nil {
		t.Fatalf("cut of empty pool: %v", got)
	}
	for _, e := range []struct {
		v string
		n int64
	}{{"a", 10}, {"b", 20}, {"c", 30}, {"d", 5}} {
		if err := p.Admit(ctx, e.v, e.n); err != nil {
			t.Fatal(err)
		}
	}
	if n, b := p.Len(); n != 4 || b != 65 {
		t.Fatalf("Len %d %d", n, b)
	}
	if old, ok := p.Oldest(); !ok || !old.Equal(time.Unix(1001, 0)) {
		t.Fatalf("Oldest %v %v", old, ok)
	}
	// Up to maxBytes, in order.
	got := p.Cut(35)
	if !equal(values(got), []string{"a", "b"}) || got[1].Size != 20 || !got[1].Admitted.Equal(time.Unix(1002, 0)) {
		t.Fatalf("cut %+v", got)
	}
	if old, _ := p.Oldest(); !old.Equal(time.Unix(1003, 0)) {
		t.Fatalf("Oldest after cut %v", old)
	}
	// Cut bytes stay charged.
	if p.Charged() != 65 {
		t.Fatalf("Charged %d after cut", p.Charged())
	}
	// At least one entry, even over maxBytes.
	if got := p.Cut(1); !equal(values(got), []string{"c"}) {
		t.Fatalf("cut %+v", got)
	}
	if got := p.Cut(0); !equal(values(got), []string{"d"}) {
		t.Fatalf("cut %+v", got)
	}
	if n, b := p.Len(); n != 0 || b != 0 {
		t.Fatalf("Len %d %d after draining", n, b)
	}
	p.Release(30)
	p.Release(35)
	if p.Charged() != 0 {
		t.Fatalf("Charged %d after release", p.Charged())
	}
}

func TestAdmitBlocksAndResumesAfterRelease(t *testing.T) {
	p := New[int](10, nil)
	ctx := context.Background()
	if err := p.Admit(ctx, 1, 8); err != nil {
		t.Fatal(err)
	}
	ch := startWaiter(t, ctx, p, 2, 5)
	assertBlocked(t, ch)
	if p.Charged() != 8 {
		t.Fatalf("Charged %d while blocked", p.Charged())
	}
	p.Cut(100)
	assertBlocked(t, ch) // cutting frees nothing
	p.Release(3)         // 5 charged: 5 more fit
	if err := recv(t, ch); err != nil {
		t.Fatal(err)
	}
	if p.Charged() != 10 {
		t.Fatalf("Charged %d", p.Charged())
	}
	if got := p.Cut(100); !equal(values(got), []int{2}) {
		t.Fatalf("cut %+v", got)
	}
	if s := p.Stats(); s.BlockedTotal != 1 || s.BlockedWait <= 0 || s.Waiters != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestCancelUnblocksAndChargesNothing(t *testing.T) {
	for _, name := range []string{"cancel", "deadline"} {
		t.Run(name, func(t *testing.T) {
			p := New[int](10, nil)
			if err := p.Admit(context.Background(), 1, 10); err != nil {
				t.Fatal(err)
			}
			var (
				ctx    context.Context
				cancel context.CancelFunc
				want   error
			)
			if name == "cancel" {
				ctx, cancel = context.WithCancel(context.Background())
				want = context.Canceled
			} else {
				ctx, cancel = context.WithTimeout(context.Background(), 30*time.Millisecond)
				want = context.DeadlineExceeded
			}
			defer cancel()
			ch := startWaiter(t, ctx, p, 2, 4)
			if name == "cancel" {
				cancel()
			}
			if err := recv(t, ch); !errors.Is(err, want) {
				t.Fatalf("err %v, want %v", err, want)
			}
			s := p.Stats()
			if s.Charged != 10 || s.UncutEntries != 1 || s.Waiters != 0 {
				t.Fatalf("cancelled admit left a trace: %+v", s)
			}
			// The cancelled waiter is never admitted later.
			p.Release(10)
			if s := p.Stats(); s.Charged != 0 || s.UncutEntries != 1 {
				t.Fatalf("after release: %+v", s)
			}
		})
	}
}

func TestAdmitWithDoneContext(t *testing.T) {
	p := New[int](10, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// ctx only matters while waiting: a batch that fits is admitted.
	if err := p.Admit(ctx, 1, 10); err != nil {
		t.Fatalf("fitting admit with done ctx: %v", err)
	}
	if err := p.Admit(ctx, 2, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v", err)
	}
	if p.Charged() != 10 || p.Stats().Waiters != 0 {
		t.Fatalf("stats %+v", p.Stats())
	}
}

func TestNoStarvation(t *testing.T) {
	p := New[string](10, nil)
	ctx := context.Background()
	if err := p.Admit(ctx, "first", 8); err != nil {
		t.Fatal(err)
	}
	big := startWaiter(t, ctx, p, "big", 5)
	// These would fit now, but must queue behind the big waiter.
	small1 := startWaiter(t, ctx, p, "small1", 1)
	small2 := startWaiter(t, ctx, p, "small2", 1)
	assertBlocked(t, small1)
	assertBlocked(t, small2)
	if p.Charged() != 8 {
		t.Fatalf("small waiters overtook: charged %d", p.Charged())
	}
	p.Release(8)
	for _, ch := range []<-chan error{big, small1, small2} {
		if err := recv(t, ch); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Cut(100); !equal(values(got), []string{"first", "big", "small1", "small2"}) {
		t.Fatalf("cut order %v", values(got))
	}
}

func TestWaitersServedInOrder(t *testing.T) {
	p := New[int](10, nil)
	ctx := context.Background()
	if err := p.Admit(ctx, -1, 10); err != nil {
		t.Fatal(err)
	}
	p.Cut(100)
	sizes := []int64{3, 7, 1, 9, 2, 2, 10, 4}
	chans := make([]<-chan error, len(sizes))
	for i, n := range sizes {
		chans[i] = startWaiter(t, ctx, p, i, n)
	}
	// Release everything, then keep cutting and releasing until all are in;
	// the cut order must be the queue order.
	var got []int
	p.Release(10)
	for len(got) < len(sizes) {
		poll.Until(t, 10*time.Second, "an admission", func() bool { n, _ := p.Len(); return n > 0 })
		es := p.Cut(1) // one at a time
		got = append(got, values(es)...)
		p.Release(es[0].Size)
	}
	for i, ch := range chans {
		if err := recv(t, ch); err != nil {
			t.Fatalf("waiter %d: %v", i, err)
		}
	}
	if !equal(got, []int{0, 1, 2, 3, 4, 5, 6, 7}) {
		t.Fatalf("served order %v", got)
	}
}

func TestCancelledHeadLetsFollowersIn(t *testing.T) {
	p := New[string](10, nil)
	if err := p.Admit(context.Background(), "first", 8); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	head := startWaiter(t, ctx, p, "big", 5)
	small := startWaiter(t, context.Background(), p, "small", 2)
	assertBlocked(t, small)
	cancel()
	if err := recv(t, head); !errors.Is(err, context.Canceled) {
		t.Fatalf("head: %v", err)
	}
	if err := recv(t, small); err != nil {
		t.Fatalf("small waiter stayed blocked behind a cancelled head: %v", err)
	}
	if got := p.Cut(100); !equal(values(got), []string{"first", "small"}) || p.Charged() != 10 {
		t.Fatalf("cut %v charged %d", values(got), p.Charged())
	}
}

func TestOversizeAdmittedOnlyWhenNothingCharged(t *testing.T) {
	p := New[string](10, nil)
	ctx := context.Background()
	// Nothing charged: it goes in at once and overdraws alone.
	if err := p.Admit(ctx, "huge", 25); err != nil {
		t.Fatal(err)
	}
	if p.Charged() != 25 {
		t.Fatalf("Charged %d", p.Charged())
	}
	small := startWaiter(t, ctx, p, "small", 1)
	assertBlocked(t, small)
	p.Cut(100)
	p.Release(25)
	if err := recv(t, small); err != nil {
		t.Fatal(err)
	}
	// Something charged: the oversize batch waits until every byte is back,
	// even though the pool's uncut part is empty.
	p.Cut(100)
	huge := startWaiter(t, ctx, p, "huge2", 11)
	assertBlocked(t, huge)
	p.Release(1)
	if err := recv(t, huge); err != nil {
		t.Fatal(err)
	}
	if p.Charged() != 11 {
		t.Fatalf("Charged %d", p.Charged())
	}
}

func TestReadyCoalesces(t *testing.T) {
	p := New[int](100, nil)
	select {
	case <-p.Ready():
		t.Fatalf("signalled before any admission")
	default:
	}
	for i := range 5 {
		if err := p.Admit(context.Background(), i, 1); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-p.Ready():
	default:
		t.Fatalf("no signal after admissions")
	}
	select {
	case <-p.Ready():
		t.Fatalf("five admissions gave more than one pending signal")
	default:
	}
	// A waiter admitted by Release signals too.
	p.Cut(100)
	p.Release(5)
	if err := p.Admit(context.Background(), 9, 100); err != nil {
		t.Fatal(err)
	}
	<-p.Ready()
	ch := startWaiter(t, context.Background(), p, 10, 1)
	p.Cut(100)
	p.Release(100)
	if err := recv(t, ch); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Ready():
	default:
		t.Fatalf("no signal after a waiter was admitted")
	}
}

func TestReservation(t *testing.T) {
	p := New[string](10, nil)
	ctx := context.Background()
	r, err := p.Reserve(ctx, 6)
	if err != nil {
		t.Fatal(err)
	}
	if r.Size() != 6 || p.Charged() != 6 {
		t.Fatalf("reserve: size %d charged %d", r.Size(), p.Charged())
	}
	if n, _ := p.Len(); n != 0 {
		t.Fatalf("a reservation is not an entry yet: Len %d", n)
	}
	select {
	case <-p.Ready():
		t.Fatalf("reservation signalled Ready")
	default:
	}
	// Reservations queue fairly with admissions.
	w := startWaiter(t, ctx, p, "w", 5)
	r.Commit("r")
	r.Cancel() // no-op after Commit
	if p.Charged() != 6 {
		t.Fatalf("Cancel after Commit credited bytes: %d", p.Charged())
	}
	<-p.Ready()
	if got := p.Cut(100); !equal(values(got), []string{"r"}) || got[0].Size != 6 {
		t.Fatalf("cut %+v", got)
	}
	p.Release(6)
	if err := recv(t, w); err != nil {
		t.Fatal(err)
	}

	// A cancelled reservation credits its bytes and wakes waiters.
	r2ch := make(chan *Reservation[string], 1)
	go func() {
		r, err := p.Reserve(ctx, 5)
		if err != nil {
			t.Error(err)
		}
		r2ch <- r
	}()
	var r2 *Reservation[string]
	select {
	case r2 = <-r2ch:
	case <-time.After(10 * time.Second):
		t.Fatal("Reserve blocked with room")
	}
	w2 := startWaiter(t, ctx, p, "w2", 1)
	r2.Cancel()
	if err := recv(t, w2); err != nil {
		t.Fatal(err)
	}
	if p.Charged() != 6 {
		t.Fatalf("Charged %d", p.Charged())
	}
	r2.Cancel() // idempotent
	if p.Charged() != 6 {
		t.Fatalf("double cancel credited twice: %d", p.Charged())
	}
	defer func() {
		if recover() == nil {
			t.Fatalf("Commit after Cancel did not panic")
		}
	}()
	r2.Commit("late")
}

func TestReserveCancelledWhileWaiting(t *testing.T) {
	p := New[int](4, nil)
	if err := p.Admit(context.Background(), 1, 4); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	r, err := p.Reserve(ctx, 1)
	if !errors.Is(err, context.DeadlineExceeded) || r != nil {
		t.Fatalf("Reserve: %v %v", r, err)
	}
	if p.Charged() != 4 {
		t.Fatalf("Charged %d", p.Charged())
	}
}

func TestMisuse(t *testing.T) {
	p := New[int](10, nil)
	if err := p.Admit(context.Background(), 1, -1); !errors.Is(err, ErrNegativeSize) {
		t.Fatalf("negative admit: %v", err)
	}
	if _, err := p.Reserve(context.Background(), -1); !errors.Is(err, ErrNegativeSize) {
		t.Fatalf("negative reserve: %v", err)
	}
	mustPanic(t, "over-release", func() { p.Release(1) })
	mustPanic(t, "negative release", func() { p.Release(-1) })
	mustPanic(t, "zero budget", func() { New[int](0, nil) })
}

func mustPanic(t *testing.T, what string, f func()) {
	t.Helper()
	defer func() {
		if recover() == nil {
			t.Fatalf("%s did not panic", what)
		}
	}()
	f()
}

func TestOrderAcrossCompaction(t *testing.T) {
	p := New[int](1<<20, nil)
	next, want := 0, 0
	for round := range 200 {
		for range 7 {
			if err := p.Admit(context.Background(), next, 1); err != nil {
				t.Fatal(err)
			}
			next++
		}
		for _, e := range p.Cut(int64(round%9 + 1)) {
			if e.Value != want {
				t.Fatalf("got %d, want %d", e.Value, want)
			}
			want++
			p.Release(e.Size)
		}
		if n, b := p.Len(); n != next-want || b != int64(n) {
			t.Fatalf("Len %d %d, want %d", n, b, next-want)
		}
	}
}

// TestBudgetUnderConcurrency runs producers and a flusher at once and checks
// that the budget holds, nothing is lost or duplicated, and each producer's
// entries come out in its own order.
func TestBudgetUnderConcurrency(t *testing.T) {
	const (
		budget    = 1000
		producers = 16
		each      = 300
	)
	p := New[[2]int](budget, nil)
	ctx := context.Background()
	var violations atomic.Int64
	check := func() {
		if c := p.Charged(); c > budget {
			violations.Add(1)
		}
	}

	var wg sync.WaitGroup
	for id := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(id), 1))
			for i := range each {
				size := rng.Int64N(budget/3) + 1
				ctx := ctx
				var cancel context.CancelFunc = func() {}
				if rng.IntN(10) == 0 {
					// Some admissions give up; they must leave no trace.
					ctx, cancel = context.WithTimeout(ctx, time.Duration(rng.IntN(200))*time.Microsecond)
				}
				err := p.Admit(ctx, [2]int{id, i}, size)
				cancel()
				if err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("admit: %v", err)
				}
				check()
			}
		}()
	}
	producersDone := make(chan struct{})
	go func() { wg.Wait(); close(producersDone) }()

	last := make([]int, producers)
	for i := range last {
		last[i] = -1
	}
	var inFlight []int64
	for {
		select {
		case <-p.Ready():
		case <-producersDone:
		case <-time.After(time.Millisecond):
		}
		for _, e := range p.Cut(budget / 4) {
			id, i := e.Value[0], e.Value[1]
			if i <= last[id] {
				t.Fatalf("producer %d: entry %d after %d", id, i, last[id])
			}
			last[id] = i
			inFlight = append(inFlight, e.Size)
		}
		check()
		// Release the older half of what is in flight, like acks in order.
		half := (len(inFlight) + 1) / 2
		for _, n := range inFlight[:half] {
			p.Release(n)
		}
		inFlight = inFlight[half:]
		select {
		case <-producersDone:
			if n, _ := p.Len(); n == 0 {
				for _, n := range inFlight {
					p.Release(n)
				}
				if violations.Load() != 0 {
					t.Fatalf("charged exceeded the budget %d times", violations.Load())
				}
				if s := p.Stats(); s.Charged != 0 || s.Waiters != 0 {
					t.Fatalf("final stats %+v", s)
				}
				if s := p.Stats(); s.BlockedTotal == 0 {
					t.Fatalf("test never exercised blocking: %+v", s)
				}
				return
			}
		default:
		}
	}
}

// BenchmarkAdmitCutRelease measures pool throughput with 16 producers and
// one flusher that cuts and releases.
func BenchmarkAdmitCutRelease(b *testing.B) {
	const (
		producers = 16
		size      = 1 << 10
		budget    = 1 << 20
		flight    = 64 << 10
	)
	p := New[int](budget, nil)
	ctx := context.Background()
	n := b.N // read once: producers must not touch b after the body returns
	var next atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	b.ResetTimer()
	start := time.Now()
	for range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(n) {
				if err := p.Admit(ctx, 0, size); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	go func() { wg.Wait(); close(done) }()
	cut := 0
	for cut < n {
		select {
		case <-p.Ready():
		case <-done:
		}
		for {
			es := p.Cut(flight)
			if len(es) == 0 {
				break
			}
			cut += len(es)
			p.Release(int64(len(es)) * size)
		}
	}
	<-done
	b.StopTimer()
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "entries/s")
}
