package node

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/lead"
)

// The balancer (star/lead's Balancer: its rule, plan and round) runs here
// on a loop every Config.BalanceEvery; its handoffs run under the node's
// drain context, so Close cancels one in flight before it releases the
// rest.

// balanceHandoffTimeout bounds one handoff of the balancer (its wait for
// the stream's pending appends and the absorb); on timeout the stream
// stays here and admits again.
const balanceHandoffTimeout = 10 * time.Second

// balancer is the node's balancer state.
type balancer struct {
	rounds *lead.Balancer
	loop   bgLoop
}

// startBalancer registers the balancer's metric and starts its loop when
// Config.BalanceEvery is positive.
func (n *Node) startBalancer() {
	b := &balancer{}
	c := prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "leader", Name: "balance_handoffs_total",
		Help: "Streams this star handed to a peer below the fair share (balancer).",
	})
	b.rounds = n.lease.NewBalancer(registerShared(n, c, "balance_handoffs_total"))
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

// balanceRound is one round of the balancer (lead.Balancer.Round).
func (n *Node) balanceRound(ctx context.Context) (int, error) {
	return n.balance.rounds.Round(ctx, n.mayBalance, n.ledForBalance, n.balanceHandoff)
}

// mayBalance is whether this star gives streams away: it is open, live
// (its heartbeat is recent and it is no zombie) and not draining (a drain
// releases everything anyway).
func (n *Node) mayBalance() bool {
	return !n.isClosed() && !n.drain.Draining() && n.selfLive() == nil
}

// LiveStars lists the ids of the stars that take leases (lead.LiveStars,
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
