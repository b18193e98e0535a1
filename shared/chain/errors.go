package chain

import (
	"errors"
	"fmt"
	"strings"
)

// The chain's error taxonomy. A writer's recovery switches on it:
//   - ErrDeposed: another writer owns the chain head (a foreign fence, a
//     settle of this writer's epoch, a later incarnation). Permanent: fail
//     every pending batch (indefinitely) and stop.
//   - *UndecidableError: a fence met a slot below its cut it could not
//     decide. Permanent ones (unreadable occupants) need an operator; the
//     others wait for a bucket and may be retried.
//   - *HaltError: a slot did not commit; the epoch must be fenced.
//   - ErrNotFenced: an earlier incarnation's epoch must be settled first.
//   - anything else: a store error, retried with backoff.

// ErrDeposed means a successor owns the chain: a foreign fence, a settle of
// this writer's epoch, or a later incarnation on the head. The writer must
// shed every stream that rides the chain.
var ErrDeposed = errors.New("chain: deposed: a successor fenced or minted this chain")

// ErrNotFenced means an earlier incarnation's epoch is still open (or this
// actor's own fence is unfinished): settle it before minting.
var ErrNotFenced = errors.New("chain: head epoch is open; fence it first")

// UndecidableError reports a slot at or below the cut's search frontier
// that a fence could not decide: what its buckets hold allows neither W
// flight copies nor K−W+1 poisons. The fence stops rather than guess.
type UndecidableError struct {
	Key       string
	Slot      uint64
	Buckets   []string
	Occupants []Occupant // per bucket; Unknown where unreachable or absent
	// Permanent: every bucket answered and no write can change the slot's
	// fate (unreadable occupants): only an operator can decide it.
	// Otherwise a bucket it needs did not answer before Err ended the wait.
	Permanent bool
	Err       error
}

func (e *UndecidableError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "chain: fence cannot decide slot %s:", e.Key)
	for i, o := range e.Occupants {
		fmt.Fprintf(&b, " %s=%v", e.Buckets[i], o)
	}
	if e.Permanent {
		b.WriteString(" (permanent: occupants allow neither a commit nor a kill)")
	} else if e.Err != nil {
		fmt.Fprintf(&b, " (waiting for an unreachable bucket: %v)", e.Err)
	}
	return b.String()
}

func (e *UndecidableError) Unwrap() error { return e.Err }
