package loglet

import (
	"fmt"
	"time"
)

// failing is a class that has committed nothing since one of its epochs
// halted. A recovery alone does not end it: with every bucket refusing
// (a failed CreateSession, a 403) the own fence gives up on the buckets
// and the mint needs only the metastore, so each halted epoch is replaced
// within a second or so and the next one halts in turn. The deadline
// therefore runs from the first halt, across recoveries, and only a
// commit that releases the oldest waiting flight (or flights the fence
// found committed, with nothing left to republish) ends it. So a batch
// is answered within the flight deadline (to the first halt) plus the
// recovery deadline of its flight's cut.
type failing struct {
	since   time.Time   // the spell's first halt
	late    *time.Timer // fires RecoveryDeadline after since
	lastErr error       // the last halt's cause
	// degraded is set once the deadline passed: every waiting append was
	// answered it, and new ones are refused with it until a commit.
	degraded error
}

// noteHalt records a halted epoch; the first since the last commit starts
// the recovery deadline.
func (l *Loglet) noteHalt(cause error) {
	if l.failing == nil {
		l.failing = &failing{since: time.Now(), late: time.NewTimer(l.cfg.RecoveryDeadline)}
	}
	l.failing.lastErr = cause
}

// lateC fires when the class has failed for the recovery deadline (nil
// when it is not failing or already degraded).
func (l *Loglet) lateC() <-chan time.Time {
	if l.failing == nil || l.failing.degraded != nil {
		return nil
	}
	return l.failing.late.C
}

// degradedErr is what waiting appends are answered while degraded.
func (l *Loglet) degradedErr() error {
	if l.failing == nil {
		return nil
	}
	return l.failing.degraded
}

// degrade answers every waiting append once the class has committed
// nothing for the recovery deadline since an epoch halted: ErrUnavailable,
// indefinite for the batches already sequenced (they stay, and commit
// once the store takes writes), and new appends are refused until then
// (CommitErr: /health names the class, the gauge says degraded).
func (l *Loglet) degrade() {
	f := l.failing
	err := fmt.Errorf("%w: the %s class has committed no flight for %v since an epoch halted (last: %v)",
		ErrUnavailable, l.cfg.Class, time.Since(f.since).Truncate(time.Millisecond), f.lastErr)
	f.degraded = err
	l.setOutage(err)
	l.metrics.degraded.Set(1)
	if l.rec != nil {
		l.metrics.recoveries.WithLabelValues("late").Inc()
	}
	l.log.Error("storage class degraded: no flight committed within the recovery deadline; answering waiting appends unavailable, refusing new ones until a flight commits",
		"since", f.since, "after", time.Since(f.since), "last_halt", f.lastErr)
	l.answerWaiting(err)
}

// answerWaiting answers every unreleased batch without dropping it.
func (l *Loglet) answerWaiting(err error) {
	for _, f := range l.core.Waiting() {
		for _, b := range f.batches {
			b.answer(err)
		}
	}
	l.answerPool(err)
}

// healed ends a failing spell: the oldest waiting flight committed, so
// the store takes this class's writes again and new appends are admitted.
func (l *Loglet) healed() {
	f := l.failing
	if f == nil {
		return
	}
	f.late.Stop()
	l.failing = nil
	if f.degraded != nil {
		l.setOutage(nil)
		l.metrics.degraded.Set(0)
		l.log.Info("storage class healed: a flight committed; admitting appends", "degraded_for", time.Since(f.since))
	}
}
