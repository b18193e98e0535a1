package assemble

import (
	"context"
	"fmt"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// TrimThrough is the greatest trim point the trim command records of
// stream id below seq end set, over the slot refs of span refs refs
// (0 when there is none), read from the warm bundles. A trim
// command keeps min(point, its seq+1), as the facade applies it.
func (c *Cache) TrimThrough(ctx context.Context, id string, refs []meta.Ref, end uint64) (uint64, error) {
	var trim uint64
	for _, r := range refs {
		sp := r.Span
		if sp == nil {
			continue
		}
		for _, sl := range sp.Slots {
			if sl.FirstSeq >= end {
				break
			}
			ws, err := c.Get(ctx, SlotID{Star: sp.Star, Class: sp.Class, Epoch: sp.Epoch, Slot: sl.Slot})
			if err != nil {
				return 0, err
			}
			xs, err := ws.Blocks(id, sl)
			if err != nil {
				return 0, err
			}
			for _, x := range xs {
				b, err := ws.ReadAt(int64(x.Offset), int64(x.Length))
				if err != nil {
					return 0, err
				}
				recs, _, err := format.DecodeBlock(b)
				if err != nil {
					return 0, fmt.Errorf("settle: slot %d: block at %d: %w", sl.Slot, x.Offset, err)
				}
				for _, rec := range recs {
					if rec.SeqNum >= end {
						break
					}
					trim = api.ApplyTrim(trim, rec.Headers, rec.Body, rec.SeqNum)
				}
			}
		}
	}
	return trim, nil
}
