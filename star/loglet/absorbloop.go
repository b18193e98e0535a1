package loglet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/absorb"
)

// absorbLoop is the paced consumer of the flight index: each release
// nudges it (coalescing); a pass takes everything released since the last
// one (up to AbsorbMaxSlots), and passes are spaced by nextPass: at least
// AbsorbInterval apart, and, under a write budget (Pacer), far enough apart
// that the star's metastore writes stay within it, unless the backlog is
// under pressure. It returns backlog tokens as the checkpoint advances.
func (l *Loglet) absorbLoop(ctx context.Context) {
	defer close(l.absorbDone)
	var last time.Time
	backoff := 10 * time.Millisecond
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		if l.index.Len() == 0 {
			l.metrics.backlogAge.Set(0)
			l.metrics.backlogFlights.Set(0)
			select {
			case <-ctx.Done():
				return
			case <-l.absorbNudge:
			}
			continue
		}
		if t, ok := l.index.oldestStart(); ok {
			l.metrics.backlogAge.Set(time.Since(time.Unix(0, t)).Seconds())
		}
		l.metrics.backlogFlights.Set(float64(l.index.Len()))
		pressured := l.pressured()
		at := nextPass(last, l.cfg.Pacer.Due(), l.cfg.AbsorbInterval, pressured)
		if wait := time.Until(at); wait > 0 {
			// Wait for the pass's time; a release meanwhile (a nudge) may
			// put the backlog under pressure, so look again then.
			timer.Reset(wait)
			select {
			case <-ctx.Done():
				return
			case <-l.absorbNudge:
				timer.Stop()
				continue
			case <-timer.C:
			}
		}
		epoch, slots := l.index.Pending(l.cfg.AbsorbMaxSlots)
		if len(slots) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-l.absorbNudge:
			}
			continue
		}
		if pressured && l.cfg.Pacer.Due().After(time.Now()) {
			l.metrics.absorbPressured.Inc()
		}
		start := time.Now()
		l.backlog.passRunning(start)
		n, err := l.abs.Pass(ctx, epoch, slots)
		l.backlog.passRunning(time.Time{})
		last = start
		if errors.Is(err, absorb.ErrNeedMore) {
			// More releases will come and nudge us.
			select {
			case <-ctx.Done():
				return
			case <-l.absorbNudge:
			}
			continue
		}
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			l.backlog.setMetaSlow(true)
			l.metrics.absorbErrors.Inc()
			l.log.Warn("absorb pass failed; retrying", "epoch", epoch, "from", slots[0].Slot, "err", err, "in", backoff)
			if !sleep(ctx, backoff) {
				return
			}
			backoff = min(2*backoff, 2*time.Second)
			continue
		}
		backoff = 10 * time.Millisecond
		// A pass is a handful of metastore round trips (the floor reads
		// of new streams, the refs in parallel waves, the marker, the
		// checkpoint): a slow one names the metastore as the cause.
		end := time.Now()
		took := end.Sub(start)
		streams := streamsIn(slots[:n])
		writes := passWrites(streams)
		l.cfg.Pacer.Charge(end, writes)
		l.metrics.absorbWrites.Add(float64(writes))
		waves := 3 + (streams+l.abs.Concurrency-1)/max(l.abs.Concurrency, 1)
		l.backlog.setMetaSlow(took/time.Duration(waves) > l.cfg.SlowMetaOp)
		l.metrics.absorbPass.Observe(took.Seconds())
		l.backlog.release(n, l.index.Absorbed(n))
	}
}

// pressured reports a backlog that must not wait for the write budget:
// half its flights or bytes are taken, a whole pass of slots is pending,
// or a close is waiting for the absorb to reach the head.
func (l *Loglet) pressured() bool {
	if l.absorbUrgent.Load() > 0 {
		return true
	}
	return l.backlog.flightsNow() >= max(l.cfg.BacklogFlights/2, 1) || l.backlog.bytesNow() >= l.cfg.BacklogBytes/2 ||
		l.index.Len() >= l.cfg.AbsorbMaxSlots
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

func streamsIn(slots []absorb.Slot) int {
	seen := map[string]bool{}
	for _, s := range slots {
		for _, x := range s.Extents {
			seen[x.StreamID] = true
		}
	}
	return len(seen)
}

// Urge makes the absorb run its passes at the minimum interval, whatever
// the write budget, until done is called: a handoff waiting for a
// stream's extents to be absorbed does not wait out the pacing.
func (l *Loglet) Urge() (done func()) {
	l.absorbUrgent.Add(1)
	select {
	case l.absorbNudge <- struct{}{}:
	default:
	}
	var once sync.Once
	return func() { once.Do(func() { l.absorbUrgent.Add(-1) }) }
}

// AwaitAbsorbed waits until the absorb has taken every released flight
// (the flight index is empty), nudging it: a graceful close and a
// decommission absorb to the head after the star stopped admitting, so
// whoever settles the chain later has no walk left to do.
func (l *Loglet) AwaitAbsorbed(ctx context.Context) error {
	l.absorbUrgent.Add(1)
	defer l.absorbUrgent.Add(-1)
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for l.index.Len() > 0 {
		select {
		case l.absorbNudge <- struct{}{}:
		default:
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("loglet %s/%s: absorb to the head: %d flights left: %w", l.cfg.Star, l.cfg.Class, l.index.Len(), ctx.Err())
		case <-l.absorbDone:
			return fmt.Errorf("loglet %s/%s: absorb to the head: %w", l.cfg.Star, l.cfg.Class, ErrClosed)
		case <-t.C:
		}
	}
	return nil
}
