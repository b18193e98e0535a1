package node

import (
	"context"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/catalog"
)

// The row check: a star re-reads the basin and stream rows of every
// stream it leads, rowCheckEvery apart, and stops leading (and retires the
// lease of) a stream that was deleted or replaced, or whose basin was
// deleted or replaced, by a request served elsewhere (a basin delete is
// served where it lands; a stream delete reaches the leader only when the
// leader lookup finds it). A connected leader so stops within one period
// plus one read's bound (rowCheckEvery, below), a third of the
// deletion-pending window: long before the name can be created again.
// A read that fails leaves the stream led (a metastore outage does not
// stop appends); what keeps a cut-off leader's acks out of a reused name
// is retireLease (retire.go).

// rowCheckEvery is the row check's period and the bound of its reads.
func (n *Node) rowCheckEvery() time.Duration { return max(n.cfg.DeletionPending/3, time.Millisecond) }

// startRowCheck starts the row check's loop.
func (n *Node) startRowCheck() {
	n.rowLoop.start(n.drainCtx, func(ctx context.Context) {
		every := n.rowCheckEvery()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rctx, cancel := context.WithTimeout(ctx, every)
			n.checkLedRows(rctx, "")
			n.retryRetires(rctx)
			cancel()
		}
	})
}

// checkLedRows runs one row check (catalog.CheckRows), of the streams of
// basin only ("": of every basin), and returns how many streams it
// stopped.
func (n *Node) checkLedRows(ctx context.Context, only string) int {
	n.mu.Lock()
	slots := make(map[string]*ledSlot, len(n.led))
	for id, s := range n.led {
		slots[id] = s
	}
	n.mu.Unlock()
	var led []catalog.Led
	for id, s := range slots {
		s.mu.Lock()
		if l := s.l; l != nil && (only == "" || l.key.Basin == only) {
			led = append(led, catalog.Led{ID: id, Key: l.key})
		}
		s.mu.Unlock()
	}
	return n.cat.CheckRows(ctx, led, func(l catalog.Led) { n.stopDeleted(ctx, l.ID, l.Key.Name) })
}

// RecheckBasin runs the row check of basin's streams now, at a peer's word
// that it deleted the basin (tellPeers): the streams of it led here stop
// before this returns, bounded by one row-check period.
func (n *Node) RecheckBasin(ctx context.Context, basin string) error {
	if err := api.ValidateBasinName(basin); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, n.rowCheckEvery())
	defer cancel()
	if stopped := n.checkLedRows(ctx, basin); stopped > 0 {
		n.log.Info("a peer deleted a basin: stopped leading its streams", "basin", basin, "streams", stopped)
	}
	return nil
}
