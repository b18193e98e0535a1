package reader

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// maxRetries bounds how often a read re-asks the metastore at one seq
// after the tail window or a stale row sent it back: each retry is a race
// with the absorb or a settle that moved the records, which cannot repeat
// for long.
const maxRetries = 3

// walk is the state of one Read.
type walk struct {
	r      *Reader
	stream Stream
	tail   *Tail
	rows   cursor
	acc    acc
	pf     *Prefetch // nil: no read-ahead
	trim   uint64    // Limits.TrimPoint
}

func newWalk(r *Reader, stream Stream, lim Limits, tail *Tail, pf *Prefetch) *walk {
	w := &walk{r: r, stream: stream, tail: tail, pf: pf, trim: lim.TrimPoint}
	w.rows = cursor{q: rows{r: r, id: stream.ID}, page: r.cfg.RowPage}
	w.acc = newAcc(lim, r.cfg.MaxBatchCount, r.cfg.MaxBatchBytes)
	return w
}

func (w *walk) run(ctx context.Context, start Start) (Result, error) {
	a := &w.acc
	switch start.Kind {
	case FromSeq:
		a.next = start.Value
	case FromTimestamp:
		// Walk from the stream's first record, skipping rows (without
		// reading them) and records below the timestamp.
		ts := start.Value
		a.since = &ts
	case FromTailOffset:
		var end uint64
		if w.tail != nil {
			end = w.tail.End
		} else {
			var err error
			if end, err = w.rows.q.frontier(ctx); err != nil {
				return Result{}, err
			}
		}
		a.next = end - min(start.Value, end)
	default:
		return Result{}, fmt.Errorf("unknown start kind %d", start.Kind)
	}
	// Below an acknowledged trim point nothing is served, settled or not.
	a.next = max(a.next, w.trim)
	if w.tail != nil && w.tail.Window != nil && a.since == nil {
		// A reader at the tail (a live session woken by a release) finds
		// its next seq in the window: served from memory without asking
		// the metastore for rows that cannot hold it (a thousand tailing
		// sessions would otherwise query twice per release each).
		// (No peek first: the window decodes what it returns.)
		miss, err := w.readTail(ctx)
		if err != nil {
			return Result{}, err
		}
		if !miss.missing {
			return a.result(), nil
		}
		// Not in the window (absorbed, or below it): the rows have it.
	}
	retries, retryAt := 0, a.next
	retry := func() bool {
		if retryAt != a.next {
			retries, retryAt = 0, a.next
		}
		retries++
		w.rows.reset()
		return retries <= maxRetries
	}
	for a.stop == 0 {
		if err := ctx.Err(); err != nil {
			return Result{}, err
		}
		l, err := w.rows.locate(ctx, a.next)
		if err != nil {
			return Result{}, err
		}
		switch l.kind {
		case covered:
			err := w.readRow(ctx, l.row)
			if err != nil && isStale(l.row, err) && retry() {
				// The row was replaced (settled, rewritten) under us: look again.
				w.r.log.Debug("reader: row's objects gone; looking up the row again",
					"stream", w.stream.ID, "seq", a.next, "row", l.row.FirstSeq, "err", err)
				continue
			}
			if err != nil {
				return Result{}, err
			}
			w.rows.continuing = a.next == l.row.EndSeq
		case later:
			if !l.below && len(a.recs) == 0 {
				// Nothing at or below: trim or retention removed the
				// records up to the first row. Start there.
				a.next = l.row.FirstSeq
				continue
			}
			if !l.below {
				// A trim removed the rows past those this read has
				// read: end the batch there; the next read starts past
				// the trim.
				a.stop = StopBatch
				break
			}
			return Result{}, fmt.Errorf("%w: no row covers seq %d; the next row starts at %d", ErrGap, a.next, l.row.FirstSeq)
		case none:
			if w.tail == nil || w.tail.Window == nil {
				a.stop = StopFrontier
				break
			}
			miss, err := w.readTail(ctx)
			if err != nil {
				return Result{}, err
			}
			if !miss.missing {
				break
			}
			// The window lacks a.next. If it has records above, the absorb
			// moved [a.next, first) into rows since the lookup, or they were
			// trimmed; if it has none, it may have absorbed everything.
			if (miss.has || a.next < w.tail.End) && retry() {
				continue
			}
			switch {
			case miss.has && !l.below && len(a.recs) == 0:
				a.next = miss.first // nothing below: trimmed
			case miss.has:
				return Result{}, fmt.Errorf("%w: seqs [%d,%d) are in neither the rows nor the tail window", ErrGap, a.next, miss.first)
			case a.next < w.tail.End:
				return Result{}, fmt.Errorf("%w: seqs [%d,%d) below the durable tail are in neither the rows nor the tail window", ErrGap, a.next, w.tail.End)
			default:
				a.stop = StopCaughtUp
			}
		}
	}
	return a.result(), nil
}

