package node

import (
	"context"
	"time"
)

// DrainStatus is where a drain stands (GET /v1/starlog/drain).
type DrainStatus struct {
	Draining bool `json:"draining"`
	// Leading is how many streams this star still holds open.
	Leading int `json:"leading"`
	// ChainsSettled: the drained star settled its own chains (absorbed to
	// the head, fenced, probed, marked settled).
	ChainsSettled bool `json:"chains_settled"`
	// TerminateGate is open once the star drains, leads nothing and has
	// settled its chains: the instance may go (its graceful close then has
	// nothing to release or settle).
	TerminateGate bool `json:"terminate_gate_open"`
	// Error is the last failure of the drain's settle step (it retries).
	Error string `json:"error,omitempty"`
}

// drainRetry is how often a drain retries streams whose release failed.
const drainRetry = 500 * time.Millisecond

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
	if n.draining.CompareAndSwap(false, true) {
		n.log.Info("draining: taking no new leases, releasing every stream")
		n.drainWG.Add(1)
		go n.drainLoop()
	}
	return n.DrainStatus()
}

// DrainStatus reports the drain's progress.
func (n *Node) DrainStatus() DrainStatus {
	st := DrainStatus{Draining: n.draining.Load(), Leading: n.leading(), ChainsSettled: n.ownSettled.Load()}
	st.TerminateGate = st.Draining && st.Leading == 0 && st.ChainsSettled
	if err, _ := n.drainErr.Load().(string); err != "" && !st.ChainsSettled {
		st.Error = err
	}
	return st
}

// drainLoop releases every led stream until none is left or the star
// closes.
func (n *Node) drainLoop() {
	defer n.drainWG.Done()
	for {
		released, failed := n.releaseAll(n.drainCtx)
		if released > 0 || failed > 0 {
			n.log.Info("draining: released stream leases", "released", released, "failed", failed)
		}
		if n.leading() == 0 {
			if err := n.settleOwn(n.drainCtx); err != nil {
				if n.drainCtx.Err() != nil {
					return
				}
				n.drainErr.Store(err.Error())
				n.log.Warn("drained, but settling this star's own chains failed; retrying", "err", err)
			} else {
				n.ownSettled.Store(true)
				n.log.Info("drained: this star leads no stream and its chains are settled; its terminate gate is open")
				return
			}
		}
		select {
		case <-n.drainCtx.Done():
			return
		case <-time.After(drainRetry):
		}
	}
}

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

// drainingErr refuses a new lease of stream id while draining. It is a
// *NotLeaderError naming no leader, so a forwarding peer forgets this star
// and resolves the lease itself, and a client retries.
func (n *Node) drainingErr(id string) error {
	if !n.draining.Load() {
		return nil
	}
	return &NotLeaderError{StreamID: id}
}

// Leave is the release step of a graceful close, run while the server
// still answers: the star takes no new lease from now on (as when
// draining) and releases every stream it leads, waiting for the releases.
// Requests that arrive meanwhile are forwarded to the successors, so they
// take over while this star finishes its remaining requests.
func (n *Node) Leave(ctx context.Context) (released, failed int) {
	n.draining.Store(true)
	return n.releaseAll(ctx)
}
