package chainsim

import (
	"testing"

	"github.com/starlog/starlog/shared/chain"
)

// decide is the fixed fence's verdict the atlas relies on: every row says
// why.
func TestDecide(t *testing.T) {
	const (
		A = occAbsent
		F = occFlight
		P = occPoison
		U = occUnreadable
	)
	up := []bool{true, true, true}
	b2down := []bool{true, true, false}
	for _, tc := range []struct {
		why   string
		occs  []occ
		live  []bool
		fate  chain.Fate
		known bool
	}{
		{"W flights stand", []occ{F, F, A}, up, chain.Committed, true},
		{"K−W+1 poisons stand", []occ{P, P, F}, up, chain.Dead, true},
		{"one flight rolls forward into the empty bucket", []occ{F, A, A}, b2down, chain.Committed, true},
		{"one flight, the other live bucket poisoned, the third down: wait for it", []occ{F, P, A}, b2down, chain.Committed, false},
		{"no flight anywhere reachable: poison the empty live buckets", []occ{A, A, A}, b2down, chain.Dead, true},
		{"an unreadable copy counts neither way", []occ{U, F, A}, up, chain.Committed, true},
		{"unreadable and a poison, no flight: poison the last", []occ{U, P, A}, up, chain.Dead, true},
		{"unreadable, flight, poison: nothing can be proven", []occ{U, F, P}, up, chain.Committed, false},
		{"a flight only in a down bucket is not seen", []occ{A, A, F}, b2down, chain.Dead, true},
	} {
		fate, known := decide(3, 2, tc.occs, tc.live)
		if known != tc.known || (known && fate != tc.fate) {
			t.Errorf("%s: decide = %v, %v; want %v, %v", tc.why, fate, known, tc.fate, tc.known)
		}
	}
}
