package node

import (
	"context"
	"errors"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/lead"
	"github.com/starlog/starlog/star/loglet"
)

// The node's side of leadership (star/lead holds the lease rules, the
// registry, the forward cache and the settle runner): whether this
// incarnation may lead at all, and what leading a stream means for the
// slots it holds.

// NotLeaderError says another live star leads the stream (lead.NotLeaderError).
type NotLeaderError = lead.NotLeaderError

// Forwarded marks ctx as a request another star forwarded here
// (lead.Forwarded).
func Forwarded(ctx context.Context) context.Context { return lead.Forwarded(ctx) }

// Registry states (docs/design.md §5: live, draining, dead). A star that shuts
// down cleanly writes stopped, so peers need not wait for its heartbeat to
// age.
const (
	StateLive     = meta.StarLive
	StateDraining = meta.StarDraining
	StateStopped  = meta.StarStopped
	StateDead     = meta.StarDead
)

// Registration is the value of the registry row star#<id>/reg.
type Registration = meta.Registration

// SettlePath is the internal endpoint a closing star nudges its peers on
// (lead.SettlePath).
const SettlePath = lead.SettlePath

// SettleRequest is lead.SettleRequest.
type SettleRequest = lead.SettleRequest

// zombie is the permanent loss of leadership of this incarnation: a later
// incarnation of this star id registered, or peers marked it dead, or a
// successor fenced one of its chains. Only a restart (a new incarnation)
// leads again.
func (n *Node) zombie() error {
	if n.lease.Superseded() {
		return api.Unavailable("this star was presumed dead by its peers or superseded; it leads no stream until restarted")
	}
	for class, l := range n.loglets {
		if errors.Is(l.Err(), loglet.ErrDeposed) {
			return api.Unavailable("this star's %s chain was fenced by a successor; it leads no stream until restarted", class)
		}
	}
	return nil
}

// selfLive is nil while this star's heartbeat is recent: it is no zombie
// and its last heartbeat was written less than half the dead-after bound
// ago, so it yields before any peer can presume it dead (the margin
// absorbs clock rate differences and pauses). It guards only what this
// star answers from its own memory (check-tail, the tail window and tail
// of reads, the 412s of appends: fromMemory) and what it starts (a new
// lease, a balancer round). Accepted appends do not use it: a cut-off
// star may go on acknowledging, because a successor fences its chain
// before it opens a stream, so the next slot this star writes meets
// poison and it is deposed, and every ack it released lies below the
// cut. An answer from memory meets no poison, though, and would report a
// stale tail after a successor took over: that, not safety of acks, is
// what the clock guard is for.
func (n *Node) selfLive() error {
	if err := n.zombie(); err != nil {
		return err
	}
	if d, stale := n.beatStale(); stale {
		return api.Unavailable("this star has not renewed its registration for %v; retry", d)
	}
	return nil
}

// beatStale reports whether half the dead-after bound has passed since
// this star's last heartbeat was written (the clock guard), and how long.
func (n *Node) beatStale() (time.Duration, bool) {
	d := n.lease.SinceBeat()
	return d.Truncate(time.Millisecond), d >= n.cfg.DeadAfter/2
}

// LeaderOf names the live peer that leads a stream, for requests that
// change a stream its leader holds open (reconfigure, delete): they are
// forwarded so the leader applies them to its facade at once. It is nil
// when the stream is open here, unled, released, led by a star that is
// not live, or missing; the request then runs here.
func (n *Node) LeaderOf(ctx context.Context, basin, name string) *NotLeaderError {
	if api.ValidateStreamName(name) != nil {
		return nil
	}
	b, err := n.cat.LiveBasin(ctx, basin)
	if err != nil {
		return nil
	}
	_, e, err := n.cat.Stream(ctx, b, basin, name)
	if err != nil || e == nil {
		return nil
	}
	id := e.Row.ID
	if n.ledIfOpen(id) != nil {
		return nil
	}
	return n.lease.LeaderNow(ctx, id)
}

// ForgetLeader drops what this star remembers about who leads streamID,
// so the next request resolves the lease (a forward failed, or the target
// said it is not the leader).
func (n *Node) ForgetLeader(streamID string) { n.lease.ForgetForward(streamID) }

// retireLease retires deleted stream id's lease (lead.Retire), this
// incarnation first ceasing to lead it.
func (n *Node) retireLease(ctx context.Context, id, name string) error {
	return n.lease.Retire(ctx, id, name, n.unlead)
}

// stopDeleted stops leading deleted stream id here for good and, if this
// star led it, retires its lease so a re-create need not wait for it.
func (n *Node) stopDeleted(ctx context.Context, id, name string) {
	wasLed := n.ledIfOpen(id) != nil
	n.unlead(id)
	if !wasLed {
		return
	}
	if err := n.retireLease(ctx, id, name); err != nil {
		n.log.Warn("stopped leading a deleted stream, but could not retire its lease yet (the row check retries)", "stream", name, "id", id, "err", err)
		n.mu.Lock()
		n.unretired[id] = name
		n.mu.Unlock()
	}
}

// retryRetires retries the lease retires stopDeleted could not finish: a
// create of the name waits for this star while its lease names it.
func (n *Node) retryRetires(ctx context.Context) {
	n.mu.Lock()
	todo := make(map[string]string, len(n.unretired))
	for id, name := range n.unretired {
		todo[id] = name
	}
	n.mu.Unlock()
	for id, name := range todo {
		if err := n.retireLease(ctx, id, name); err != nil {
			continue
		}
		n.mu.Lock()
		delete(n.unretired, id)
		n.mu.Unlock()
	}
}

// Stars lists every star in the registry (star status; lead.Stars).
func (n *Node) Stars(ctx context.Context) ([]lead.RegisteredStar, error) {
	return lead.Stars(ctx, n.meta, n.cfg.DeadAfter)
}
