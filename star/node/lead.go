package node

import (
	"context"
	"sync"
	"sync/atomic"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/streams"
)

// ledStream is a stream this star leads: its facade joined to the loglet
// of its storage class. The class is pinned while the stream stays open
// here: a reconfigured storage class applies the next time a star opens
// the stream, because moving a live stream between chains would need its
// unabsorbed tail window covered first (a handoff, DESIGN §9).
type ledStream struct {
	s      *streams.Stream
	name   string
	class  meta.Class
	loglet *loglet.Loglet
	// deleted ends sessions still holding the stream after its delete.
	deleted atomic.Bool
}

// gone is the error of a session on a stream deleted under it.
func (l *ledStream) gone() error {
	if l.deleted.Load() {
		return api.StreamDeletionPending("stream %q is being deleted", l.name)
	}
	return nil
}

// ledSlot opens a stream at most once; deleted stays set so a request that
// raced the delete cannot open a second facade for the same stream id.
type ledSlot struct {
	mu      sync.Mutex
	l       *ledStream
	deleted bool
}

// lead returns the led stream for e, opening it on first use at its
// durable tail (streams.Open reads the greatest row; loglet.Open settled
// every earlier epoch first, so that row covers every acknowledged record).
//
// This is the one leadership check. With one star, this star leads every
// stream. Multi-star leases (DESIGN §9) extend here: acquire
// stream#<id>/lease by CAS for an unled stream, pass the open gate, or
// answer with the leader to forward to.
func (n *Node) lead(ctx context.Context, b *basinEntry, e *streamEntry) (*ledStream, error) {
	id := e.row.ID
	n.mu.Lock()
	slot := n.led[id]
	if slot == nil {
		slot = &ledSlot{}
		n.led[id] = slot
	}
	n.mu.Unlock()

	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.deleted {
		return nil, api.StreamDeletionPending("stream %q is being deleted", e.key.name)
	}
	if slot.l != nil {
		return slot.l, nil
	}
	resolved := e.row.Config.Resolve(b.row.Config.DefaultStreamConfig)
	class := meta.Class(resolved.StorageClass)
	l := n.loglets[class]
	if l == nil {
		return nil, api.Other("no loglet for storage class %q", class)
	}
	s, err := streams.Open(ctx, n.meta, l, id, class, facadeConfig(resolved))
	if err != nil {
		return nil, n.storageErr("open stream", err)
	}
	slot.l = &ledStream{s: s, name: e.key.name, class: class, loglet: l}
	n.log.Debug("leading stream", "basin", e.key.basin, "stream", e.key.name, "id", id, "class", class, "tail", s.Tail().SeqNum)
	return slot.l, nil
}

// ledIfOpen returns the led stream of id if it is open here.
func (n *Node) ledIfOpen(id string) *ledStream {
	n.mu.Lock()
	slot := n.led[id]
	n.mu.Unlock()
	if slot == nil {
		return nil
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	return slot.l
}

// unlead stops leading a deleted stream for good.
func (n *Node) unlead(id string) {
	n.mu.Lock()
	slot := n.led[id]
	if slot == nil {
		slot = &ledSlot{}
		n.led[id] = slot
	}
	n.mu.Unlock()
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.l != nil {
		slot.l.deleted.Store(true)
		slot.l.loglet.Absorber().Forget(id)
	}
	slot.l, slot.deleted = nil, true
}

// facadeConfig is the facade's part of a resolved stream config.
func facadeConfig(c api.EffectiveStreamConfig) facade.Config {
	mode := facade.ClientPrefer
	switch c.TimestampingMode {
	case api.ClientRequire:
		mode = facade.ClientRequire
	case api.Arrival:
		mode = facade.Arrival
	}
	return facade.Config{Mode: mode, Uncapped: c.Uncapped}
}
