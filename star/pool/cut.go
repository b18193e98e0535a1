package pool

import "time"

// CutPolicy decides when the flusher cuts the pool into a flight.
//
// Interval bounds both the PUT rate and how long a byte waits, but it is not
// a fixed delay: a batch that arrives when no flight was cut within the last
// Interval is cut at once (a sparse append pays one PUT, not Interval plus a
// PUT). Under load, batches accumulate while earlier flights upload and go
// out together one Interval after the previous cut (group commit), so a
// chain cuts at most one flight per Interval below Target bytes, the rate the
// seed's cost model assumes (docs/design.md §6). Target bytes are cut at
// once whatever the clock: full flights are priced per byte already.
type CutPolicy struct {
	Interval time.Duration
	Target   int64
	// FixedDelay is the earlier policy, every flight due Interval after its
	// oldest byte's admission, kept so benchmarks can set the two side by
	// side.
	FixedDelay bool
	// WhenIdle cuts at once whenever the chain has no flight uploading
	// (group commit by completion): the next append after an ack does not
	// wait out the rest of an Interval that began at the previous cut,
	// while appends that arrive during an upload still group until the
	// upload ends or the Interval passes. It is for stores without a price
	// per PUT (the directory store): on S3 it would let a chain cut a
	// flight per PUT round trip, past the one per Interval the bill
	// assumes.
	WhenIdle bool
}

// Due reports whether a flight should be cut at now, given the uncut bytes,
// the admission time of the oldest uncut byte, the time of the previous
// cut (zero if none) and whether no flight of the chain is uploading
// (idle). When it is not due, at is when it will be (unless the chain
// falls idle first).
//
// The clock starts at the earlier of the previous cut and the oldest byte:
// normally the previous cut (the oldest byte came after it), so a byte waits
// less than Interval. A byte older than the previous cut was left behind by a
// full flight or a full window; it is due Interval after its own admission,
// as before, so no byte waits longer than Interval for a cut of its own.
func (c CutPolicy) Due(now time.Time, bytes int64, oldest, lastCut time.Time, idle bool) (due bool, at time.Time) {
	if bytes <= 0 {
		return false, time.Time{}
	}
	if bytes >= c.Target || (c.WhenIdle && idle) {
		return true, now
	}
	start := lastCut
	if c.FixedDelay || oldest.Before(start) {
		start = oldest
	}
	at = start.Add(c.Interval)
	return !now.Before(at), at
}
