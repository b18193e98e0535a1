package reader

import (
	"context"
	"fmt"

	"github.com/starlog/starlog/shared/meta"
)

// decodeRef decodes and checks one ref row of stream id: the row is keyed
// by its first seq, has exactly one location, a non-empty extent, and (for
// a span ref) slot refs that tile the extent in seq order.
func decodeRef(id string, it meta.Item) (meta.Ref, error) {
	var ref meta.Ref
	if err := meta.Decode(it.Val, &ref); err != nil {
		return ref, fmt.Errorf("%w: %s/%s: %v", ErrCorruptRow, it.PK, it.SK, err)
	}
	bad := func(format string, args ...any) (meta.Ref, error) {
		return meta.Ref{}, fmt.Errorf("%w: %s/%s: %s", ErrCorruptRow, it.PK, it.SK, fmt.Sprintf(format, args...))
	}
	if k := meta.RefKey(id, ref.FirstSeq); it.PK != k.PK || it.SK != k.SK {
		return bad("first seq %d does not match the key", ref.FirstSeq)
	}
	if ref.EndSeq <= ref.FirstSeq {
		return bad("empty extent [%d,%d)", ref.FirstSeq, ref.EndSeq)
	}
	if ref.MinTimestamp > ref.MaxTimestamp {
		return bad("time bounds [%d,%d] reversed", ref.MinTimestamp, ref.MaxTimestamp)
	}
	switch {
	case (ref.Span == nil) == (ref.Settled == nil):
		return bad("needs exactly one of span and settled")
	case ref.Settled != nil:
		if ref.Settled.FirstSeq > ref.FirstSeq {
			return bad("settled object starts at %d, above the row's %d", ref.Settled.FirstSeq, ref.FirstSeq)
		}
	default:
		sp := ref.Span
		if sp.Star == "" || !sp.Class.Valid() {
			return bad("span names chain %q/%q", sp.Star, sp.Class)
		}
		if len(sp.Slots) == 0 {
			return bad("span has no slots")
		}
		seq := ref.FirstSeq
		for i, sl := range sp.Slots {
			if sl.FirstSeq != seq || sl.Count == 0 || sl.Length == 0 || sl.Count > ref.EndSeq-seq {
				return bad("slot ref %d (slot %d, seqs %d+%d, %d bytes) does not continue seq %d within [%d,%d)",
					i, sl.Slot, sl.FirstSeq, sl.Count, sl.Length, seq, ref.FirstSeq, ref.EndSeq)
			}
			if i > 0 && sl.Slot < sp.Slots[i-1].Slot {
				return bad("slot ref %d goes back to slot %d", i, sl.Slot)
			}
			seq += sl.Count
		}
		if seq != ref.EndSeq {
			return bad("slot refs end at %d, the row at %d", seq, ref.EndSeq)
		}
	}
	return ref, nil
}

// rows queries one stream's ref rows.
type rows struct {
	r  *Reader
	id string
}

func (q rows) query(ctx context.Context, mq meta.Query) ([]meta.Ref, error) {
	q.r.m.metaQueries.Inc()
	page, err := q.r.cfg.Meta.Query(ctx, mq)
	if err != nil {
		return nil, fmt.Errorf("query rows of %s: %w", q.id, err)
	}
	out := make([]meta.Ref, 0, len(page.Items))
	for _, it := range page.Items {
		ref, err := decodeRef(q.id, it)
		if err != nil {
			return nil, err
		}
		out = append(out, ref)
	}
	return out, nil
}

// floor returns the row with the greatest first seq ≤ seq.
func (q rows) floor(ctx context.Context, seq uint64) (meta.Ref, bool, error) {
	refs, err := q.query(ctx, meta.FloorQuery(q.id, seq))
	if err != nil || len(refs) == 0 {
		return meta.Ref{}, false, err
	}
	return refs[0], true, nil
}

