package node

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
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
			n.checkLedRows(rctx)
			cancel()
		}
	})
}

// checkLedRows runs one row check and returns how many streams it stopped.
func (n *Node) checkLedRows(ctx context.Context) int {
	byBasin := map[string][]*ledStream{}
	ids := map[*ledStream]string{}
	n.mu.Lock()
	slots := make(map[string]*ledSlot, len(n.led))
	for id, s := range n.led {
		slots[id] = s
	}
	n.mu.Unlock()
	for id, s := range slots {
		s.mu.Lock()
		if l := s.l; l != nil {
			byBasin[l.key.basin] = append(byBasin[l.key.basin], l)
			ids[l] = id
		}
		s.mu.Unlock()
	}
	var (
		stopped atomic.Int64
		wg      sync.WaitGroup
		sem     = make(chan struct{}, rowCheckReads)
	)
	for basin, led := range byBasin {
		b, err := n.fetchBasin(ctx, basin)
		if err != nil {
			continue // judged at the next check
		}
		for _, l := range led {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				id := ids[l]
				e, err := n.readStream(ctx, l.key)
				if err != nil || rowsLive(b, e, id, n.cfg.DeletionPending, n.now()) {
					return
				}
				n.log.Info("row check: stopped leading a stream deleted or replaced elsewhere", "basin", basin, "stream", l.name, "id", id)
				n.stopDeleted(ctx, id, l.name)
				n.catalog.stopped.Inc()
				stopped.Add(1)
			})
		}
	}
	wg.Wait()
	return int(stopped.Load())
}

// rowCheckReads bounds the row check's reads in flight, so a star leading
// many streams checks them all within a period (10,000 streams at 5 ms a
// read: about 3 s).
const rowCheckReads = 16

// rowsLive says whether basin row b and stream row e (nil: none) still
// make stream id live: the basin alive, the name row naming id in it, not
// deleted.
func rowsLive(b *basinEntry, e *streamEntry, id string, pending time.Duration, now time.Time) bool {
	return b != nil && e != nil && lifecycleOf(b.row.DeletedAt, pending, now) == alive &&
		e.row.ID == id && e.row.BasinID == b.row.ID && e.row.DeletedAt == nil
}
