// Package poll is the tests' one way to wait for a condition that another
// goroutine brings about: check, back off, check again, fail the test at a
// bound. It works unchanged inside a testing/synctest bubble, where the
// backoff costs no wall time.
//
// A fixed time.Sleep in a test either waits too long or not long enough;
// waiting on the condition itself does neither.
package poll

import (
	"testing"
	"time"
)

// First and longest pause between checks: short enough that a condition
// met at once costs about a millisecond, long enough that a slow one does
// not spin a core.
const (
	minPause = time.Millisecond
	maxPause = 50 * time.Millisecond
)

// Until calls ok until it reports true, and fails tb (naming what) if that
// has not happened within the bound.
func Until(tb testing.TB, within time.Duration, what string, ok func() bool) {
	tb.Helper()
	UntilErr(tb, within, what, func() error {
		if ok() {
			return nil
		}
		return errNotYet
	})
}

// UntilErr calls check until it returns nil, and fails tb with the last
// error it returned if that has not happened within the bound.
func UntilErr(tb testing.TB, within time.Duration, what string, check func() error) {
	tb.Helper()
	if err := Wait(within, check); err != nil {
		tb.Fatalf("%s: not within %v: %v", what, within, err)
	}
}

// Wait calls check until it returns nil or the bound passes, and returns
// the last error (nil on success). Use it where a test needs to decide
// what a timeout means; Until and UntilErr fail the test.
func Wait(within time.Duration, check func() error) error {
	deadline := time.Now().Add(within)
	pause := minPause
	for {
		err := check()
		if err == nil {
			return nil
		}
		if !time.Now().Before(deadline) {
			return err
		}
		time.Sleep(min(pause, time.Until(deadline)+time.Microsecond))
		pause = min(2*pause, maxPause)
	}
}

type notYet struct{}

func (notYet) Error() string { return "condition not met" }

var errNotYet error = notYet{}
