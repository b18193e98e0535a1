package loglet

import (
	"sync"
	"time"
)

// backlog is the budget of cut-but-unabsorbed flights, in flights and
// bytes (--s3-chain-backlog-flights, --s3-chain-backlog-mib). Tokens are
// taken when a flight is cut (a claimed slot must have one, so the chain
// never runs further ahead of its absorb than the budget) and returned when
// the absorb checkpoints past it; at most the window of them are not yet
// released.
type backlog struct {
	mu         sync.Mutex
	maxFlights int
	maxBytes   int64
	flights    int
	bytes      int64
	metaSlow   bool // the last absorb pass failed or crawled on the metastore
	recovering bool
	passStart  time.Time     // when the running absorb pass began (zero: none)
	slowPass   time.Duration // a pass running longer blames the metastore
	ch         chan struct{}
}

func newBacklog(maxFlights int, maxBytes int64, slowPass time.Duration) *backlog {
	return &backlog{maxFlights: maxFlights, maxBytes: maxBytes, slowPass: slowPass, ch: make(chan struct{}, 1)}
}

// tryAcquire takes one flight token if the budget allows.
func (b *backlog) tryAcquire() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.flights >= b.maxFlights || b.bytes >= b.maxBytes {
		return false
	}
	b.flights++
	return true
}

func (b *backlog) addBytes(n int64) {
	b.mu.Lock()
	b.bytes += n
	b.mu.Unlock()
}

func (b *backlog) release(flights int, bytes int64) {
	b.mu.Lock()
	b.flights -= flights
	b.bytes -= bytes
	b.mu.Unlock()
	select {
	case b.ch <- struct{}{}:
	default:
	}
}

func (b *backlog) freed() <-chan struct{} { return b.ch }

func (b *backlog) setMetaSlow(v bool) {
	b.mu.Lock()
	b.metaSlow = v
	b.mu.Unlock()
}

func (b *backlog) setRecovering(v bool) {
	b.mu.Lock()
	b.recovering = v
	b.mu.Unlock()
}

// cause diagnoses why the budget is exhausted.
func (b *backlog) cause() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.recovering:
		return CauseEpochSettling
	case b.metaSlow, !b.passStart.IsZero() && time.Since(b.passStart) > b.slowPass:
		return CauseMetastoreSlow
	default:
		return CauseAbsorbLagging
	}
}

func (b *backlog) flightsNow() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.flights
}

func (b *backlog) bytesNow() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.bytes
}

func (b *backlog) passRunning(start time.Time) {
	b.mu.Lock()
	b.passStart = start
	b.mu.Unlock()
}
