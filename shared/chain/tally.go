// Package chain is the contract every chain writer and successor shares
// (docs/design.md §7): mint an epoch by CAS on the chain head, commit a slot to the
// bucket set at W of K, classify a slot, fence an epoch to its cut, walk the
// committed slots, probe for garbage above the cut and trim.
//
// The decisions are pure functions of what was observed, each with its own
// table or exhaustive test: the quorum arithmetic (Tally), what one
// bucket's answer shows (classify), who owns a chain head (judgeHead) and
// what a fence does next at one slot (slotFence). The rest drives them with
// I/O through the objstore and meta contracts.
package chain

import "fmt"

// Occupant is what one bucket holds at a slot's key, as one reader
// classifies it for the slot's writer (its epoch, slot and nonce).
type Occupant uint8

const (
	// Unknown: not observed (absent so far, unreachable, or indefinite).
	// Absence is never permanent: a create-once PUT may still land.
	Unknown Occupant = iota
	// Flight: a flight copy of this epoch and slot by the epoch's writer.
	Flight
	// Poison: an object that can never be the writer's copy: a fencer's
	// poison, or a well-formed envelope of another slot or writer. Because
	// the key is create-once, it blocks the writer's copy in that bucket
	// forever.
	Poison
	// Unreadable: an object whose envelope does not decode (damage, or a
	// version this build does not read). It may be the writer's copy or
	// not, so it counts neither way: it never makes a slot dead.
	Unreadable
)

func (o Occupant) String() string {
	switch o {
	case Flight:
		return "flight"
	case Poison:
		return "poison"
	case Unreadable:
		return "unreadable"
	default:
		return "unknown"
	}
}

// Fate is a slot's permanent state once decided.
type Fate uint8

const (
	Undecided Fate = iota
	Committed      // W flight copies: durable, and never revoked
	Dead           // K−W+1 poisons: no W flight copies can ever fit
)

func (f Fate) String() string {
	switch f {
	case Committed:
		return "committed"
	case Dead:
		return "dead"
	default:
		return "undecided"
	}
}

// Tally counts the occupants seen at one slot across a bucket set of K with
// write quorum W. Because every bucket is written at most once (create-once
// PUTs) an observed flight or poison never changes, so the decision is
// permanent: W flights and K−W+1 poisons cannot both fit in K buckets. An
// unreadable occupant counts for neither, so it can only delay a decision,
// never make a wrong one.
type Tally struct {
	K, W    int
	seen    []Occupant
	flights int
	poisons int
}

// NewTally starts a tally for a set of k buckets with quorum w.
func NewTally(k, w int) *Tally {
	if k < 1 || w < 1 || w > k {
		panic(fmt.Sprintf("chain: tally needs 1 ≤ W ≤ K, have W=%d K=%d", w, k))
	}
	return &Tally{K: k, W: w, seen: make([]Occupant, k)}
}

// Observe records the occupant of bucket i. A flight or poison, once seen,
// stays: a later unreadable read of it is ignored (the bytes decoded once),
// and an unreadable occupant that later decodes is upgraded. A flight that
// becomes a poison or back means the create-once guarantee was broken: it
// panics rather than decide on a corrupt view.
func (t *Tally) Observe(i int, o Occupant) {
	prev := t.seen[i]
	switch {
	case o == Unknown || o == prev:
		return
	case o == Unreadable:
		if prev == Unknown {
			t.seen[i] = Unreadable
		}
		return
	case prev == Flight || prev == Poison:
		panic(fmt.Sprintf("chain: bucket %d changed occupant from %v to %v", i, prev, o))
	}
	t.seen[i] = o
	if o == Flight {
		t.flights++
	} else {
		t.poisons++
	}
}

// Seen is the occupant observed at bucket i.
func (t *Tally) Seen(i int) Occupant { return t.seen[i] }

// Flights and Poisons are the counts observed so far (Poisons counts every
// occupant that can never be the writer's copy).
func (t *Tally) Flights() int { return t.flights }
func (t *Tally) Poisons() int { return t.poisons }

// Fate is the slot's decided state, or Undecided.
func (t *Tally) Fate() Fate {
	switch {
	case t.flights >= t.W:
		return Committed
	case t.poisons >= t.K-t.W+1:
		return Dead
	default:
		return Undecided
	}
}

// CanCommit reports whether W flight copies can still be reached given the
// poisons already standing.
func (t *Tally) CanCommit() bool { return t.K-t.poisons >= t.W }

// Occupants lists what each bucket was seen to hold (for errors and logs).
func (t *Tally) Occupants() []Occupant { return append([]Occupant(nil), t.seen...) }
