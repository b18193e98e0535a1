package chainsim

import (
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
)

// occ is what one bucket holds at a slot's key, as a reader sees it now.
type occ uint8

const (
	occAbsent     occ = iota
	occFlight         // a valid flight copy of this epoch's writer
	occPoison         // a valid poison of this slot
	occUnreadable     // an envelope this build cannot decode (corrupt, newer version)
	occOther          // a valid envelope of anything else (a foreign occupant)
)

// classify reads one stored object's envelope.
func classify(data []byte, epoch, slot uint64, nonce format.Nonce) occ {
	if data == nil {
		return occAbsent
	}
	env, err := format.DecodeEnvelope(data)
	switch {
	case err != nil:
		return occUnreadable
	case env.Epoch != epoch || env.Slot != slot:
		return occOther
	case env.Kind == format.KindFlight && env.Nonce == nonce:
		return occFlight
	case env.Kind == format.KindPoison:
		return occPoison
	}
	return occOther
}

// decide is the fate a fence that never guesses reaches at a slot whose
// buckets hold occs, reaching only the live ones: false when it cannot
// decide until a bucket comes back. It is the fixed semantics (docs/design.md §7
// with the lead's rework): an unreadable occupant counts neither way; a
// verified flight copy in a live bucket rolls forward into the live empty
// buckets until W stand; only a slot with no flight copy anywhere
// reachable is poisoned, into the live empty buckets until K−W+1 stand.
// The atlas uses it to keep the liveness demand fair.
func decide(k, w int, occs []occ, live []bool) (chain.Fate, bool) {
	var flights, poisons, empty int
	for i, o := range occs {
		if !live[i] {
			continue
		}
		switch o {
		case occFlight:
			flights++
		case occPoison, occOther:
			poisons++
		case occAbsent:
			empty++
		}
	}
	switch {
	case flights >= w:
		return chain.Committed, true
	case poisons >= k-w+1:
		return chain.Dead, true
	case flights > 0:
		return chain.Committed, flights+empty >= w
	default:
		return chain.Dead, poisons+empty >= k-w+1
	}
}
