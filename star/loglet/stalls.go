package loglet

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Stall causes, as the stall counters and the logs name them. A backlog
// stall (the backlog budget is full, so the flusher cuts nothing) is
// absorb_lagging, metastore_slow or epoch_settling; an admission stall (an
// append waits for pool budget) carries the reason the flusher is not
// draining the pool: one of those, storage_slow (every slot of the window
// is uploading), or ingest_burst (the flusher is cutting as fast as it can).
const (
	CauseAbsorbLagging = "absorb_lagging"
	CauseMetastoreSlow = "metastore_slow"
	CauseEpochSettling = "epoch_settling"
	CauseStorageSlow   = "storage_slow"
	CauseIngestBurst   = "ingest_burst"
)

// blockedBy is why the flusher last stopped cutting with flights due ("":
// it was not blocked). run writes it; Reserve reads it to attribute an
// admission stall.
type blockedBy struct{ v atomic.Value }

// set records cause and reports whether it changed.
func (b *blockedBy) set(cause string) bool {
	old, _ := b.v.Swap(cause).(string)
	return old != cause
}

func (b *blockedBy) load() string {
	if s, _ := b.v.Load().(string); s != "" {
		return s
	}
	return CauseIngestBurst
}

// stallRearm merges admission stalls that follow each other closely into
// one, so a pool hovering at its budget is one stall, not thousands.
const stallRearm = time.Second

// admitStalls counts and logs admission stalls: a stall begins when an
// admission has to wait for pool budget and none is waiting, and ends when
// no admission waits any more.
type admitStalls struct {
	metrics *Metrics
	log     *slog.Logger

	mu      sync.Mutex
	waiting int
	since   time.Time // the stall's start; zero when none
	ended   time.Time // when the last stall ended
	cause   string    // the stall's cause
}

// begin notes an admission that must wait. A new stall, or a stall whose
// cause changed (a burst that became a stalled absorb), is counted and
// logged once.
func (a *admitStalls) begin(now time.Time, cause string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waiting++
	ongoing := a.waiting > 1 || !a.since.IsZero() && now.Sub(a.ended) < stallRearm
	if ongoing && cause == a.cause {
		return
	}
	if !ongoing {
		a.since = now
	}
	a.cause = cause
	a.metrics.admitStalls.WithLabelValues(cause).Inc()
	a.log.Warn("admission stall: appends wait for pool budget", "cause", cause)
}

// recause notes the flusher's new reason for not draining the pool: a
// stall in progress whose cause changed (a burst that became a stalled
// absorb) is counted and logged again under the new cause.
func (a *admitStalls) recause(cause string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiting == 0 || cause == a.cause {
		return
	}
	a.cause = cause
	a.metrics.admitStalls.WithLabelValues(cause).Inc()
	a.log.Warn("admission stall: appends wait for pool budget", "cause", cause)
}

func (a *admitStalls) end(now time.Time, stillWaiting int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waiting--
	if a.waiting > 0 || stillWaiting > 0 || a.since.IsZero() {
		return
	}
	a.ended = now
	a.log.Info("admission stall over", "took", now.Sub(a.since))
}
