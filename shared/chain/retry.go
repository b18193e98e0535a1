package chain

import (
	"context"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// retrier spaces out retries of one bucket operation: exponential from
// 5 ms to 1 s with jitter, until the context ends.
type retrier struct{ b *backoff.ExponentialBackOff }

func newRetrier() *retrier {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval = 5 * time.Millisecond
	b.MaxInterval = time.Second
	b.Reset()
	return &retrier{b: b}
}

// wait sleeps before the next attempt; false once ctx is done.
func (r *retrier) wait(ctx context.Context) bool {
	t := time.NewTimer(r.b.NextBackOff())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
