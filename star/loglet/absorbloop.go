package loglet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/absorb"
)

// absorbLoop is the wake-on-work consumer of the flight index: each release
// nudges it (coalescing), it runs passes until the index is drained, no
// more often than AbsorbInterval, and returns backlog tokens as the
// checkpoint advances.
func (l *Loglet) absorbLoop(ctx context.Context) {
	defer close(l.absorbDone)
	var last time.Time
	backoff := 10 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.absorbNudge:
		}
		if wait := l.cfg.AbsorbInterval - time.Since(last); wait > 0 {
			if !sleep(ctx, wait) {
				return
			}
		}
		for {
			if t, ok := l.index.oldestStart(); ok {
				l.metrics.backlogAge.Set(time.Since(time.Unix(0, t)).Seconds())
			} else {
				l.metrics.backlogAge.Set(0)
			}
			l.metrics.backlogFlights.Set(float64(l.index.Len()))
			epoch, slots := l.index.Pending(l.cfg.AbsorbMaxSlots)
			if len(slots) == 0 {
				break
			}
			start := time.Now()
			l.backlog.passRunning(start)
			n, err := l.abs.Pass(ctx, epoch, slots)
			l.backlog.passRunning(time.Time{})
			last = time.Now()
			if errors.Is(err, absorb.ErrNeedMore) {
				break // more releases will come and nudge us
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
			took := last.Sub(start)
			waves := 3 + (streamsIn(slots[:n])+l.abs.Concurrency-1)/max(l.abs.Concurrency, 1)
			l.backlog.setMetaSlow(took/time.Duration(waves) > l.cfg.SlowMetaOp)
			l.metrics.absorbPass.Observe(took.Seconds())
			l.backlog.release(n, l.index.Absorbed(n))
		}
	}
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

// AwaitAbsorbed waits until the absorb has taken every released flight
// (the flight index is empty), nudging it: a graceful close and a
// decommission absorb to the head after the star stopped admitting, so
// whoever settles the chain later has no walk left to do.
func (l *Loglet) AwaitAbsorbed(ctx context.Context) error {
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
