package chain

// slotFence decides one slot of a fence from what its buckets answered,
// without doing any I/O: the driver (decideSlot) makes the requests plan
// asks for and feeds every answer back through observe. It is pure so
// that every rule below has a test over every occupant combination
// (slotfence_test.go), and so that a simulation can drive it directly.
//
// The rules, for a set of K buckets with write quorum W:
//   - Read every bucket's envelope first. Reads are harmless, so they run
//     as soon as the slot is in the fence's read-ahead; writes wait until
//     the driver allows them (mayWrite: the slot is within the minted
//     window of the lowest undecided slot).
//   - Roll forward: once a flight copy of the writer is seen and W copies
//     can stand (flights plus absent buckets ≥ W), fetch one copy, verify
//     every CRC in it, and write those exact bytes create-once into every
//     absent bucket, as BookKeeper's recovery re-replicates what it finds.
//     With a bucket down, a lone copy may be half of a committed (and
//     acknowledged) slot whose other copy sits in the down bucket: poison
//     could not kill it (K−W+1 poisons do not fit beside two copies), but
//     copying it decides it.
//   - Poison: otherwise, once poisons plus absent buckets reach K−W+1,
//     write poison create-once into every absent bucket. Death is always
//     safe (W copies cannot fit beside K−W+1 poisons); a slot with no
//     flight copy in any bucket that answered is the usual case.
//   - Wait when neither can decide yet: an unanswered bucket may change it.
//   - Never infer absence from a read: only a won create-once write makes
//     a bucket's occupant permanent. A write that finds the key taken, or
//     ends indefinitely, re-reads the envelope.
//   - Unreadable occupants count neither way. A slot whose occupants
//     allow neither W flights nor K−W+1 poisons, with nothing left to ask,
//     is stuck: the fence reports it and never guesses.
type slotFence struct {
	w       int
	tally   *Tally
	know    []bucketKnowledge
	busy    []bool // a request to the bucket is in flight
	waiting []bool // its last request failed: retried after a backoff
	badCopy []bool // its flight copy failed verification
	copy    []byte // a verified flight copy of the writer, once fetched
	// wasAbsent: the bucket once read absent.
	wasAbsent []bool
	// raced is set when a bucket read absent later holds the writer's
	// copy: the writer is alive and writing ahead of the fence.
	raced bool
}

type bucketKnowledge uint8

const (
	kUnread   bucketKnowledge = iota // not read yet, or to be read again
	kAbsent                          // the last read found no object: not permanent
	kOccupied                        // the tally holds its occupant
)

// fenceOp is one request a slot fence asks its driver to make.
type fenceOp uint8

const (
	opRead   fenceOp = iota + 1 // GET the envelope
	opFetch                     // GET the whole flight copy and verify it
	opCopy                      // create-once PUT of the verified copy (roll forward)
	opPoison                    // create-once PUT of poison
)

func (o fenceOp) String() string {
	switch o {
	case opRead:
		return "read"
	case opFetch:
		return "fetch"
	case opCopy:
		return "copy"
	case opPoison:
		return "poison"
	}
	return "?"
}

type fenceReq struct {
	op     fenceOp
	bucket int
}

// fenceObs is the answer to one fenceReq.
type fenceObs struct {
	req     fenceReq
	occ     Occupant // opRead: the envelope's occupant (Unknown when absent)
	absent  bool     // opRead: no object at the key
	won     bool     // opCopy, opPoison: this write created the occupant
	recheck bool     // opCopy, opPoison: the key was taken or the outcome is unknown
	copy    []byte   // opFetch: the verified copy
	bad     bool     // opFetch: the copy failed verification
	err     error    // the request failed: retry it after a backoff
}

func newSlotFence(k, w int) *slotFence {
	return &slotFence{
		w: w, tally: NewTally(k, w),
		know: make([]bucketKnowledge, k), busy: make([]bool, k),
		waiting: make([]bool, k), badCopy: make([]bool, k), wasAbsent: make([]bool, k),
	}
}

// observe folds one answer in.
func (f *slotFence) observe(o fenceObs) {
	i := o.req.bucket
	f.busy[i] = false
	if o.err != nil {
		f.waiting[i] = true
		return
	}
	switch o.req.op {
	case opRead:
		switch {
		case o.absent:
			f.know[i] = kAbsent
			f.wasAbsent[i] = true
		default:
			f.raced = f.raced || f.wasAbsent[i] && o.occ == Flight
			f.tally.Observe(i, o.occ)
			f.know[i] = kOccupied
		}
	case opFetch:
		if o.bad {
			f.badCopy[i] = true
		} else if f.copy == nil {
			f.copy = o.copy
		}
	case opCopy, opPoison:
		switch {
		case o.won && o.req.op == opCopy:
			f.tally.Observe(i, Flight)
			f.know[i] = kOccupied
		case o.won:
			f.tally.Observe(i, Poison)
			f.know[i] = kOccupied
		case o.recheck:
			f.know[i] = kUnread
		}
	}
}

// retry ends bucket i's backoff: its failed request may be made again.
func (f *slotFence) retry(i int) { f.waiting[i] = false }

// plan returns the requests to make now (marking them in flight), the
// slot's fate, and whether it is stuck: undecided with no request in
// flight, none to retry and none that could change the tally.
func (f *slotFence) plan(mayWrite bool) (reqs []fenceReq, fate Fate, stuck bool) {
	if fate = f.tally.Fate(); fate != Undecided {
		return nil, fate, false
	}
	k := len(f.know)
	ask := func(op fenceOp, i int) {
		f.busy[i] = true
		reqs = append(reqs, fenceReq{op, i})
	}
	idle := func(i int) bool { return !f.busy[i] && !f.waiting[i] }
	absent := 0
	for i := range k {
		switch f.know[i] {
		case kUnread:
			if idle(i) {
				ask(opRead, i)
			}
		case kAbsent:
			absent++
		}
	}
	if mayWrite {
		flights, poisons := f.tally.Flights(), f.tally.Poisons()
		copyable := f.copy != nil
		for i := range k {
			copyable = copyable || f.tally.Seen(i) == Flight && !f.badCopy[i]
		}
		switch {
		case flights >= 1 && copyable && flights+absent >= f.w:
			f.rollForward(ask, idle)
		case poisons+absent >= k-f.w+1:
			// Always safe: with K−W+1 poisons standing, W flight copies can
			// never fit. Rolling forward is preferred above only because it
			// decides where poison cannot (a lone copy with a bucket down).
			for i := range k {
				if f.know[i] == kAbsent && idle(i) {
					ask(opPoison, i)
				}
			}
		}
		// Otherwise wait: an unanswered bucket may be absent (then roll
		// or poison) or hold the copy that commits the slot.
	}
	if len(reqs) > 0 || !mayWrite {
		return reqs, Undecided, false
	}
	for i := range k {
		if f.busy[i] || f.waiting[i] {
			return nil, Undecided, false
		}
	}
	return nil, Undecided, true
}

// rollForward fetches a verified copy, then writes it into every absent
// bucket.
func (f *slotFence) rollForward(ask func(fenceOp, int), idle func(int) bool) {
	if f.copy == nil {
		for i := range f.know {
			if f.tally.Seen(i) == Flight && !f.badCopy[i] && f.busy[i] {
				return // a fetch is in flight
			}
		}
		for i := range f.know {
			if f.tally.Seen(i) == Flight && !f.badCopy[i] && idle(i) {
				ask(opFetch, i)
				return
			}
		}
		return
	}
	for i := range f.know {
		if f.know[i] == kAbsent && idle(i) {
			ask(opCopy, i)
		}
	}
}
