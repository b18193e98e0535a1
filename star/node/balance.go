package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/lead"
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

// balanceHandoffTimeout bounds one handoff of the balancer (its wait for
// the stream's pending appends and the absorb); on timeout the stream
// stays here and admits again.
const balanceHandoffTimeout = 10 * time.Second

// balancer is the node's balancer state.
type balancer struct {
	// round serialises rounds (the loop's and Balance calls).
	round    sync.Mutex
	handoffs prometheus.Counter
	loop     bgLoop
}

// startBalancer registers the balancer's metric and starts its loop when
// Config.BalanceEvery is positive.
func (n *Node) startBalancer() {
	b := &balancer{}
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "leader", Name: "balance_handoffs_total",
		Help: "Streams this star handed to a peer below the fair share (balancer).",
	})
	b.handoffs = registerShared(n, c, "balance_handoffs_total")
	n.balance = b
	if n.cfg.BalanceEvery <= 0 {
		return
	}
	b.loop.start(n.drainCtx, func(ctx context.Context) { n.balanceLoop(ctx, n.cfg.BalanceEvery) })
}

// stopBalance stops the balancer's loop and waits for it (idempotent).
func (n *Node) stopBalance() {
	if b := n.balance; b != nil {
		b.loop.halt()
	}
}

// balanceLoop runs a round every period (plus up to a quarter of it at
// random, so stars started together do not count at the same moment).
func (n *Node) balanceLoop(ctx context.Context, every time.Duration) {
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := n.balanceRound(ctx); err != nil && ctx.Err() == nil {
			n.log.Warn("balance: round failed", "err", err)
		}
		t.Reset(every + rand.N(every/4+1))
	}
}

// Balance runs one balancer round now and returns how many streams it
// handed off (the loop runs one every Config.BalanceEvery).
func (n *Node) Balance(ctx context.Context) (int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(n.drainCtx, cancel)()
	return n.balanceRound(ctx)
}

// balanceRound is one round: count, plan, hand off one stream at a time.
func (n *Node) balanceRound(ctx context.Context) (int, error) {
	n.balance.round.Lock()
	defer n.balance.round.Unlock()
	if !n.mayBalance() {
		return 0, nil
	}
	peers, err := n.livePeers(ctx)
	if err != nil {
		return 0, err
	}
	mine := n.ledForBalance()
	moves, share := lead.PlanBalance(mine, peers)
	if len(moves) == 0 {
		return 0, nil
	}
	n.log.Info("balance: leading more than the fair share; handing streams off",
		"leads", len(mine), "share", share, "stars", len(peers)+1, "moves", len(moves))
	moved, failed := 0, 0
	for _, m := range moves {
		if ctx.Err() != nil || !n.mayBalance() {
			break
		}
		if err := n.balanceHandoff(ctx, m); err != nil {
			failed++
			n.log.Warn("balance: handoff failed; moving on", "id", m.StreamID, "to", m.To, "err", err)
			continue
		}
		moved++
		n.balance.handoffs.Inc()
	}
	n.log.Info("balance: round done", "moved", moved, "failed", failed)
	return moved, ctx.Err()
}

// mayBalance is whether this star gives streams away: it is open, live
// (its heartbeat is recent and it is no zombie) and not draining (a drain
// releases everything anyway).
func (n *Node) mayBalance() bool {
	return !n.isClosed() && !n.draining.Load() && n.selfLive() == nil
}

// livePeers lists the other stars that take leases: in the directory,
// registered, state live (not draining), heartbeat younger than the
// dead-after bound, and with an address to forward to.
func (n *Node) livePeers(ctx context.Context) ([]lead.StarLoad, error) {
	all, err := n.lease.LiveStars(ctx)
	return slices.DeleteFunc(all, func(s lead.StarLoad) bool { return s.Star == n.cfg.StarID }), err
}

// LiveStars lists the ids of the stars that take leases (livePeers' rule,
// this star included when its own row passes it), in directory order:
// every star reading the same rows gets the same list, so work divided by
// it (Durable Streams subscriptions) has one owner.
func (n *Node) LiveStars(ctx context.Context) ([]string, error) {
	all, err := n.lease.LiveStars(ctx)
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(all))
	for i := range all {
		ids[i] = all[i].Star
	}
	return ids, nil
}

// ledForBalance lists the ids of the streams open here that no handoff is
// moving already.
func (n *Node) ledForBalance() []string {
	n.mu.Lock()
	ids := make([]string, 0, len(n.led))
	for id := range n.led {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	var out []string
	for _, id := range ids {
		if l := n.ledIfOpen(id); l != nil && l.movingErr() == nil {
			out = append(out, id)
		}
	}
	return out
}

// balanceHandoff hands m's stream to m.To through Handoff, which takes the
// stream's basin and name: its identity row names them.
func (n *Node) balanceHandoff(ctx context.Context, m lead.BalanceMove) error {
	k := meta.StreamMetaKey(m.StreamID)
	it, err := n.meta.Get(ctx, k.PK, k.SK)
	if err != nil {
		return fmt.Errorf("read the stream's identity row: %w", err)
	}
	var sm meta.StreamMeta
	if err := meta.Decode(it.Val, &sm); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, balanceHandoffTimeout)
	defer cancel()
	_, err = n.Handoff(ctx, sm.Basin, sm.Name, m.To)
	return err
}
