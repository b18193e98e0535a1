package lead

import "slices"

// StarLoad is a live star that takes leases and how many streams it leads.
type StarLoad struct {
	Star  string
	Leads int
}

// BalanceMove hands stream StreamID to star To.
type BalanceMove struct {
	StreamID, To string
}

// PlanBalance decides a round: this star leads the streams mine (ids),
// peers are the other live stars with their counts. share is ⌈total /
// stars⌉. It plans no move unless this star leads more than share+1; then
// it moves len(mine)-share streams, smallest ids first, each to the peer
// with the fewest leads (counting the moves planned before it; ties go to
// the smaller star id) while that peer is below the share.
func PlanBalance(mine []string, peers []StarLoad) (moves []BalanceMove, share int) {
	total := len(mine)
	for _, p := range peers {
		total += max(p.Leads, 0)
	}
	stars := len(peers) + 1
	share = (total + stars - 1) / stars
	if len(mine) <= share+1 {
		return nil, share
	}
	ids := slices.Clone(mine)
	slices.Sort(ids)
	load := slices.Clone(peers)
	for _, id := range ids[:len(ids)-share] {
		to := -1
		for i, p := range load {
			if p.Leads < share && (to < 0 || p.Leads < load[to].Leads || p.Leads == load[to].Leads && p.Star < load[to].Star) {
				to = i
			}
		}
		if to < 0 {
			break
		}
		load[to].Leads++
		moves = append(moves, BalanceMove{StreamID: id, To: load[to].Star})
	}
	return moves, share
}
