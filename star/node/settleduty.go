package node

import (
	"context"
	"fmt"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle/chainsettle"
)

// The settle duties of a star leaving (docs/design.md §9): a graceful close
// leaves durable settle markers for its unsettled chains and nudges its
// peers to settle them (lead.LeaveSettleMarkers, lead.NudgePeers); a
// decommission settles them itself while it stands (settleOwn). A peer's
// nudge lands in SettleFor.

// SettleFor starts settling both chains of incarnation inc of star (and
// its earlier incarnations) in the star-local settle runner, joining a run
// already going, and returns without waiting: a nudge from a closing peer,
// so settlement starts before the first open of one of its streams has to
// wait for it. A head minted by a later incarnation is left alone.
func (n *Node) SettleFor(star string, inc uint64) error {
	if err := ValidateStarID(star); err != nil {
		return api.Invalid("settle request: %v", err)
	}
	if star == n.cfg.StarID {
		return api.Invalid("settle request: star %s settles its own chains when it starts", star)
	}
	if err := n.lease.StartSettle(star, inc); err != nil {
		return api.Unavailable("this star is closing")
	}
	n.log.Info("settling a closed peer's chains", "peer", star, "incarnation", inc)
	return nil
}

// settleOwn is decommission's last step: a drained star leads nothing and
// will never append again, so it absorbs each loglet to the head, stops
// it, and settles its own chains while it stands (fence, walk, probe, mark
// settled), so the terminate gate opens on a star with no unsettled epoch.
func (n *Node) settleOwn(ctx context.Context) error {
	me := chain.Incarnation(n.cfg.StarID, n.regn.Incarnation)
	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		l := n.loglets[class]
		if l == nil {
			continue
		}
		if err := l.AwaitAbsorbed(ctx); err != nil {
			return err
		}
		l.Close()
		ch := chain.New(n.cfg.StarID, class, me, n.meta, n.objects)
		abs := &absorb.Absorber{Star: n.cfg.StarID, Class: class, Meta: n.meta, Rip: n.cfg.Ripening(class), UpdateEpoch: ch.UpdateEpoch}
		if err := chainsettle.ChainThrough(ctx, ch, abs, l.Epoch()); err != nil {
			return fmt.Errorf("decommission: settle own %s chain: %w", class, err)
		}
	}
	return nil
}
