package settle

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle/assemble"
)

// publish assembles p's object from the tail's blocks and the items'
// slot refs (warm in the fetch cache) and publishes it create-once
// (assemble.Publish); an object already standing at the key is adopted
// when it is this stream's from p's first seq and begins with the tail's
// blocks.
func publish(ctx context.Context, st *Stores, cache *jobCache, w *streamWork, p objPlan) (f format.SettledFooter, size uint64, adopted bool, err error) {
	key := format.SettledKey(w.basin, w.id, p.epoch, p.first, p.rev)
	var blocks []format.BlockInfo
	var srcs []assemble.Source
	if t := p.tail; t != nil {
		for _, e := range t.footer.Entries {
			blocks = append(blocks, e.BlockInfo())
		}
		srcs = append(srcs, assemble.Source{Bucket: st.SettledBucket, Key: t.key, N: int64(t.footer.BlocksLen())})
	}
	for _, it := range p.items {
		id := slotOf(it.span, it.sl.Slot)
		ws, err := cache.Get(ctx, id)
		if err != nil {
			return f, 0, false, err
		}
		xs, err := ws.Blocks(w.id, it.sl)
		if err != nil {
			return f, 0, false, err
		}
		for _, x := range xs {
			blocks = append(blocks, x.BlockInfo())
		}
		srcs = append(srcs, assemble.Source{Bucket: ws.Bucket(), Key: id.Key(), Off: int64(it.sl.Offset), N: int64(it.sl.Length), Warm: ws})
	}
	f, err = format.NewSettledFooter(w.id, blocks)
	if err != nil {
		return f, 0, false, fmt.Errorf("settle: footer of %s: %w", key, err)
	}
	res, err := assemble.Publish(ctx, st.Objects, st.SettledBucket, key, f, srcs, func(got format.SettledFooter) error {
		if got.StreamID != w.id || got.FirstSeq != p.first {
			return fmt.Errorf("%w: %s holds [%d,%d) of %s", ErrRows, key, got.FirstSeq, got.EndSeq, got.StreamID)
		}
		if t := p.tail; t != nil && (len(got.Entries) < len(t.footer.Entries) || !slices.Equal(got.Entries[:len(t.footer.Entries)], t.footer.Entries)) {
			return fmt.Errorf("%w: %s does not begin with the blocks of the tail object %s", ErrRows, key, t.key)
		}
		return nil
	})
	if err != nil {
		return f, 0, false, err
	}
	if res.Adopted {
		w.adopted++
	} else {
		w.copied += res.Copied
		w.staged += res.Staged
	}
	return res.Footer, res.Size, res.Adopted, nil
}

