package node

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// The settle runner: concurrent waiters join one run; a waiter that gives
// up stops waiting, never the run; a key that settled is not run again;
// a failed run is retried by the next waiter.
func TestSettleRunner(t *testing.T) {
	r := newSettleRunner()
	defer r.close()
	key := settleKey{star: "a", class: meta.Standard, inc: 3}
	var calls atomic.Int32
	release := make(chan struct{})
	runCtxErr := make(chan error, 1)
	fn := func(ctx context.Context, k settleKey) error {
		calls.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
		}
		runCtxErr <- ctx.Err()
		return nil
	}

	cctx, cancel := context.WithCancel(context.Background())
	gaveUp := make(chan error, 1)
	go func() { gaveUp <- r.wait(cctx, key, fn) }()
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() { errs <- r.wait(context.Background(), key, fn) })
	}
	time.Sleep(20 * time.Millisecond)
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", err)
	}
	select {
	case err := <-errs:
		t.Fatalf("a waiter returned (%v) before the run ended", err)
	default:
	}
	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	}
	if err := <-runCtxErr; err != nil {
		t.Fatalf("the run saw its context end (%v): a waiter's cancel reached it", err)
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("%d runs for one key, want 1", n)
	}
	if err := r.wait(context.Background(), key, fn); err != nil || calls.Load() != 1 {
		t.Fatalf("settled key ran again: err %v, calls %d", err, calls.Load())
	}

	// Failures are not remembered.
	bad := settleKey{star: "b", class: meta.Express, inc: 1}
	var tries atomic.Int32
	failing := func(context.Context, settleKey) error {
		if tries.Add(1) == 1 {
			return errors.New("metastore down")
		}
		return nil
	}
	if err := r.wait(context.Background(), bad, failing); err == nil {
		t.Fatal("first run's failure was not reported")
	}
	if err := r.wait(context.Background(), bad, failing); err != nil || tries.Load() != 2 {
		t.Fatalf("retry after a failure: err %v, tries %d", err, tries.Load())
	}
}

// Close cancels a run in progress and waits for it.
func TestSettleRunnerClose(t *testing.T) {
	r := newSettleRunner()
	started := make(chan struct{})
	done := make(chan struct{})
	go r.wait(context.Background(), settleKey{star: "a"}, func(ctx context.Context, _ settleKey) error {
		close(started)
		<-ctx.Done()
		close(done)
		return ctx.Err()
	})
	<-started
	r.close()
	select {
	case <-done:
	default:
		t.Fatal("close returned before the run ended")
	}
}
