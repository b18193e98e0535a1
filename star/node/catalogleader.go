package node

import (
	"context"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
)

// catalogLeader is the node as the catalog's Leader: what a catalog
// change means for the streams this star leads.
type catalogLeader struct{ n *Node }

func (c catalogLeader) StopDeleted(ctx context.Context, id, name string) {
	c.n.stopDeleted(ctx, id, name)
}

func (c catalogLeader) RetireLease(ctx context.Context, id, name string) error {
	return c.n.retireLease(ctx, id, name)
}

func (c catalogLeader) TellPeers(ctx context.Context, basin string) { c.n.lease.TellPeers(ctx, basin) }

// Reconfigured applies a stream's new resolved config if it is led here:
// its timestamping at once; with reopen, a new storage class releases the
// stream, since an open stream's chain is pinned until it is next opened
// (a handoff to no one), so the next request opens it on the new class's
// chain, here or on a peer.
func (c catalogLeader) Reconfigured(ctx context.Context, id string, cfg api.EffectiveStreamConfig, reopen bool) {
	l := c.n.ledIfOpen(id)
	if l == nil {
		return
	}
	l.s.Reconfigure(facadeConfig(cfg))
	if reopen && meta.Class(cfg.StorageClass) != l.class {
		c.n.reopenOnClass(ctx, l, id)
	}
}

// reopenOnClass releases led stream l so that it is opened again on the
// chain of its new storage class. The config is stored whatever happens
// here: if the release fails or ctx ends first, the stream keeps its old
// chain until it is next opened (an idle release, a handoff, a restart).
func (n *Node) reopenOnClass(ctx context.Context, l *ledStream, id string) {
	if _, err := n.release(ctx, id, l, nil); err != nil {
		n.log.Warn("storage class change: the stream keeps its chain until it is next opened",
			"basin", l.key.Basin, "stream", l.name, "id", id, "from", l.class, "err", err)
		return
	}
	n.log.Info("storage class change: stream released to reopen on its new chain", "basin", l.key.Basin, "stream", l.name, "id", id, "from", l.class)
}