// commitObject makes a published object visible and retires what it
// covers, in an order that keeps every floor lookup landing on a row that
// covers its seq: (1) CAS the pivot (the tail's catalog row, or the span
// ref at the new object's first seq) into the catalog row of [first, end);
// (2) if the object ends inside a span ref, put that ref's remainder at
// end; (3) delete the covered span refs in ascending order. A lookup
// between steps meets a surviving span ref (its slots outlive it) or the
// catalog row. A lost CAS is errRaced.
func commitObject(ctx context.Context, st *Stores, cache *jobCache, w *streamWork, p objPlan, f format.SettledFooter, size uint64, adopted bool) error {
	end := f.EndSeq
	standing := w.view.standing
	k := 0
	for k < len(standing) && standing[k].Ref.EndSeq <= end {
		k++
	}
	covered := standing[:k]
	var straddle *refRow
	if k < len(standing) && standing[k].Ref.FirstSeq < end {
		straddle = &standing[k]
	}
	switch {
	case straddle == nil && (k == 0 || covered[k-1].Ref.EndSeq != end):
		return fmt.Errorf("%w: object ends at %d, past the stream's rows", ErrRows, end)
	case p.tail == nil && k == 0:
		return fmt.Errorf("%w: object [%d,%d) would split its first span ref [%d,%d)", ErrRows, f.FirstSeq, end, standing[0].Ref.FirstSeq, standing[0].Ref.EndSeq)
	}
	cat := meta.Ref{
		FirstSeq: p.pivot.Ref.FirstSeq, EndSeq: end,
		MinTimestamp: f.Entries[0].MinTimestamp, MaxTimestamp: f.Entries[len(f.Entries)-1].MaxTimestamp,
		Settled: &meta.Settled{Epoch: p.epoch, FirstSeq: f.FirstSeq, Revision: p.rev, Bytes: size, Recent: p.recent},
	}
	// The trim point at end: the stream's previous one (the tail's row, or
	// the greatest catalog row before this object) raised by every trim
	// command record among the object's new records. Span refs carry only
	// a lower bound (bundle footers hold no trim point), so the records
	// decide; they are in the fetch cache, which this era warmed.
	trim := uint64(0)
	if b := w.view.base; b != nil {
		trim = b.Ref.TrimPoint
	}
	newRefs := make([]meta.Ref, 0, k+1)
	for _, r := range covered {
		newRefs = append(newRefs, r.Ref)
	}
	if straddle != nil {
		newRefs = append(newRefs, straddle.Ref)
	}
	scanned, err := cache.TrimThrough(ctx, w.id, newRefs, end)
	if err != nil {
		return err
	}
	trim = max(trim, scanned)
	var rem *meta.Ref
	if straddle == nil {
		last := covered[k-1].Ref
		cat.CumBytes, cat.FencingToken, cat.TrimPoint = last.CumBytes, last.FencingToken, max(trim, last.TrimPoint)
	} else {
		r := straddle.Ref
		prev := p.pivot.Ref
		if k > 0 {
			prev = covered[k-1].Ref
		}
		tok, err := tokenAt(ctx, cache, w.id, r.Span, end)
		if err != nil {
			return err
		}
		cat.CumBytes, cat.FencingToken, cat.TrimPoint = cumAt(r, end), tok, max(trim, prev.TrimPoint)
		x, err := remainderOf(r, end, cat.MaxTimestamp)
		if err != nil {
			return err
		}
		x.TrimPoint = max(x.TrimPoint, cat.TrimPoint)
		rem = &x
	}

	pk := meta.RefKey(w.id, cat.FirstSeq)
	ver, err := st.Meta.Put(ctx, pk.PK, pk.SK, meta.Encode(cat), meta.IfVer(p.pivot.Ver))
	if errors.Is(err, meta.ErrConditionFailed) {
		return errRaced
	}
	if err != nil {
		return fmt.Errorf("settle: commit catalog row %s/%s: %w", pk.PK, pk.SK, err)
	}
	w.objects++
	outcome := "published"
	if adopted {
		outcome = "adopted"
	}
	st.metrics().objects.WithLabelValues(cache.class, outcome).Inc()

	// The rows now: the catalog row at the pivot, covered span refs (and
	// the straddler) to delete, the remainder to put first.
	var leftovers []refRow
	for _, r := range covered {
		if r.Ref.FirstSeq != cat.FirstSeq {
			leftovers = append(leftovers, r)
		}
	}
	var next []refRow
	if straddle != nil {
		leftovers = append(leftovers, *straddle)
		next = append(next, refRow{Ref: *rem})
		k++
	}
	next = append(next, standing[k:]...)
	w.view = view{base: &refRow{Ver: ver, Ref: cat}, leftovers: leftovers, remainder: rem, standing: next}
	return finishLeftovers(ctx, st, w)
}

// cumAt is a span ref's cumulative bytes as of seq at, the first seq of
// one of its slot refs. Pure.
func cumAt(r meta.Ref, at uint64) uint64 {
	c := r.CumBytes
	for _, sl := range r.Span.Slots {
		if sl.FirstSeq >= at {
			c -= sl.Length
		}
	}
	return c
}

// tokenAt is the stream's fencing token after seq at−1, from the bundle
// footer of the slot holding it.
func tokenAt(ctx context.Context, cache *jobCache, id string, sp *meta.Span, at uint64) (string, error) {
	for _, sl := range sp.Slots {
		if sl.FirstSeq+sl.Count != at {
			continue
		}
		ws, err := cache.Get(ctx, slotOf(sp, sl.Slot))
		if err != nil {
			return "", err
		}
		xs, err := ws.Blocks(id, sl)
		if err != nil {
			return "", err
		}
		return xs[len(xs)-1].FencingToken, nil
	}
	return "", fmt.Errorf("%w: no slot ref of the span ref at %d ends at %d", ErrRows, sp.Slots[0].FirstSeq, at)
}
