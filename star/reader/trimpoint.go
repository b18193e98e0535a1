package reader

import (
	"context"
	"fmt"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
)

// A trim point the records hold but no catalog row counts yet
// (docs/design.md §11, "On the read path").

// trimRowPage is how many rows one backward query for the greatest
// catalog row reads.
const trimRowPage = 256

// TrimInRecords is stream st's trim point as its rows and records hold
// it: its greatest catalog row's, moved by the trim commands in the
// records above that row's end (span refs, read through r). The leader
// of st reads it once per leadership (star/node/trimpoint.go).
func (r *Reader) TrimInRecords(ctx context.Context, st Stream) (uint64, error) {
	trim, from, err := settledTrim(ctx, r.cfg.Meta, st.ID)
	if err != nil {
		return 0, err
	}
	for {
		res, err := r.Read(ctx, st, AtSeq(from), Limits{}, nil)
		if err != nil {
			return 0, err
		}
		for i := range res.Records {
			rec := &res.Records[i]
			trim = api.ApplyTrim(trim, rec.Headers, rec.Body, rec.SeqNum)
		}
		if res.Stop != StopBatch || res.Next <= from {
			return trim, nil // the rows' end: the frontier
		}
		from = res.Next
	}
}

// settledTrim is the trim point and end of stream id's greatest catalog
// row (0, 0 when it has none).
func settledTrim(ctx context.Context, ms meta.Store, id string) (trim, end uint64, err error) {
	q := meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~", Backward: true, Limit: trimRowPage}
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return 0, 0, fmt.Errorf("rows of %s: %w", id, err)
		}
		for _, it := range pg.Items {
			var ref meta.Ref
			if err := meta.Decode(it.Val, &ref); err != nil {
				return 0, 0, fmt.Errorf("row %s/%s: %w", it.PK, it.SK, err)
			}
			if ref.Settled != nil {
				return ref.TrimPoint, ref.EndSeq, nil
			}
		}
		if pg.Next == "" {
			return 0, 0, nil
		}
		q.PageToken = pg.Next
	}
}
