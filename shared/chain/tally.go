// Package chain is the contract every chain writer and successor shares
// (DESIGN §7): mint an epoch by CAS on the chain head, commit a slot to the
// bucket set at W of K, classify a slot, fence an epoch to its cut, walk the
// committed slots, probe for garbage above the cut and trim.
//
// The quorum arithmetic (Tally) is pure; everything else does I/O through
// the objstore and meta contracts.
package chain

import "fmt"

// Occupant is what one bucket holds at a slot's key.
type Occupant uint8

const (
	// Unknown: not observed yet (absent so far, unreachable, or indefinite).
	Unknown Occupant = iota
	// Flight: a flight copy of this epoch and slot by the epoch's writer.
	Flight
	// Poison: a fencer's poison.
	Poison
)

func (o Occupant) String() string {
	switch o {
	case Flight:
		return "flight"
	case Poison:
		return "poison"
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
// PUTs) an observed occupant never changes, so the decision is permanent:
// W flights and K−W+1 poisons cannot both fit in K buckets.
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

// Observe records the occupant of bucket i. Observing a bucket twice with
// different occupants means the create-once guarantee was broken: it panics
// rather than decide on a corrupt view.
func (t *Tally) Observe(i int, o Occupant) {
	if o == Unknown {
		return
	}
	switch prev := t.seen[i]; {
	case prev == o:
		return
	case prev != Unknown:
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

// Flights and Poisons are the counts observed so far.
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
