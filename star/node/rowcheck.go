package node

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
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

// checkLedRows runs one row check, of the streams of basin only ("": of
// every basin), and returns how many streams it stopped.
func (n *Node) checkLedRows(ctx context.Context, only string) int {
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
		if l := s.l; l != nil && (only == "" || l.key.basin == only) {
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
	// In a fixed order (basins by name, their streams by id), so a
	// simulation that schedules the reads replays the same check.
	for _, basin := range slices.Sorted(maps.Keys(byBasin)) {
		led := byBasin[basin]
		slices.SortFunc(led, func(a, b *ledStream) int { return strings.Compare(ids[a], ids[b]) })
		b, err := n.fetchBasin(ctx, basin)
		if err != nil {
			continue // judged at the next check
		}
		for _, l := range led {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				id := ids[l]
				e, err := n.fetchStream(ctx, l.key)
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

// tellPeersTimeout bounds a basin delete's wait for one peer's answer.
const tellPeersTimeout = 2 * time.Second

// tellPeers asks every other live star to run the row check of a basin
// this star deleted (POST SettlePath {basin}), and waits for their answers
// (2 s each at most, all at once): a reachable peer stops leading the
// basin's streams before the delete answers. Best effort: a peer that does
// not answer stops at its next row check, and a re-create fences it
// (retireLease).
func (n *Node) tellPeers(ctx context.Context, basin string) {
	ids, err := leader.Stars(ctx, n.meta)
	if err != nil {
		n.log.Warn("basin delete: list peers to tell", "basin", basin, "err", err)
		return
	}
	body, _ := json.Marshal(SettleRequest{Basin: basin})
	client := &http.Client{Timeout: tellPeersTimeout, Transport: &http.Transport{TLSClientConfig: n.cfg.PeerTLS}}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	for _, id := range ids {
		if id == n.cfg.StarID {
			continue
		}
		reg, _, ok, err := leader.ReadRegistration(ctx, n.meta, id)
		if err != nil || !ok || reg.Address == "" || !leader.Live(reg, reg.Incarnation, time.Now(), n.cfg.DeadAfter) {
			continue
		}
		wg.Go(func() {
			if err := nudge(ctx, client, reg.Address, body, n.peerHdr); err != nil {
				n.log.Warn("basin delete: a peer was not told (it stops at its next row check)", "basin", basin, "peer", id, "err", err)
			}
		})
	}
	wg.Wait()
}
