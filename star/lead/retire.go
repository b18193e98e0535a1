package lead

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/catalog"
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

// Retire retires deleted stream id's lease (see above). A live star
// other than this one holding it is a retryable 503: it stops within a
// row check. The stream's rows must already say it is deleted or
// replaced: a live stream's lease is never retired. unlead stops this
// incarnation leading the stream, for good, before its lease is taken.
func (ls *Leadership) Retire(ctx context.Context, id, name string, unlead func(id string)) error {
	for range catalog.MaxAttempts {
		v, ver, d, err := ls.judge(ctx, id)
		if err != nil {
			return ls.storageErr("resolve lease", err)
		}
		if v.leased && v.lease.Emptied {
			return nil
		}
		if v.leased && v.lease.Deleted {
			if len(v.lease.Pending) == 0 {
				return nil
			}
			// Holders left to fence: a retire that stopped short, or a
			// lease the janitor's reclamation retired in place.
			done, err := ls.fencePending(ctx, id, name, v.lease, ver, unlead)
			if done || err != nil {
				return err
			}
			continue
		}
		switch d.act {
		case claimHeld:
			unlead(id) // this incarnation stops first
		case claimForward:
			if !v.lease.Released {
				return api.Unavailable("the deleted stream %q is still led by star %s, which stops within %v; retry", name, d.target.Star, ls.cfg.RowCheckEvery)
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
		next.Pending = slices.DeleteFunc(next.Pending, func(h meta.LeaseHolder) bool { return h == ls.me })
		nv, err := leader.Acquire(ctx, ls.meta, id, next, ver)
		if errors.Is(err, leader.ErrLost) {
			ls.retiresLost.Inc()
			if err := ctx.Err(); err != nil {
				return catalog.ContextError(err)
			}
			continue
		}
		if err != nil {
			return ls.storageErr("retire lease", err)
		}
		ls.log.Info("retired the lease of a deleted stream", "stream", name, "id", id, "fenced", len(next.Pending))
		// Every earlier holder that may still write is fenced before the
		// name moves.
		return ls.Gate(ctx, id, next, nv)
	}
	return api.Unavailable("the lease of deleted stream %q kept changing; retry", name)
}

// fencePending fences the holders pending on deleted stream id's retired
// lease l (version ver): this star, if among them, stops and takes itself
// off by CAS (then done is false: judge the lease again); a live one makes
// a retryable 503 (it stops within a row check, and takes itself off); the
// others, judged gone as a takeover judges a holder (a stale one marked
// dead first, on this star's testimony), are fenced through the open gate.
func (ls *Leadership) fencePending(ctx context.Context, id, name string, l meta.Lease, ver int64, unlead func(string)) (done bool, err error) {
	if slices.Contains(l.Pending, ls.me) {
		unlead(id)
		next := l
		next.Pending = slices.DeleteFunc(slices.Clone(l.Pending), func(h meta.LeaseHolder) bool { return h == ls.me })
		_, err := leader.Acquire(ctx, ls.meta, id, next, ver)
		if errors.Is(err, leader.ErrLost) {
			ls.retiresLost.Inc()
		} else if err != nil {
			return false, ls.storageErr("retire lease", err)
		}
		return false, nil
	}
	for _, h := range l.Pending {
		gone, err := ls.holderGone(ctx, h)
		if err != nil {
			return false, ls.storageErr("judge lease holder", err)
		}
		if !gone {
			return false, api.Unavailable("the deleted stream %q may still be led by star %s, which stops within %v; retry", name, h.Star, ls.cfg.RowCheckEvery)
		}
	}
	return true, ls.Gate(ctx, id, l, ver)
}

// holderGone judges lease holder h as decideClaim judges a lease it holds:
// gone when dead, stopped, superseded or never registered; a stale one is
// marked dead first, on this star's testimony (leader.PresumeDead).
func (ls *Leadership) holderGone(ctx context.Context, h meta.LeaseHolder) (bool, error) {
	v := claimView{me: ls.me, lease: meta.Lease{LeaseHolder: h}, leased: true, deadAfter: ls.cfg.DeadAfter}
	var err error
	if v.reg, _, v.registered, err = leader.ReadRegistration(ctx, ls.meta, h.Star); err != nil {
		return false, err
	}
	v.now = time.Now()
	v.self = ls.witness(v.now, ls.cfg.DeadAfter)
	d := decideClaim(v)
	if d.act == claimMarkDead {
		r, _, _, err := leader.MarkPresumedDead(ctx, ls.meta, h.Star, []leader.Witness{v.self}, v.now, ls.cfg.DeadAfter)
		if err != nil {
			return false, err
		}
		v.reg, v.now = r, time.Now()
		d = decideClaim(v)
	}
	return d.act == claimAcquire, nil
}
