package chain

import (
	"strconv"
	"strings"

	"github.com/starlog/starlog/shared/meta"
)

// verdict is what the chain head says an actor may do next. judgeFence
// and judgeMint decide it from one read of the head and nothing else, so
// every combination has a table test; Fence and Mint only act on it.
type verdict uint8

const (
	// Fencing.
	vClaim       verdict = iota + 1 // CAS the head to "fencing by me"
	vFindCut                        // fencing by me, no cut yet: find it
	vCutOnHead                      // the cut is recorded on the head: adopt it
	vCutOnRecord                    // the head moved on: the cut is sealed on the epoch record
	// Minting.
	vMintFirst // no head yet: epoch 1
	vMintNext  // mint the head's epoch + 1
	vAdoptOpen // our own open epoch (a mint whose reply was lost)
	vNotFenced // an earlier incarnation's epoch is open: settle it first
	// Either.
	vDeposed   // another writer owns the head: stop
	vNotMinted // the epoch asked about does not exist yet
)

// judgeFence decides how actor me fences epoch given the head h (ok false
// when there is none). own is a writer fencing its own epoch after a halt:
// then any sign of another actor on the head (a foreign fence, a settle, a
// later epoch) means a successor took over, and the writer is deposed. A
// successor claims the fence even over a recorded cut, so the writer's
// mint from its own fence fails.
//
// An incarnation of the chain's star settling it as a successor (a
// restart settles its own chain before minting) is deposed by any trace
// of a later incarnation on the head: an older process paused in its
// start must not fence the live epoch of the one that replaced it.
func judgeFence(h meta.Head, ok bool, epoch uint64, star, me string, own bool) verdict {
	if mine := incarnationOf(me, star); ok && mine > 0 && (incarnationOf(h.Owner, star) > mine || incarnationOf(h.Fencer, star) > mine) {
		return vDeposed
	}
	switch {
	case !ok || h.Epoch < epoch:
		return vNotMinted
	case h.Epoch > epoch:
		if own {
			return vDeposed
		}
		return vCutOnRecord
	}
	mineFence := h.State == meta.HeadFencing && h.Fencer == me
	switch {
	case mineFence && h.Cut != nil:
		return vCutOnHead
	case mineFence:
		return vFindCut
	case own && h.State == meta.HeadOpen && h.Owner == me:
		return vClaim
	case own:
		return vDeposed // fenced by another, settled, or not ours
	case h.State == meta.HeadSettled:
		return vCutOnHead
	default:
		return vClaim // open, or fencing by another: take it over
	}
}

// judgeMint decides whether incarnation me (of the chain's star) may mint
// on head h. Incarnations of one star are ordered: a later one supersedes
// every earlier one, so any trace of a later incarnation on the head (as
// owner or fencer) means me is deposed. An open epoch of an earlier
// incarnation must be settled first; a settled epoch of an earlier
// incarnation, or my own fence with its cut recorded, may be minted past.
func judgeMint(h meta.Head, ok bool, star, me string) verdict {
	if !ok {
		return vMintFirst
	}
	mine := incarnationOf(me, star)
	if incarnationOf(h.Owner, star) > mine || incarnationOf(h.Fencer, star) > mine {
		return vDeposed
	}
	switch h.State {
	case meta.HeadOpen:
		if h.Owner == me {
			return vAdoptOpen
		}
		return vNotFenced
	case meta.HeadFencing:
		switch {
		case h.Fencer == me && h.Cut != nil && h.Owner == me:
			return vMintNext // self-recovery: my own epoch, fenced to its cut
		case h.Fencer == me:
			// My own fence has not recorded its cut, or I fence an earlier
			// incarnation's epoch and must walk and settle it first.
			return vNotFenced
		case h.Owner == me:
			return vDeposed // a successor fences my epoch
		default:
			return vNotFenced // an earlier incarnation's epoch, being fenced
		}
	case meta.HeadSettled:
		if h.Owner == me {
			return vDeposed // somebody else settled my epoch
		}
		return vMintNext
	}
	return vDeposed // a state this build does not know: never write over it
}

// incarnationOf is n of an incarnation id "<star>:<n>", or 0 when id is
// not an incarnation of star (a peer star or the auditor fencing).
func incarnationOf(id, star string) uint64 {
	s, ok := strings.CutPrefix(id, star+":")
	if !ok {
		return 0
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0
	}
	return n
}
