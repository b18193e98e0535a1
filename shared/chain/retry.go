package chain

import (
	"context"
	"hash/fnv"
	"math/rand/v2"
	"time"
)

// Retry spacing of one bucket operation: exponential from 5 ms to 1 s,
// each wait drawn uniformly within ±50% of the current interval.
const (
	retryFirst = 5 * time.Millisecond
	retryMax   = time.Second
)

// retrier spaces out retries of one bucket operation until its context
// ends. Its jitter comes from a generator of its own, seeded from the
// chain's seed and the operation's name, so a seeded chain retries on the
// same schedule whatever order its goroutines run in.
type retrier struct {
	next time.Duration
	rng  *rand.Rand
}

// newRetrier returns the retrier of one operation (what names it: the
// step, the bucket and the key).
func (c *Chain) newRetrier(what string) *retrier {
	h := fnv.New64a()
	h.Write([]byte(what))
	return &retrier{next: retryFirst, rng: rand.New(rand.NewPCG(c.seed, h.Sum64()))}
}

// wait sleeps before the next attempt; false once ctx is done.
func (r *retrier) wait(ctx context.Context) bool {
	t := time.NewTimer(r.delay())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// delay is the next wait, for drivers that keep their own timers.
func (r *retrier) delay() time.Duration {
	d := r.next/2 + time.Duration(r.rng.Int64N(int64(r.next)))
	r.next = min(r.next*3/2, retryMax)
	return d
}
