package verify

import "github.com/anishathalye/porcupine"

// extent is what the operations of one stream show of its seqs: where
// each seq's record is known (read, or held by an acknowledged or placed
// observed append) and how far the stream is known to have reached.
type extent struct {
	// reach is the greatest seq bound any operation shows: an ack's or a
	// placed observed append's end, a read's last record + 1, a 416's,
	// a check-tail's or a 412's tail.
	reach uint64
	// read are the records reads returned, by seq; mixed are the seqs
	// reads returned different records at (the model rejects that
	// anyway; here they rule nothing out).
	read  map[uint64]uint64
	mixed map[uint64]bool
	// held are the seqs an acknowledged or placed observed append holds.
	held map[uint64]bool
	// unplaced says an observed append's position is unknown (a read
	// returned one of its records at a seq below its index): the
	// argument of canPlace does not cover it.
	unplaced bool
}

// extentOf collects the extent of one stream's checked operations.
func extentOf(ops []porcupine.Operation) *extent {
	e := &extent{read: map[uint64]uint64{}, mixed: map[uint64]bool{}, held: map[uint64]bool{}}
	reach := func(x uint64) { e.reach = max(e.reach, x) }
	for _, op := range ops {
		in, out := op.Input.(*Input), op.Output.(*Output)
		switch {
		case in.Kind == KindRead && out.Outcome == OutOK:
			for i, r := range out.Records {
				s := in.From + uint64(i)
				if got, ok := e.read[s]; ok && got != r && !e.mixed[s] {
					e.mixed[s] = true
				}
				e.read[s] = r
			}
			reach(in.From + uint64(len(out.Records)))
		case in.Kind == KindRead, in.Kind == KindCheckTail, out.Outcome == OutSeqMismatch:
			reach(out.Tail)
		case out.Outcome == OutOK, out.Outcome == OutObserved && out.Placed:
			for s := out.Start; s < out.End; s++ {
				e.held[s] = true
			}
			reach(out.End)
		case out.Outcome == OutObserved:
			e.unplaced = true
		}
	}
	return e
}

// canPlace reports whether an indefinite append in could have taken
// effect in a way the stream's other operations could see. It could not
// when no seq below the reach can start it (each seq it would hold there
// is held by an acknowledged append or was read as another record) and it
// has records: then, had it taken effect, it started at or past the reach,
// and no checked operation looks there (none shows a tail past the reach,
// and an ack or placed observed append after it would start past the
// reach), so a linearization with it (and any indefinite append after it)
// moved to the end, where it has no effect, is one as well. Its fence, if
// any, changes nothing either: the model checks a 412's token against the
// append's own condition only, and no ack follows it.
//
// This is exact, unlike the pruning of appends no final read-back saw: it
// decides the appends into a deleted incarnation (no read-back) that the
// reads and acks of the run already rule out, which otherwise each stay
// open to the end of the history and make the search exponential.
func (e *extent) canPlace(in *Input) bool {
	n := uint64(len(in.Records))
	if n == 0 || e.unplaced {
		return true
	}
	for p := uint64(0); p < e.reach; p++ {
		if e.fits(in, p) {
			return true
		}
	}
	return false
}

// fits reports whether in's records could sit from seq p on: no seq
// below the reach they would hold is held by another append or was read
// as another record.
func (e *extent) fits(in *Input, p uint64) bool {
	for i, r := range in.Records {
		s := p + uint64(i)
		if s >= e.reach {
			return true
		}
		if e.held[s] {
			return false
		}
		if got, ok := e.read[s]; ok && got != r && !e.mixed[s] {
			return false
		}
	}
	return true
}
