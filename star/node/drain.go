package node

import (
	"context"

	"github.com/starlog/starlog/star/lead"
)

// DrainStatus is where a drain stands (lead.DrainStatus).
type DrainStatus = lead.DrainStatus

// Drain starts draining the star (idempotent): it takes no new leases
// (requests for streams it does not hold open get a retryable 503, so
// clients and forwarding peers retry on a star that takes them), its
// registry row says draining (still live: it keeps serving what it holds
// until each is released), and every stream it leads is released once
// the absorb has covered it, so successors open without a settle. Once it
// leads nothing it settles its own chains while it stands (decommission),
// and then its terminate gate opens. It returns at once; DrainStatus
// reports progress.
func (n *Node) Drain() DrainStatus {
	if n.drain.Begin() {
		n.log.Info("draining: taking no new leases, releasing every stream")
		n.drainWG.Go(func() { n.drain.Run(n.drainCtx, n.log, n.releaseAll, n.leading, n.settleOwn) })
	}
	return n.DrainStatus()
}

// DrainStatus reports the drain's progress.
func (n *Node) DrainStatus() DrainStatus { return n.drain.Status(n.leading()) }

// leading counts the streams open here.
func (n *Node) leading() int {
	n.mu.Lock()
	slots := make([]*ledSlot, 0, len(n.led))
	for _, s := range n.led {
		slots = append(slots, s)
	}
	n.mu.Unlock()
	c := 0
	for _, s := range slots {
		s.mu.Lock()
		if s.l != nil {
			c++
		}
		s.mu.Unlock()
	}
	return c
}

// Leave is the release step of a graceful close, run while the server
// still answers: the star takes no new lease from now on (as when
// draining) and releases every stream it leads, waiting for the releases.
// Requests that arrive meanwhile are forwarded to the successors, so they
// take over while this star finishes its remaining requests.
func (n *Node) Leave(ctx context.Context) (released, failed int) {
	n.drain.Refuse()
	return n.releaseAll(ctx)
}
