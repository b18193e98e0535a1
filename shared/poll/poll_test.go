package poll

import (
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// The condition is met on the fourth check; in a synctest bubble the
// backoff (1, 2, 4 ms) costs no wall time and its fake time is exact.
func TestUntilBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var n atomic.Int32
		start := time.Now()
		Until(t, time.Second, "fourth check", func() bool { return n.Add(1) == 4 })
		if got := time.Since(start); got != 7*time.Millisecond {
			t.Fatalf("waited %v, want 7ms (1+2+4)", got)
		}
	})
}

// Wait gives up at the bound, not a pause later, and returns the last error.
func TestWaitStopsAtTheBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		boom := errors.New("boom")
		start := time.Now()
		err := Wait(100*time.Millisecond, func() error { return boom })
		if !errors.Is(err, boom) {
			t.Fatalf("err %v, want boom", err)
		}
		if got := time.Since(start); got < 100*time.Millisecond || got > 101*time.Millisecond {
			t.Fatalf("gave up after %v, want 100ms", got)
		}
	})
}
