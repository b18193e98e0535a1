package loglet

import (
	"sync"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// Pacer spaces a star's absorb passes so that their metastore writes
// average at most a budget per second across the star's loglets (the
// seed's "tens of operations per second per star", whatever the stream
// count). A pass's writes are charged once it ran; the next pass of any
// loglet waits until they are paid for at the budget's rate. No credit
// builds up while the star idles, so a burst after an idle spell is paced
// from its first pass on. A debt clock rather than x/time/rate's token
// bucket: one pass may cost more writes than any burst (one per stream).
type Pacer struct {
	perWrite time.Duration

	mu   sync.Mutex
	paid time.Time // the writes charged so far are paid for at this time
}

// NewPacer returns a pacer of budget writes per second (nil when budget ≤
// 0: passes are spaced by the minimum interval alone).
func NewPacer(budget float64) *Pacer {
	if budget <= 0 {
		return nil
	}
	return &Pacer{perWrite: time.Duration(float64(time.Second) / budget)}
}

// Charge books writes made at now.
func (p *Pacer) Charge(now time.Time, writes int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.paid.Before(now) {
		p.paid = now
	}
	p.paid = p.paid.Add(time.Duration(writes) * p.perWrite)
}

// Due is when the writes charged so far are paid for: the earliest start
// of the next pass under the budget.
func (p *Pacer) Due() time.Time {
	if p == nil {
		return time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.paid
}

// passWrites is the metastore writes a pass over streams streams costs the
// star: one span ref each, the marker, its stream shards, the checkpoint
// CAS, and for each ref the delete the settle that covers it will make
// (shared/settle deletes every covered span ref, one write each). Charged
// for the put alone, a star at density wrote its budget in refs and its
// settle as many again in deletes (issue 31).
func passWrites(streams int) int {
	ids := streams * (32 + 3) // ids of 32 hex digits (star/node), JSON-quoted
	shards := 0
	if ids > meta.MarkerInlineBytes {
		shards = (ids + meta.MarkerShardBytes - 1) / meta.MarkerShardBytes
	}
	return 2*streams + 2 + shards
}

// nextPass is when the absorb loop starts its next pass, given the last
// pass's start and the budget's due time: no sooner than minInterval after
// the last, and no later than that once the backlog is under pressure
// (half its budget in flights or bytes, or a full pass of slots pending),
// so spacing passes never makes the backlog budget bind. Pure.
func nextPass(last, due time.Time, minInterval time.Duration, pressured bool) time.Time {
	at := last.Add(minInterval)
	if !pressured && due.After(at) {
		return due
	}
	return at
}
