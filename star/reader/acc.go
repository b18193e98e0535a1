package reader

import (
	"fmt"

	"github.com/starlog/starlog/shared/format"
)

// acc accumulates one Read's records: it enforces contiguity from the
// start, the timestamp start, the limits and until. Pure: no I/O.
type acc struct {
	next  uint64  // the seq the next accepted record must have
	since *uint64 // timestamp start: records below it are skipped, until one is not
	until *uint64
	// notBefore is the retention cut (unix ms): records below it are
	// skipped. Timestamps never decrease in a stream, so they lead it.
	notBefore uint64
	maxCount  int
	maxBytes  int
	// callerCount and callerBytes tell a caller's limit from the batch cap,
	// to report why the read stopped.
	callerCount bool
	callerBytes bool

	recs  []format.Record
	bytes int
	stop  Stop
}

func newAcc(lim Limits, batchCount, batchBytes int) acc {
	a := acc{until: lim.Until, notBefore: lim.NotBefore, maxCount: batchCount, maxBytes: batchBytes}
	if lim.Count > 0 && lim.Count <= batchCount {
		a.maxCount, a.callerCount = lim.Count, true
	}
	if lim.Bytes > 0 && lim.Bytes <= batchBytes {
		a.maxBytes, a.callerBytes = lim.Bytes, true
	}
	return a
}

// accept takes records in seq order; those below next are ignored (a block
// read from its start when the read starts inside it). A record above next
// is a gap. Accepting stops at the first record a limit refuses.
func (a *acc) accept(recs []format.Record) error {
	for i := range recs {
		if a.stop != 0 {
			return nil
		}
		rec := &recs[i]
		if rec.SeqNum < a.next {
			continue
		}
		if rec.SeqNum != a.next {
			return fmt.Errorf("%w: expected seq %d, the source has %d", ErrGap, a.next, rec.SeqNum)
		}
		if rec.Timestamp < a.notBefore {
			if len(a.recs) > 0 {
				// Records already taken end the batch: what is returned
				// stays contiguous, and the next read skips from here.
				a.stop = StopBatch
				return nil
			}
			a.next++
			continue
		}
		if a.since != nil {
			if rec.Timestamp < *a.since {
				a.next++
				continue
			}
			a.since = nil
		}
		if a.until != nil && rec.Timestamp >= *a.until {
			a.stop = StopUntil
			return nil
		}
		m := rec.MeteredSize()
		if a.bytes+m > a.maxBytes {
			a.stop = a.bytesStop()
			return nil
		}
		a.recs = append(a.recs, *rec)
		a.bytes += m
		a.next++
		switch {
		case len(a.recs) == a.maxCount:
			a.stop = a.countStop()
		case a.bytes == a.maxBytes:
			a.stop = a.bytesStop()
		}
	}
	return nil
}

func (a *acc) countStop() Stop {
	if a.callerCount {
		return StopCount
	}
	return StopBatch
}

func (a *acc) bytesStop() Stop {
	if a.callerBytes {
		return StopBytes
	}
	return StopBatch
}

func (a *acc) result() Result {
	res := Result{Records: a.recs, Start: a.next, Next: a.next, Bytes: a.bytes, Stop: a.stop}
	if len(a.recs) > 0 {
		res.Start = a.recs[0].SeqNum
	}
	return res
}
