package node

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
)

// The delete fence (issue 26): a stream's appends are acknowledged from
// its leader's memory, with no metastore read, so a delete cannot stop a
// leader by writing a row. It stops it two ways:
//
//   - the leader re-checks the rows of every stream it leads a third of
//     the deletion-pending window apart (rowcheck.go) and stops leading a
//     stream deleted, replaced, or whose basin was deleted;
//   - before a name moves to a new stream id (createStream overwriting
//     the old row), the old id's lease is retired (retireLease): taken by
//     CAS as meta.Lease.Deleted, which no star takes again, once no live
//     star holds it, and with every earlier holder that may still write
//     (one presumed dead, cut off from the metastore) fenced through the
//     open gate. That is the fence: a leader cut off from the metastore
//     keeps acknowledging by design until it is fenced, and the name is
//     not reused before.

// retireLease retires deleted stream id's lease (see above). A live star
// other than this one holding it is a retryable 503: it stops within a
// row check. The stream's rows must already say it is deleted or
// replaced: a live stream's lease is never retired.
func (n *Node) retireLease(ctx context.Context, id, name string) error {
	for range maxCatalogAttempts {
		v, ver, d, err := n.judge(ctx, id)
		if err != nil {
			return n.storageErr("resolve lease", err)
		}
		if v.leased && (v.lease.Deleted || v.lease.Emptied) {
			if v.lease.Deleted && len(v.lease.Pending) > 0 {
				return n.gate(ctx, id, v.lease, ver) // a retire that stopped short
			}
			return nil
		}
		switch d.act {
		case claimHeld:
			n.unlead(id) // this incarnation stops first
		case claimForward:
			if !v.lease.Released {
				return api.Unavailable("the deleted stream %q is still led by star %s, which stops within %v; retry", name, d.target.Star, n.rowCheckEvery())
			}
		case claimWait, claimNoAddress:
			return api.Unavailable("the deleted stream %q is led by star %s, which cannot be judged yet; retry", name, v.lease.Star)
		}
		var prev *meta.Lease
		if v.leased {
			prev = &v.lease
		}
		next := leader.Successor(prev, meta.LeaseHolder{Star: meta.DeletedBy}, time.Now())
		next.Deleted = true
		// This incarnation stopped above: its chain needs no fence.
		next.Pending = slices.DeleteFunc(next.Pending, func(h meta.LeaseHolder) bool { return h == n.lease.me })
		nv, err := leader.Acquire(ctx, n.meta, id, next, ver)
		if errors.Is(err, leader.ErrLost) {
			if err := ctx.Err(); err != nil {
				return contextError(err)
			}
			continue
		}
		if err != nil {
			return n.storageErr("retire lease", err)
		}
		n.log.Info("retired the lease of a deleted stream", "stream", name, "id", id, "fenced", len(next.Pending))
		// Every earlier holder that may still write is fenced before the
		// name moves.
		return n.gate(ctx, id, next, nv)
	}
	return api.Unavailable("the lease of deleted stream %q kept changing; retry", name)
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
		n.log.Warn("stopped leading a deleted stream, but could not retire its lease (a re-create retires it)", "stream", name, "id", id, "err", err)
	}
}