// forward returns up to n rows with first seq ≥ seq, ascending.
func (q rows) forward(ctx context.Context, seq uint64, n int) ([]meta.Ref, error) {
	return q.query(ctx, meta.Query{PK: meta.RefKey(q.id, seq).PK, From: meta.RefKey(q.id, seq).SK,
		To: meta.RefPrefix + "~", Limit: n})
}

// frontier is the end of the stream's greatest row: its ref-covered tail.
func (q rows) frontier(ctx context.Context) (uint64, error) {
	refs, err := q.query(ctx, meta.Query{PK: meta.RefKey(q.id, 0).PK, From: meta.RefPrefix,
		To: meta.RefPrefix + "~", Backward: true, Limit: 1})
	if err != nil || len(refs) == 0 {
		return 0, err
	}
	return refs[0].EndSeq, nil
}

// locKind is what the rows say about one seq.
type locKind uint8

const (
	covered locKind = iota // row covers the seq
	later                  // no row covers it; row is the next row above it
	none                   // no row covers it or starts above it
)

// loc is a row lookup's answer. below reports that some row starts at or
// below the seq (so records under a "later" row are missing, not trimmed).
type loc struct {
	kind  locKind
	row   meta.Ref
	below bool
}

// cursor walks a stream's rows forward, fetching a page of rows ahead so a
// stream of many small rows costs one query per page, not per row.
type cursor struct {
	q     rows
	page  int
	ahead []meta.Ref // ascending by first seq; may overlap (a catalog row and the span refs it covers, not yet deleted)
	// continuing is set when the last row read ended where the next lookup
	// starts: then a forward page (which holds the next row, if the rows
	// are contiguous) is tried before a floor lookup.
	continuing bool
}

// reset drops rows fetched ahead, so the next lookup asks the metastore
// afresh (the absorb or a settle may have changed the rows).
func (c *cursor) reset() { c.ahead, c.continuing = nil, false }

// locate finds the row covering seq.
func (c *cursor) locate(ctx context.Context, seq uint64) (loc, error) {
	c.drop(seq)
	if len(c.ahead) > 0 && c.ahead[0].FirstSeq <= seq {
		return loc{kind: covered, row: c.ahead[0], below: true}, nil
	}
	fetched := false
	if len(c.ahead) == 0 && c.continuing {
		fetched = true
		page, err := c.q.forward(ctx, seq, c.page)
		if err != nil {
			return loc{}, err
		}
		c.ahead = page
		if len(page) > 0 && page[0].FirstSeq == seq {
			return loc{kind: covered, row: page[0], below: true}, nil
		}
	}
	// A floor lookup finds what a forward page cannot: a row starting below
	// seq, such as a settle's catalog row swapped in over the span refs.
	f, below, err := c.q.floor(ctx, seq)
	if err != nil {
		return loc{}, err
	}
	if below && f.EndSeq > seq {
		c.ahead = append([]meta.Ref{f}, c.ahead...)
		return loc{kind: covered, row: f, below: true}, nil
	}
	if len(c.ahead) == 0 && !fetched {
		if c.ahead, err = c.q.forward(ctx, seq, c.page); err != nil {
			return loc{}, err
		}
	}
	if len(c.ahead) > 0 {
		if c.ahead[0].FirstSeq <= seq {
			// The absorb wrote the row covering seq between the floor
			// lookup (which found its predecessor, ending at seq) and the
			// forward page: it is covered, not a gap.
			return loc{kind: covered, row: c.ahead[0], below: true}, nil
		}
		return loc{kind: later, row: c.ahead[0], below: below}, nil
	}
	return loc{kind: none, below: below}, nil
}

// drop forgets rows that end at or below seq.
func (c *cursor) drop(seq uint64) {
	i := 0
	for i < len(c.ahead) && c.ahead[i].EndSeq <= seq {
		i++
	}
	c.ahead = c.ahead[i:]
}
