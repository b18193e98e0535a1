package auditjob

import (
	"context"
	"errors"
	"fmt"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/chainsettle"
)

// auditorID names the auditor in chain handles: it never mints, and on an
// epoch below the head its fence only adopts the recorded cut.
const auditorID = "auditor"

// ErrHeadEpoch refuses a chain-settle of a chain's current (mint head)
// epoch whose star may still write it: a live star's head epoch is
// deferred, never displaced (docs/design.md §9). Only the head of a star that is
// dead, stopped, superseded or closed with a settle marker is settled.
var ErrHeadEpoch = errors.New("auditjob: epoch is the mint head of a star that may still write it")

// SettleEpoch settles one halted epoch below its chain's mint head: the
// fence adopts the cut its writer recorded before minting the next epoch
// (a fence of an epoch below the head never claims the head), the walk
// feeds the committed slots above the checkpoint to the same absorb
// consumer the leader uses, the garbage window above the cut is made dead,
// and the epoch is marked settled. Every step is idempotent and
// CAS-guarded; a settled epoch is a no-op.
//
// The steps are chainsettle.Epoch's; SettleEpoch adds the guard. It is
// chainsettle.Chain restricted to one epoch below the head: chainsettle.Chain also
// fences the head epoch, which must not happen to a live star.
func SettleEpoch(ctx context.Context, st *settle.Stores, ch settle.ChainRef, epoch uint64) error {
	if st.Meta == nil || st.Objects == nil {
		return errors.New("auditjob: Stores needs Meta and Objects")
	}
	c := chain.New(ch.Star, ch.Class, auditorID, st.Meta, st.Objects)
	h, _, ok, err := c.Head(ctx)
	if err != nil {
		return fmt.Errorf("auditjob: chain-settle %s epoch %d: %w", ch, epoch, err)
	}
	if !ok {
		return fmt.Errorf("auditjob: chain-settle %s epoch %d: chain has no head", ch, epoch)
	}
	if epoch >= h.Epoch {
		return fmt.Errorf("chain-settle %s epoch %d (head %d): %w", ch, epoch, h.Epoch, ErrHeadEpoch)
	}
	rec, _, err := c.Epoch(ctx, epoch)
	if err != nil {
		return fmt.Errorf("auditjob: chain-settle %s: %w", ch, err)
	}
	if rec.Settled {
		return nil
	}
	abs := &absorb.Absorber{Star: ch.Star, Class: ch.Class, Meta: st.Meta,
		Rip: st.Config.WithDefaults().Ripening(ch.Class), UpdateEpoch: c.UpdateEpoch}
	if err := chainsettle.Epoch(ctx, c, abs, epoch); err != nil {
		return fmt.Errorf("auditjob: chain-settle: %w", err)
	}
	return nil
}

// SettleHead settles ch up to and including its mint head epoch, minted by
// owner, once it re-read that owner is gone (see headGone): the janitor's
// dead-star duty and its settling of a closed star's settle marker. An
// epoch the head has moved past since the job was queued is settled like
// any epoch below the head; a head minted since by a later incarnation is
// left alone (chainsettle.ChainThrough never fences above epoch). The chain's
// settle marker, if it names this epoch, is removed afterwards.
func SettleHead(ctx context.Context, st *settle.Stores, ch settle.ChainRef, epoch uint64, owner string) error {
	if st.Meta == nil || st.Objects == nil {
		return errors.New("auditjob: Stores needs Meta and Objects")
	}
	c := chain.New(ch.Star, ch.Class, auditorID, st.Meta, st.Objects)
	h, _, ok, err := c.Head(ctx)
	if err != nil {
		return fmt.Errorf("auditjob: chain-settle %s: %w", ch, err)
	}
	if !ok || h.Epoch < epoch {
		return fmt.Errorf("auditjob: chain-settle %s epoch %d: chain head is %d", ch, epoch, h.Epoch)
	}
	if h.Epoch == epoch && h.State != meta.HeadSettled {
		gone, why, err := headGone(ctx, st.Meta, ch, h)
		if err != nil {
			return fmt.Errorf("auditjob: chain-settle %s: %w", ch, err)
		}
		if !gone || h.Owner != owner {
			return fmt.Errorf("chain-settle %s epoch %d of %s (head owner %s): %w", ch, epoch, owner, h.Owner, ErrHeadEpoch)
		}
		st.Log().Info("chain-settle: settling the head of a star that is gone", "chain", ch.String(), "epoch", epoch, "owner", owner, "why", why)
	}
	abs := &absorb.Absorber{Star: ch.Star, Class: ch.Class, Meta: st.Meta,
		Rip: st.Config.WithDefaults().Ripening(ch.Class), UpdateEpoch: c.UpdateEpoch}
	if err := chainsettle.ChainThrough(ctx, c, abs, epoch); err != nil {
		return fmt.Errorf("auditjob: chain-settle: %w", err)
	}
	return settle.ClearDue(ctx, st.Meta, ch, epoch)
}

// headGone reports whether h's owner can no longer write h's epoch, and
// why: its star is marked dead or stopped at that incarnation or later, a
// later incarnation registered (it settles its own chain before it
// mints), or the owner left a settle marker for the epoch when it closed.
// A star that never registered counts as live.
func headGone(ctx context.Context, ms meta.Store, ch settle.ChainRef, h meta.Head) (bool, string, error) {
	inc, err := chain.ParseIncarnation(h.Owner, ch.Star)
	if err != nil {
		return false, "", err
	}
	reg, _, ok, err := leader.ReadRegistration(ctx, ms, ch.Star)
	if err != nil {
		return false, "", err
	}
	switch {
	case ok && reg.Incarnation > inc:
		return true, "superseded", nil
	case ok && reg.Incarnation == inc && (reg.State == meta.StarDead || reg.State == meta.StarStopped):
		return true, reg.State, nil
	}
	d, ok, err := settle.ReadDue(ctx, ms, ch)
	if err != nil {
		return false, "", err
	}
	if ok && d.Owner == h.Owner && d.Epoch == h.Epoch {
		return true, "settle marker", nil
	}
	return false, "", nil
}
