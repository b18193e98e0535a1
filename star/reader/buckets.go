package reader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/objstore"
)

// Defaults of the extent reads' bucket handling (Config).
const (
	DefaultBucketAttemptTimeout = 2 * time.Second
	DefaultHedgeAfter           = 250 * time.Millisecond
	DefaultSuspectFor           = 10 * time.Second
)

// bucketHealth remembers which buckets of a set just failed a read or were
// outpaced by a hedge, so later reads ask them last for a while: a
// black-holed zone then costs one read a hedge delay, not every read a
// timeout. It only orders attempts; every bucket stays eligible.
type bucketHealth struct {
	mu      sync.Mutex
	suspect map[string]time.Time // bucket → until when it is asked last
}

func newBucketHealth() *bucketHealth { return &bucketHealth{suspect: map[string]time.Time{}} }

// order returns set with the buckets suspect at now moved to the back,
// each part in set order.
func (h *bucketHealth) order(set []string, now time.Time) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]string, 0, len(set))
	var late []string
	for _, b := range set {
		if until, ok := h.suspect[b]; ok {
			if now.Before(until) {
				late = append(late, b)
				continue
			}
			delete(h.suspect, b)
		}
		out = append(out, b)
	}
	return append(out, late...)
}

func (h *bucketHealth) fail(bucket string, until time.Time) {
	h.mu.Lock()
	h.suspect[bucket] = until
	h.mu.Unlock()
}

func (h *bucketHealth) ok(bucket string) {
	h.mu.Lock()
	delete(h.suspect, bucket)
	h.mu.Unlock()
}

// attempt is one bucket's answer to a hedged read.
type attempt[V any] struct {
	i   int
	val V
	err error
}

// running is an attempt not yet answered.
type running struct {
	start    time.Time
	cancel   context.CancelCauseFunc
	timedOut bool
}

// errAttemptTimeout is the cause with which an attempt that ran for
// BucketAttemptTimeout is cancelled (an attempt cancelled for any other
// reason was outpaced, or the read ended).
var errAttemptTimeout = errors.New("reader: no answer within the bucket attempt timeout")

// hedged reads one object from the first bucket of set that serves it.
// Buckets are asked in healthy-first order: the next one at once when one
// fails, and also when the last one asked has not answered within
// HedgeAfter (a hedge; at most one attempt per bucket). An attempt that
// has run for BucketAttemptTimeout is given up while another bucket is
// still asked or left to ask; the last hope is bounded by ctx alone. read
// returns the decoded value; an error wrapping objstore.ErrNotFound (a
// straggling copy) or errDamaged (a bad copy) leaves the bucket's health
// alone, any other error, a timeout, or being outpaced by a bucket asked
// after it makes it suspect. hedged returns the value, or (nil error) every
// attempt's error in set order.
func hedged[V any](ctx context.Context, r *Reader, set []string, read func(ctx context.Context, bucket string) (V, error)) (V, []error, error) {
	var zero V
	order := r.health.order(set, time.Now())
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // stops the attempts still running
	results := make(chan attempt[V], len(order))
	pending := map[int]*running{}
	next := 0
	var lastLaunch time.Time
	launch := func() {
		i := next
		next++
		if i > 0 {
			r.m.fallthroughs.Inc()
		}
		actx, acancel := context.WithCancelCause(ctx)
		lastLaunch = time.Now()
		pending[i] = &running{start: lastLaunch, cancel: acancel}
		go func() {
			v, err := read(actx, order[i])
			results <- attempt[V]{i: i, val: v, err: err}
		}()
	}
	suspect := func(i int) { r.health.fail(order[i], time.Now().Add(r.cfg.SuspectFor)) }
	errs := make([]error, len(order))
	launch()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for len(pending) > 0 {
		// Wake for the next hedge, or the first attempt to give up on.
		alternatives := next < len(order) || len(pending) > 1
		wake := time.Time{}
		if next < len(order) {
			wake = lastLaunch.Add(r.cfg.HedgeAfter)
		}
		for _, a := range pending {
			if at := a.start.Add(r.cfg.BucketAttemptTimeout); alternatives && !a.timedOut && (wake.IsZero() || at.Before(wake)) {
				wake = at
			}
		}
		var wakeC <-chan time.Time
		if !wake.IsZero() {
			timer.Reset(time.Until(wake)) // Go 1.23 timers: no stale tick survives Reset
			wakeC = timer.C
		}
		select {
		case <-ctx.Done():
			return zero, nil, ctx.Err()
		case <-wakeC:
			now := time.Now()
			for _, a := range pending {
				if alternatives && !a.timedOut && !now.Before(a.start.Add(r.cfg.BucketAttemptTimeout)) {
					a.timedOut = true
					a.cancel(errAttemptTimeout)
				}
			}
			if next < len(order) && !now.Before(lastLaunch.Add(r.cfg.HedgeAfter)) {
				r.m.hedges.Inc()
				launch()
			}
		case a := <-results:
			run := pending[a.i]
			delete(pending, a.i)
			run.cancel(nil)
			if a.err == nil {
				r.health.ok(order[a.i])
				for j := range pending {
					if j < a.i { // asked first, answered later: outpaced
						suspect(j)
					}
				}
				return a.val, nil, nil
			}
			if ctx.Err() != nil {
				return zero, nil, ctx.Err()
			}
			if run.timedOut {
				a.err = fmt.Errorf("%w (%v): %w", errAttemptTimeout, r.cfg.BucketAttemptTimeout, a.err)
			}
			errs[a.i] = a.err
			if run.timedOut || !errors.Is(a.err, objstore.ErrNotFound) && !isDamage(a.err) {
				suspect(a.i)
			}
			if next < len(order) {
				launch()
			}
		}
	}
	out := make([]error, 0, len(set))
	for _, b := range set {
		for i, o := range order {
			if o == b && errs[i] != nil {
				out = append(out, fmt.Errorf("bucket %s: %w", b, errs[i]))
			}
		}
	}
	return zero, out, nil
}

// errDamaged marks an attempt whose bytes arrived but did not decode: the
// copy is damaged, the bucket is not unhealthy.
type errDamaged struct{ err error }

func (e errDamaged) Error() string { return e.err.Error() }
func (e errDamaged) Unwrap() error { return e.err }

func isDamage(err error) bool {
	var d errDamaged
	return errors.As(err, &d)
}
