package loglet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/chain"
)

// Bounds of a loglet that opens beside the star (Config.OpenWait): each
// settle-and-mint attempt, and the backoff between attempts.
const (
	openAttempt    = 5 * time.Minute
	openRetryFirst = time.Second
	openRetryMax   = 30 * time.Second
)

// openWithin settles and mints like Open, but waits at most OpenWait (and
// ctx) for it: a class whose buckets refuse every request cannot settle
// the epochs an earlier incarnation left (the fence waits for a bucket
// that answers), and it must not keep the star from starting and serving
// its other class. Past the wait the loglet is returned opening: degraded
// (new appends are refused at once, CommitErr names the cause, the gauge
// is 1) with no epoch and no loops, while an opener goroutine retries
// until it mints, then starts the loops and admits appends, or until
// Close. A stream the star opens on it meanwhile is safe: the star's open
// gate settles every earlier holder's chain (this one's too) before it
// reads the stream's rows, and nothing is sequenced before the mint.
func (l *Loglet) openWithin(ctx context.Context, settle func(context.Context) error) error {
	runCtx, stop := context.WithCancel(context.Background())
	l.stop = stop
	first := make(chan error, 1)
	go func() {
		actx, cancel := context.WithTimeout(runCtx, openAttempt)
		defer cancel()
		first <- l.settleAndMint(actx, settle)
	}()
	wait := time.NewTimer(l.cfg.OpenWait)
	defer wait.Stop()
	var err error
	select {
	case err = <-first:
		if err == nil {
			l.start(runCtx)
			return nil
		}
		if errors.Is(err, chain.ErrDeposed) { // a later incarnation runs: no retry helps
			stop()
			return err
		}
		first = nil // reported: the opener waits before its next attempt
	case <-wait.C:
		err = fmt.Errorf("not settled and minted within %v", l.cfg.OpenWait)
	case <-ctx.Done():
		stop()
		<-first
		return ctx.Err()
	}
	l.setOpening(err)
	go l.opener(runCtx, settle, first)
	return nil
}

// setOpening degrades the class while its chain is not open.
func (l *Loglet) setOpening(cause error) {
	l.setOutage(fmt.Errorf("%w: the %s class's chain is not open: the epochs an earlier incarnation left cannot be settled or the next epoch minted (%v)", ErrUnavailable, l.cfg.Class, cause))
	l.metrics.degraded.Set(1)
}

// opener finishes opening beside the star: it takes the outcome of the
// attempt in flight (pending; nil when it already reported), then retries
// with backoff until an attempt succeeds or ctx ends (Close). Only then do
// the loops run, so everything run owns is the opener's until start.
func (l *Loglet) opener(ctx context.Context, settle func(context.Context) error, pending <-chan error) {
	l.log.Error("chain not open: the star serves without this class until it opens; appends to it are refused", "class", l.cfg.Class, "wait", l.cfg.OpenWait)
	backoff := openRetryFirst
	since := time.Now()
	for {
		var err error
		if pending != nil {
			err, pending = <-pending, nil
		} else {
			if !sleep(ctx, backoff) {
				l.closeUnopened()
				return
			}
			backoff = min(2*backoff, openRetryMax)
			actx, cancel := context.WithTimeout(ctx, openAttempt)
			err = l.settleAndMint(actx, settle)
			cancel()
		}
		switch {
		case err == nil:
			l.setOutage(nil)
			l.metrics.degraded.Set(0)
			l.log.Info("chain open: admitting appends", "class", l.cfg.Class, "after", time.Since(since))
			l.start(ctx)
			return
		case ctx.Err() != nil: // closed while opening
			l.closeUnopened()
			return
		case errors.Is(err, chain.ErrDeposed):
			// A later incarnation of this star owns the chain: this
			// process is a zombie (the heartbeat finds out too).
			l.mu.Lock()
			l.closed = fmt.Errorf("%w (%v)", ErrDeposed, err)
			l.signalRefusedLocked()
			l.mu.Unlock()
			l.metrics.degraded.Set(0)
			l.closeUnopened()
			return
		}
		l.setOpening(err)
		l.log.Warn("chain still not open; retrying", "class", l.cfg.Class, "err", err, "in", backoff)
	}
}

// closeUnopened ends a loglet whose loops never ran, for Close.
func (l *Loglet) closeUnopened() {
	close(l.done)
	close(l.absorbDone)
}
