package settle

import (
	"context"
	"errors"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
)

// The rules of an epoch record's cursors and lifecycle that both the
// planner (shared/settle/plan's PlanOf: is a trim-check due?) and the trim-check
// (shared/reclaim: what may it delete?) read.

// DueTrim is how far the epoch may be trimmed at now: the greatest
// recorded rewrite that has waited out the grace. Pure.
func DueTrim(e meta.Epoch, now time.Time, grace time.Duration) (uint64, bool) {
	var upto uint64
	ok := false
	for _, rw := range e.Rewrites {
		if rw.At <= millis(now.Add(-grace)) && rw.Upto > upto {
			upto, ok = rw.Upto, true
		}
	}
	return min(upto, e.Rewritten), ok
}

// GarbageDue reports a settled epoch trimmed to its cut whose garbage
// window the trim has not reaped yet (chain.Trim reaps it). Pure.
func GarbageDue(e meta.Epoch) bool {
	return e.Settled && e.Cut != nil && e.Trimmed >= *e.Cut && !e.Reaped
}

// StaleRewrites reports recorded rewrites the trim has passed. Pure.
func StaleRewrites(e meta.Epoch) bool {
	for _, rw := range e.Rewrites {
		if rw.Upto <= e.Trimmed {
			return true
		}
	}
	return false
}

// CollectDue reports whether a chain's trim-check should try to collect
// its garbage: every epoch record of it is spent. Pure.
func CollectDue(epochs []meta.Epoch) bool {
	for _, e := range epochs {
		if !Spent(e) {
			return false
		}
	}
	return len(epochs) > 0
}

// Decommissioned reads ch's star's registry row and mint head and reports
// whether the chain's garbage may be collected, with the head.
func Decommissioned(ctx context.Context, st *Stores, c *chain.Chain, ch ChainRef) (meta.Head, bool, error) {
	k := meta.RegistryKey(ch.Star)
	it, err := st.Meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return meta.Head{}, false, nil
	}
	if err != nil {
		return meta.Head{}, false, err
	}
	var reg meta.Registration
	if err := meta.Decode(it.Val, &reg); err != nil {
		return meta.Head{}, false, err
	}
	h, _, ok, err := c.Head(ctx)
	if err != nil || !ok {
		return h, false, err
	}
	return h, Collectible(reg, h, ch.Star), nil
}

// Collectible reports whether a chain with head h may lose its garbage,
// its star's registration being reg: the star stopped after a
// decommission, and the head is settled and was minted by that
// incarnation or an earlier one. Pure.
func Collectible(reg meta.Registration, h meta.Head, star string) bool {
	if reg.State != meta.StarStopped || !reg.Decommissioned || h.State != meta.HeadSettled {
		return false
	}
	n, err := chain.ParseIncarnation(h.Owner, star)
	return err == nil && n <= reg.Incarnation
}

// Spent reports whether epoch e's record and garbage window may go: it is
// settled, trimmed to its cut and reaped. Pure.
func Spent(e meta.Epoch) bool {
	return e.Settled && e.Cut != nil && e.Trimmed >= *e.Cut && e.Reaped
}