// isStale reports a read error that a newer row may explain: the objects
// the row names are gone (trimmed or reclaimed behind a settle).
func isStale(row meta.Ref, err error) bool {
	if row.Span != nil {
		return errors.Is(err, errSlotGone)
	}
	return errors.Is(err, objstore.ErrNotFound)
}

// readRow reads the records of row from the accumulator's next seq on.
func (w *walk) readRow(ctx context.Context, row meta.Ref) error {
	a := &w.acc
	if row.Settled != nil && row.Settled.Trimmed {
		// Every record of the row is trimmed or past retention; the row
		// stays for the stream's tail and its object is being reclaimed
		// (docs/settle.md, "Retention and trims"). A read below it starts
		// at its end; one that has records ends its batch there.
		if len(a.recs) > 0 {
			a.stop = StopBatch
		} else {
			a.next = row.EndSeq
		}
		return nil
	}
	if a.until != nil && row.MinTimestamp >= *a.until {
		a.stop = StopUntil
		return nil
	}
	if a.since != nil && row.MaxTimestamp < *a.since {
		a.next = row.EndSeq // every record of the row is below the start time
		return nil
	}
	if row.MaxTimestamp < a.notBefore {
		// Every record of the row is past retention (the auditor has not
		// dropped the row yet): skipped unread, as a trimmed row is.
		if len(a.recs) > 0 {
			a.stop = StopBatch
		} else {
			a.next = row.EndSeq
		}
		return nil
	}
	if row.Span != nil {
		return w.readSpan(ctx, row)
	}
	return w.readSettled(ctx, row)
}

func (w *walk) readSpan(ctx context.Context, row meta.Ref) error {
	a := &w.acc
	sl := row.Span.Slots
	i := sort.Search(len(sl), func(i int) bool { return sl[i].FirstSeq+sl[i].Count > a.next })
	for ; i < len(sl) && a.stop == 0; i++ {
		recs, ok := w.pf.ready(extentKey(row.Span, sl[i]))
		var err error
		if !ok {
			recs, err = w.r.extent(ctx, row.Span, sl[i])
		}
		if err != nil {
			return fmt.Errorf("span ref at %d (epoch %d of %s/%s): %w", row.FirstSeq, row.Span.Epoch, row.Span.Star, row.Span.Class, err)
		}
		if err := a.accept(recs); err != nil {
			return err
		}
	}
	return nil
}

