package lead

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
)

// The settle runner: concurrent waiters join one run; a waiter that gives
// up stops waiting, never the run; a key that settled is not run again;
// a failed run is retried by the next waiter.
// It runs in a synctest bubble, so the waiters are known to have joined
// the run before one gives up.
func TestSettleRunner(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
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
		synctest.Wait() // every waiter joined the run and blocks on it
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
	})
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

// selfWitness is star me as decideClaim's witness at now, its heartbeats
// landing without a gap for connected (0: its last beat failed, no
// testimony).
func selfWitness(me meta.LeaseHolder, now time.Time, connected time.Duration) leader.Witness {
	if connected == 0 {
		return leader.Witness{}
	}
	return leader.Witness{Star: me.Star, Reg: meta.Registration{Incarnation: me.Incarnation, State: meta.StarLive,
		ConnectedSince: now.Add(-connected).UnixMilli(), Heartbeat: now.UnixMilli()}}
}

func TestRegStar(t *testing.T) {
	me := meta.LeaseHolder{Star: "me", Incarnation: 4}
	for _, c := range []struct {
		l      meta.Lease
		leased bool
		want   string
	}{
		{meta.Lease{}, false, ""},
		{meta.Lease{LeaseHolder: me}, true, ""},
		{meta.Lease{LeaseHolder: meta.LeaseHolder{Star: "me", Incarnation: 3}}, true, "me"},
		{meta.Lease{LeaseHolder: meta.LeaseHolder{Star: "p", Incarnation: 1}}, true, "p"},
		{meta.Lease{LeaseHolder: me, Released: true}, true, ""},
		{meta.Lease{LeaseHolder: me, Released: true, To: "q"}, true, "q"},
		{meta.Lease{LeaseHolder: meta.LeaseHolder{Star: "p"}, Released: true, To: "me"}, true, ""},
	} {
		if got := regStar(c.l, c.leased, me); got != c.want {
			t.Errorf("regStar(%+v, %v) = %q, want %q", c.l, c.leased, got, c.want)
		}
	}
}

// decideForward keeps what the star knew while the metastore cannot say
// better, follows the lease to a live leader, and leaves every other case
// to the request path.
func TestDecideForward(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	const deadAfter = 30 * time.Second
	me := meta.LeaseHolder{Star: "me", Incarnation: 4}
	a := meta.LeaseHolder{Star: "a", Incarnation: 2}
	cached := &NotLeaderError{StreamID: "s", Leader: a, Address: "a:1"}
	live := meta.Registration{Incarnation: 2, State: meta.StarLive, Heartbeat: now.Add(-time.Second).UnixMilli(), Address: "a:2"}
	stale := live
	stale.Heartbeat = now.Add(-deadAfter).UnixMilli()
	view := func(l meta.Lease, reg meta.Registration, connected time.Duration) claimView {
		return claimView{me: me, lease: l, leased: true, reg: reg, registered: true, now: now, deadAfter: deadAfter, self: selfWitness(me, now, connected)}
	}
	for _, c := range []struct {
		name    string
		v       claimView
		readErr error
		want    forwardVerdict
		next    *NotLeaderError
	}{
		{name: "metastore unreadable", readErr: errors.New("down"), want: forwardKeep},
		{name: "leader live (its address moved)", v: view(meta.Lease{LeaseHolder: a}, live, time.Hour), want: forwardReplace,
			next: &NotLeaderError{StreamID: "s", Leader: a, Address: "a:2"}},
		{name: "handed to a live star", v: view(meta.Lease{LeaseHolder: a, Released: true, To: "q"}, meta.Registration{Incarnation: 9, State: meta.StarLive, Heartbeat: live.Heartbeat, Address: "q:1"}, time.Hour),
			want: forwardReplace, next: &NotLeaderError{StreamID: "s", Leader: meta.LeaseHolder{Star: "q", Incarnation: 9}, Address: "q:1"}},
		{name: "leader stale, this star just reconnected", v: view(meta.Lease{LeaseHolder: a}, stale, time.Second), want: forwardKeep},
		{name: "leader stale to a connected star", v: view(meta.Lease{LeaseHolder: a}, stale, time.Hour), want: forwardDrop},
		{name: "released to nobody", v: view(meta.Lease{LeaseHolder: a, Released: true}, meta.Registration{}, time.Hour), want: forwardDrop},
		{name: "this star holds it", v: view(meta.Lease{LeaseHolder: me}, meta.Registration{}, time.Hour), want: forwardDrop},
		{name: "unled", v: claimView{me: me, now: now, deadAfter: deadAfter}, want: forwardDrop},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, next := decideForward(cached, c.v, c.readErr)
			if got != c.want || (next == nil) != (c.next == nil) || next != nil && *next != *c.next {
				t.Fatalf("decideForward = %v %+v, want %v %+v", got, next, c.want, c.next)
			}
		})
	}
}
