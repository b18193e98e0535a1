package lead

import (
	"context"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// The balancer spreads leadership across live stars (issue 6). Every
// Config.BalanceEvery, a star that is live (not draining, not a zombie)
// reads the star directory and its peers' registrations, and compares the
// streams it leads with the fair share, ⌈total leads / live stars⌉. Only a
// star above share+1 acts (the one-stream slack keeps stars from trading
// streams back and forth over rounding): it hands leads-share of its
// streams off, one at a time, each to the live star furthest below the
// share at that moment. No star sends a stream to a star at or above the
// share, so streams flow only from stars above share+1 to stars below the
// share, and rounds converge instead of trading streams back and forth.
//
// Counts: a star's own count is the streams open here now; a peer's is
// the Leads of its last heartbeat. A handed-off stream counts for its new
// leader once that star opens it, on the stream's next request; an idle
// stream nobody asks for counts for no star, which is fair (it is no
// load), so a star holding many idle streams may shed a few more of them
// over the next rounds than one round's count says.
//
// Which streams move: the ones with the smallest ids. Ids are random, so
// that is a deterministic pick spread over basins and names; a count
// balancer has no reason to prefer one stream over another.
//
// A failed handoff (the stream was being moved already, its wait timed
// out, the target went away) is logged and the round goes on with the next
// move; the next round recounts. Handoffs run under the node's drain
// context, so Close cancels one in flight before it releases the rest.

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

// Balancer runs the balancer's rounds, one at a time.
type Balancer struct {
	ls *Leadership
	// round serialises rounds (the loop's and Balance calls).
	round    sync.Mutex
	handoffs prometheus.Counter
}

// NewBalancer returns the balancer of this star; handoffs counts the
// streams it hands off.
func (ls *Leadership) NewBalancer(handoffs prometheus.Counter) *Balancer {
	return &Balancer{ls: ls, handoffs: handoffs}
}

// Round is one round: count, plan, hand off one stream at a time. may
// says whether this star gives streams away now (asked again before each
// move), mine lists the streams it leads that no handoff is moving, and
// handoff hands one stream to its target.
func (b *Balancer) Round(ctx context.Context, may func() bool, mine func() []string, handoff func(context.Context, BalanceMove) error) (int, error) {
	b.round.Lock()
	defer b.round.Unlock()
	if !may() {
		return 0, nil
	}
	peers, err := b.ls.livePeers(ctx)
	if err != nil {
		return 0, err
	}
	led := mine()
	moves, share := PlanBalance(led, peers)
	if len(moves) == 0 {
		return 0, nil
	}
	b.ls.log.Info("balance: leading more than the fair share; handing streams off",
		"leads", len(led), "share", share, "stars", len(peers)+1, "moves", len(moves))
	moved, failed := 0, 0
	for _, m := range moves {
		if ctx.Err() != nil || !may() {
			break
		}
		if err := handoff(ctx, m); err != nil {
			failed++
			b.ls.log.Warn("balance: handoff failed; moving on", "id", m.StreamID, "to", m.To, "err", err)
			continue
		}
		moved++
		b.handoffs.Inc()
	}
	b.ls.log.Info("balance: round done", "moved", moved, "failed", failed)
	return moved, ctx.Err()
}

// livePeers lists the other stars that take leases (LiveStars).
func (ls *Leadership) livePeers(ctx context.Context) ([]StarLoad, error) {
	all, err := ls.LiveStars(ctx)
	return slices.DeleteFunc(all, func(s StarLoad) bool { return s.Star == ls.me.Star }), err
}
