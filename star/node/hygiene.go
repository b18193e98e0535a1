package node

import (
	"github.com/starlog/starlog/star/node/config"

	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/catalog"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/producer"
)

// A rejected request leaves nothing behind (issue 13 item 10): a missing
// stream is created only for a request a new stream would accept, and a
// stream nobody uses is not led forever.

// DefaultIdleRelease is Config.IdleRelease's default.
const DefaultIdleRelease = config.DefaultIdleRelease

// admitNew is an append's verdict on a stream that does not exist yet:
// the facade's own checks (422 invalid; 412 for a match_seq_num other
// than 0 or a fencing token other than the empty one) run against the
// empty state a created stream starts from, so a batch the new stream
// would reject creates nothing. The append itself then runs as on any
// stream; if it still fails (a racing append took seq 0, no pool budget
// in time), the stream exists, as it would had the race gone the other
// way.
func (n *Node) admitNew(in *api.AppendInput) func(api.EffectiveStreamConfig) error {
	return func(cfg api.EffectiveStreamConfig) error {
		f := facade.New(facadeConfig(cfg), facade.State{})
		f.LoadProducers(producer.New()) // a new stream has no producers yet
		if _, err := f.Sequence(facadeRequest(in), uint64(time.Now().UnixMilli())); err != nil {
			return n.appendErr(meta.Class(cfg.StorageClass), err, false)
		}
		return nil
	}
}

// forget drops what this star keeps of a released stream: its empty lead
// slot and its cached row, so a stream that is not led here costs
// nothing. A slot that is busy (a request is opening the stream) or
// marks a deletion stays. lead checks, under the slot's lock, that its
// slot is still the current one (slotIs), so a request that took the slot
// before it was forgotten never opens a second facade beside a new slot.
func (n *Node) forget(id string, key catalog.StreamKey) {
	n.cat.Forget(key, id)
	n.mu.Lock()
	defer n.mu.Unlock()
	slot := n.led[id]
	if slot == nil || !slot.mu.TryLock() { // never wait for I/O under n.mu
		return
	}
	defer slot.mu.Unlock()
	if slot.l == nil && !slot.deleted {
		delete(n.led, id)
	}
}

// slotIs reports whether slot is id's current slot.
func (n *Node) slotIs(id string, slot *ledSlot) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.led[id] == slot
}

// idleReleaser is the idle release's loop state.
type idleReleaser struct {
	released prometheus.Counter
	loop     bgLoop
}

// startIdleRelease registers the idle release's metrics and starts its
// loop when Config.IdleRelease is positive.
func (n *Node) startIdleRelease() {
	ir := &idleReleaser{}
	ir.released = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "leader", Name: "idle_releases_total",
		Help: "Stream leases this star released because nothing used the stream for the idle-release period.",
	})
	led := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "starlog", Subsystem: "leader", Name: "streams_led",
		Help: "Streams open (led) on this star.",
	}, func() float64 { return float64(n.leading()) })
	ir.released = registerShared(n, ir.released, "idle_releases_total")
	registerShared(n, led, "streams_led")
	n.idle = ir
	if n.cfg.IdleRelease <= 0 {
		return
	}
	ir.loop.start(n.drainCtx, func(ctx context.Context) { n.idleLoop(ctx, n.cfg.IdleRelease) })
}

// stopIdleRelease stops the loop and waits for it (idempotent).
func (n *Node) stopIdleRelease() {
	if ir := n.idle; ir != nil {
		ir.loop.halt()
	}
}

// idleLoop looks for idle streams four times per period, so a stream is
// released between one and 1¼ periods after its last use.
func (n *Node) idleLoop(ctx context.Context, period time.Duration) {
	t := time.NewTicker(max(period/4, 10*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		n.releaseIdle(ctx, period)
	}
}

// releaseIdle releases every stream led here with no open appender or
// cursor and no request for idle, through the handoff's release path
// (release): admission stops, the wait covers every batch in flight, the
// lease is released with its frontier and the stream dropped, so the next
// request re-acquires it without a settle. A draining or zombie star
// leaves its streams to the drain or its successor. It returns how many
// it released.
func (n *Node) releaseIdle(ctx context.Context, idle time.Duration) int {
	if n.drain.Draining() || n.zombie() != nil || n.isClosed() {
		return 0
	}
	n.mu.Lock()
	ids := make([]string, 0, len(n.led))
	for id := range n.led {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	cutoff := time.Now().Add(-idle).UnixNano()
	released := 0
	for _, id := range ids {
		l := n.ledIfOpen(id)
		if l == nil || l.users.Load() > 0 || l.lastUse.Load() > cutoff {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, balanceHandoffTimeout)
		frontier, err := n.release(rctx, id, l, nil)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return released
			}
			n.log.Warn("idle release failed; the stream stays led here", "stream", l.name, "id", id, "err", err)
			continue
		}
		n.forget(id, l.key)
		released++
		n.idle.released.Inc()
		n.log.Debug("released idle stream", "stream", l.name, "id", id, "frontier", frontier)
	}
	return released
}
