package lead

import (
	"context"
	"log/slog"
	"sync/atomic"
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

// Drain is a star's drain: once begun, the star takes no new lease,
// releases every stream it leads and then settles its own chains
// (decommission). The zero value is a star not draining.
type Drain struct {
	draining atomic.Bool
	// ownSettled: the drain settled this star's chains; err is the last
	// error of that step.
	ownSettled atomic.Bool
	err        atomic.Value
}

// Begin starts the drain; false when it had begun already.
func (d *Drain) Begin() bool { return d.draining.CompareAndSwap(false, true) }

// Refuse makes the star take no new lease from now on, as when draining
// (a graceful close's release step), without the drain's loop.
func (d *Drain) Refuse() { d.draining.Store(true) }

// Draining reports whether the star takes no new lease.
func (d *Drain) Draining() bool { return d.draining.Load() }

// Decommissioned reports whether the drain settled every chain: the stop
// that follows is a decommission.
func (d *Drain) Decommissioned() bool { return d.draining.Load() && d.ownSettled.Load() }

// Status reports the drain's progress, leading streams still open here.
func (d *Drain) Status(leading int) DrainStatus {
	st := DrainStatus{Draining: d.draining.Load(), Leading: leading, ChainsSettled: d.ownSettled.Load()}
	st.TerminateGate = st.Draining && st.Leading == 0 && st.ChainsSettled
	if err, _ := d.err.Load().(string); err != "" && !st.ChainsSettled {
		st.Error = err
	}
	return st
}

// Refusal refuses a new lease of stream id while draining. It is a
// *NotLeaderError naming no leader, so a forwarding peer forgets this star
// and resolves the lease itself, and a client retries.
func (d *Drain) Refusal(id string) error {
	if !d.draining.Load() {
		return nil
	}
	return &NotLeaderError{StreamID: id}
}

// Run releases every led stream (release) until none is left (leading),
// then settles the star's own chains (settleOwn), retrying, until done or
// ctx ends.
func (d *Drain) Run(ctx context.Context, log *slog.Logger, release func(context.Context) (released, failed int), leading func() int, settleOwn func(context.Context) error) {
	for {
		released, failed := release(ctx)
		if released > 0 || failed > 0 {
			log.Info("draining: released stream leases", "released", released, "failed", failed)
		}
		if leading() == 0 {
			if err := settleOwn(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				d.err.Store(err.Error())
				log.Warn("drained, but settling this star's own chains failed; retrying", "err", err)
			} else {
				d.ownSettled.Store(true)
				log.Info("drained: this star leads no stream and its chains are settled; its terminate gate is open")
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(drainRetry):
		}
	}
}