func (w *walk) readSettled(ctx context.Context, row meta.Ref) error {
	a := &w.acc
	st := row.Settled
	key := SettledKey(w.stream.Basin, w.stream.ID, st.Epoch, st.FirstSeq, st.Revision)
	f, err := w.r.footer(ctx, key, st.Bytes)
	if err != nil {
		return fmt.Errorf("catalog row at %d: %w", row.FirstSeq, err)
	}
	if f.StreamID != w.stream.ID || f.FirstSeq > row.FirstSeq || f.EndSeq < row.EndSeq {
		return fmt.Errorf("%w: catalog row [%d,%d) of %s names %s, which holds [%d,%d) of %s",
			ErrCorruptRow, row.FirstSeq, row.EndSeq, w.stream.ID, key, f.FirstSeq, f.EndSeq, f.StreamID)
	}
	if a.since != nil {
		// Timestamps never decrease, so every record before the first
		// block reaching the start time is below it.
		e, ok := f.FindTime(*a.since)
		if !ok {
			a.next = row.EndSeq
			return nil
		}
		a.next = min(max(a.next, e.FirstSeq), row.EndSeq)
	}
	if a.notBefore > 0 && len(a.recs) == 0 {
		// Skip the blocks wholly past retention unread (an object a busy
		// stream shares between old records and new ones).
		e, ok := f.FindTime(a.notBefore)
		if !ok {
			a.next = row.EndSeq
			return nil
		}
		a.next = min(max(a.next, e.FirstSeq), row.EndSeq)
	}
	size := uint64(w.r.cfg.SettledChunkBytes)
	for a.next < row.EndSeq && a.stop == 0 {
		e, ok := f.Find(a.next)
		if !ok {
			return fmt.Errorf("%w: settled object %s has no block for seq %d", format.ErrCorrupt, key, a.next)
		}
		if a.until != nil && e.MinTimestamp >= *a.until {
			a.stop = StopUntil
			break
		}
		c := chunkOf(e, size)
		recs, ok := w.pf.ready(chunkKey(key, c))
		if !ok {
			if recs, err = w.r.chunk(ctx, key, f, c); err != nil {
				return fmt.Errorf("catalog row at %d: %w", row.FirstSeq, err)
			}
		}
		if err != nil {
			return fmt.Errorf("catalog row at %d: %w", row.FirstSeq, err)
		}
		// The object may hold more than the row's window (a rewrite that
		// extended it): never read past the row.
		n := sort.Search(len(recs), func(i int) bool { return recs[i].SeqNum >= row.EndSeq })
		if err := a.accept(recs[:n]); err != nil {
			return err
		}
	}
	return nil
}

// tailMiss says the tail window lacks the next seq: has reports it holds
// records of the stream from first on.
type tailMiss struct {
	missing bool
	has     bool
	first   uint64
}

// readTail reads the tail window from the next seq until a limit stops the
// read or the window is exhausted. Extents of flights the leader no longer
// holds in memory are read from their slot objects (readTailExtent).
func (w *walk) readTail(ctx context.Context) (tailMiss, error) {
	a := &w.acc
	for a.stop == 0 {
		want := a.maxCount - len(a.recs)
		if a.since != nil {
			want = a.maxCount // skipped records do not count
		}
		xs, first, ok := w.tail.Window.Read(w.stream.ID, a.next, want)
		if !ok {
			if a.next >= w.tail.End {
				a.stop = StopCaughtUp
				return tailMiss{}, nil
			}
			return tailMiss{missing: true}, nil
		}
		if first > a.next {
			return tailMiss{missing: true, has: true, first: first}, nil
		}
		from, n := a.next, 0
		for _, x := range xs {
			if a.stop != 0 {
				break
			}
			recs := x.Records
			if recs == nil {
				var err error
				if recs, err = w.readTailExtent(ctx, x); errors.Is(err, errSlotGone) {
					// Absorbed, settled and trimmed since the window named
					// it (the rows have it now): look again.
					return tailMiss{missing: true}, nil
				} else if err != nil {
					return tailMiss{}, err
				}
			}
			n += countFrom(recs, from)
			if err := a.accept(recs); err != nil {
				return tailMiss{}, fmt.Errorf("tail window: %w", err)
			}
		}
		if n < want && a.stop == 0 {
			a.stop = StopCaughtUp
		}
	}
	return tailMiss{}, nil
}

// readTailExtent reads a tail window extent whose bundle the leader let go
// of from the flight's slot object, as readSpan reads an absorbed one.
func (w *walk) readTailExtent(ctx context.Context, x TailExtent) ([]format.Record, error) {
	if x.Span == nil {
		return nil, fmt.Errorf("%w: tail window extent with neither records nor a slot", ErrCorruptRow)
	}
	w.r.m.tailExtents.Inc()
	recs, err := w.r.extentIn(ctx, x.Span, x.Slot, x.Buckets)
	if err != nil {
		return nil, fmt.Errorf("tail window: released slot %d of epoch %d of %s/%s: %w", x.Slot.Slot, x.Span.Epoch, x.Span.Star, x.Span.Class, err)
	}
	return recs, nil
}

// countFrom is how many of recs (in seq order) have seq ≥ from.
func countFrom(recs []format.Record, from uint64) int {
	return len(recs) - sort.Search(len(recs), func(i int) bool { return recs[i].SeqNum >= from })
}
