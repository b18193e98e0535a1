package auditjob

import (
	"context"
	"errors"
	"fmt"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/settle"
)

// auditorID names the auditor in chain handles: it never mints, and on an
// epoch below the head its fence only adopts the recorded cut.
const auditorID = "auditor"

// ErrHeadEpoch refuses a chain-settle of a chain's current (mint head)
// epoch: a live star's head epoch is deferred, never displaced (DESIGN §9).
// Settling a dead star's whole chain is the janitor's dead-star duty, which
// does not exist yet.
var ErrHeadEpoch = errors.New("auditjob: epoch is its chain's mint head; it is never settled from a queue")

// SettleEpoch settles one halted epoch below its chain's mint head: the
// fence adopts the cut its writer recorded before minting the next epoch
// (a fence of an epoch below the head never claims the head), the walk
// feeds the committed slots above the checkpoint to the same absorb
// consumer the leader uses, the garbage window above the cut is made dead,
// and the epoch is marked settled. Every step is idempotent and
// CAS-guarded; a settled epoch is a no-op.
//
// The steps are settle.Epoch's; SettleEpoch adds the guard. It is
// settle.Chain restricted to one epoch below the head: settle.Chain also
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
	if err := settle.Epoch(ctx, c, abs, epoch); err != nil {
		return fmt.Errorf("auditjob: chain-settle: %w", err)
	}
	return nil
}
