package loglet

import (
	"context"
	"errors"
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
			n, err := l.abs.Pass(ctx, epoch, slots)
			last = time.Now()
			if errors.Is(err, absorb.ErrNeedMore) {
				break // more releases will come and nudge us
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				l.backlog.setMetaErrs(true)
				l.metrics.absorbErrors.Inc()
				l.log.Warn("absorb pass failed; retrying", "epoch", epoch, "from", slots[0].Slot, "err", err, "in", backoff)
				if !sleep(ctx, backoff) {
					return
				}
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
			backoff = 10 * time.Millisecond
			l.backlog.setMetaErrs(false)
			l.metrics.absorbPass.Observe(last.Sub(start).Seconds())
			bytes := l.index.Absorbed(n)
			l.backlog.release(n, bytes)
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
