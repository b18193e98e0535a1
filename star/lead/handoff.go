package lead

import (
	"context"
	"errors"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
)

// A handoff (docs/design.md §9, no fence) is the node's to run on the
// stream it holds open; who may receive the stream and how its lease is
// released are decided here.

// HandoffTarget names the star to that a handoff gives a stream to, for
// forwarding once it is released: a live star taking leases (state live,
// beating, with an address), never this one. The caller fills in the
// stream id.
func (ls *Leadership) HandoffTarget(ctx context.Context, to string) (*NotLeaderError, error) {
	if to == ls.me.Star {
		return nil, api.Invalid("star %q already leads the streams it serves; name another star", to)
	}
	reg, _, ok, err := leader.ReadRegistration(ctx, ls.meta, to)
	if err != nil {
		return nil, ls.storageErr("read target registration", err)
	}
	if !ok || reg.State != meta.StarLive || !leader.Live(reg, reg.Incarnation, time.Now(), ls.cfg.DeadAfter) || reg.Address == "" {
		return nil, api.Invalid("star %q is not a live star taking leases", to)
	}
	return &NotLeaderError{Leader: meta.LeaseHolder{Star: to, Incarnation: reg.Incarnation}, Address: reg.Address}, nil
}

// Release releases this incarnation's lease of stream id with frontier,
// the seq its rows now cover, handing it to target (nil: to whoever gets
// the next request), whose address is remembered as the stream's leader
// whatever the outcome: after an uncertain release a peer may already
// hold the lease. The caller drops the stream either way.
func (ls *Leadership) Release(ctx context.Context, id, name string, frontier uint64, target *NotLeaderError) error {
	to := ""
	if target != nil {
		to = target.Leader.Star
	}
	err := leader.Release(ctx, ls.meta, id, ls.me, frontier, to)
	if target != nil {
		ls.RememberForward(target)
	}
	if errors.Is(err, leader.ErrNotHolder) {
		return api.Unavailable("this star lost the lease of stream %q during the handoff", name)
	}
	if err != nil {
		return ls.storageErr("release lease", err)
	}
	return nil
}
