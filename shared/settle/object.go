package settle

import (
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// tailObj is a stream's standing tail object: its last settled object,
// below the output cap, which the next settle extends.
type tailObj struct {
	row    refRow // its catalog row: the pivot of an extension
	key    string
	footer format.SettledFooter
	size   uint64
}

// item is one slot ref copied into a settled object.
type item struct {
	ref  int // index of its span ref in the window
	span *meta.Span
	sl   meta.SlotRef
}

// objPlan is one settled object to assemble: the tail's blocks (if it
// extends the tail), then items in seq order, under a derivable key.
type objPlan struct {
	tail  *tailObj
	items []item
	// key parts: a new object is named after its first span ref's epoch
	// and seq; an extension keeps the tail's and bumps the revision.
	epoch, first, rev uint64
	pivot             refRow // the row whose CAS makes the object visible
	end               uint64 // one past the last seq of the object
	// recent: an extension's superseded revisions that may still stand,
	// the tail's own included (meta.Settled.Recent).
	recent []meta.Superseded
}

// planObject picks the next settled object of a stream from its window
// (its standing refs this era owns, non-empty). It extends tail when there
// is one, else starts a new object at the window's first ref, and takes
// whole slot refs in seq order until the blocks reach the output cap. A new
// object always takes all of its first ref, so the pivot (that ref's row)
// is never split: cutting it would leave its remainder uncovered between
// the pivot CAS and the remainder's put. Pure.
func planObject(tail *tailObj, window []refRow, outputCap uint64) objPlan {
	p := objPlan{tail: tail}
	var blocks uint64
	if tail != nil {
		blocks = tail.footer.BlocksLen()
		p.epoch, p.first, p.rev, p.pivot = tail.row.Ref.Settled.Epoch, tail.row.Ref.Settled.FirstSeq, tail.row.Ref.Settled.Revision+1, tail.row
	} else {
		first := window[0]
		p.epoch, p.first, p.pivot = first.Ref.Span.Epoch, first.Ref.FirstSeq, first
	}
fill:
	for i, r := range window {
		for _, sl := range r.Ref.Span.Slots {
			if blocks >= outputCap && (tail != nil || i > 0) {
				break fill
			}
			p.items = append(p.items, item{ref: i, span: r.Ref.Span, sl: sl})
			blocks += sl.Length
			p.end = sl.FirstSeq + sl.Count
		}
	}
	return p
}
