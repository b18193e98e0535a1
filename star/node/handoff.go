package node

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/catalog"
	"github.com/starlog/starlog/star/loglet"
)

// HandoffResult is the outcome of giving a stream away.
type HandoffResult struct {
	StreamID string
	// To is the star the stream was handed to ("" when it was only
	// released: whichever star gets its next request takes it).
	To string
	// Frontier is the stream's durable tail at the release: rows cover
	// every record below it.
	Frontier uint64
	Took     time.Duration
}

// handoffPoll is how often a handoff re-checks the stream's pending acks
// and the flight index (neither signals the one stream it waits for).
const handoffPoll = 2 * time.Millisecond

// Handoff gives a stream this star leads to the live star to (docs/design.md §9,
// no fence: the epoch stays open). It stops admitting the stream's appends
// (they get a retryable 503 naming the target as leader), waits for its
// pending batches to release, runs the release flush (waits until the
// absorb has checkpointed past every released flight holding the stream,
// so its refs cover its whole resident span), releases the lease by CAS
// with the frontier and drops the stream. The target takes the released
// lease with no gate settle on the next request, which this star forwards
// to it. An empty to releases the stream to whoever gets it next.
func (n *Node) Handoff(ctx context.Context, basin, name, to string) (HandoffResult, error) {
	start := time.Now()
	var target *NotLeaderError
	if to != "" {
		var err error
		if target, err = n.lease.HandoffTarget(ctx, to); err != nil {
			return HandoffResult{}, err
		}
	}
	_, e, err := n.cat.LiveStream(ctx, basin, name, catalog.AutoCreate{})
	if err != nil {
		return HandoffResult{}, err
	}
	id := e.Row.ID
	if target != nil {
		target.StreamID = id
	}
	l := n.ledIfOpen(id)
	if l == nil {
		return HandoffResult{}, api.Invalid("this star does not lead stream %q", name)
	}
	frontier, err := n.release(ctx, id, l, target)
	if err != nil {
		return HandoffResult{}, err
	}
	res := HandoffResult{StreamID: id, To: to, Frontier: frontier, Took: time.Since(start)}
	n.log.Info("stream handed off", "basin", basin, "stream", name, "id", id, "to", to, "frontier", frontier, "took", res.Took)
	return res, nil
}

// release stops admitting l, waits until its refs cover its tail, releases
// its lease with that frontier and drops it; target (nil: none) is where
// its requests go meanwhile and afterwards. A wait cut short by ctx
// resumes admission: nothing changed hands.
func (n *Node) release(ctx context.Context, id string, l *ledStream, target *NotLeaderError) (uint64, error) {
	// The stop names the target (or no leader): forwarding peers forget
	// this star as the leader, clients retry.
	var stop error = &NotLeaderError{StreamID: id}
	if target != nil {
		stop = target
	}
	l.admit.Lock()
	if l.moving.Load() != nil {
		l.admit.Unlock()
		return 0, api.Unavailable("stream %q is already being handed off", l.name)
	}
	l.moving.Store(&stop)
	end := l.maxEnd.Load()
	l.admit.Unlock()

	if err := n.awaitCovered(ctx, id, l, end); err != nil {
		if ctx.Err() != nil && l.loglet.Err() == nil {
			l.moving.Store(nil)
			return 0, catalog.ContextError(ctx.Err())
		}
		return 0, err
	}
	frontier := l.s.Tail().SeqNum
	// The target is remembered before the drop: a request in between
	// would otherwise find the stream unled here and take the lease back.
	// The stream is dropped whatever the outcome: after an uncertain
	// release a peer may already hold the lease, and this star may reopen
	// it safely (it holds none of its records in memory).
	err := n.lease.Release(ctx, id, l.name, frontier, target)
	n.drop(id, l)
	if err != nil {
		return 0, err
	}
	return frontier, nil
}

// awaitCovered waits until l's acknowledged tail reaches end (every batch
// admitted before the stop has released) and the flight index holds no
// extent of the stream (the absorb checkpointed past all of them).
func (n *Node) awaitCovered(ctx context.Context, id string, l *ledStream, end uint64) error {
	defer l.loglet.Urge()() // the handoff waits for the absorb, not for its write budget
	t := time.NewTicker(handoffPoll)
	defer t.Stop()
	for {
		if err := l.loglet.Err(); err != nil {
			if errors.Is(err, loglet.ErrDeposed) {
				return api.Unavailable("this star no longer leads stream %q", l.name)
			}
			return api.Unavailable("the %s loglet stopped: %v", l.class, err)
		}
		if l.s.Tail().SeqNum >= end {
			if !l.loglet.Index().Holds(id) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// drop stops leading l: sessions holding it end with a retryable error,
// the next request resolves the lease again.
func (n *Node) drop(id string, l *ledStream) {
	l.released.Store(true)
	n.mu.Lock()
	slot := n.led[id]
	n.mu.Unlock()
	if slot == nil {
		return
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	// Forget before the slot frees: a reopen seeds the absorber afresh.
	if slot.l == l {
		l.loglet.Absorber().Forget(id)
		slot.l = nil
		slot.releases++ // judgments taken before now open nothing (ledSlot)
	}
}

// releaseAll releases every lease this star holds with its frontier, each
// once the absorb has covered the stream (graceful close), so successors
// open without settling this star's chains. It runs the releases at once
// (they share the absorb passes) and logs the ones that fail: a stream
// not released is taken over after the dead-after bound with a settle.
func (n *Node) releaseAll(ctx context.Context) (released, failed int) {
	n.mu.Lock()
	ids := make([]string, 0, len(n.led))
	for id := range n.led {
		ids = append(ids, id)
	}
	n.mu.Unlock()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, id := range ids {
		l := n.ledIfOpen(id)
		if l == nil {
			continue
		}
		wg.Go(func() {
			frontier, err := n.release(ctx, id, l, nil)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				failed++
				n.log.Warn("close: releasing a stream's lease failed; a successor will settle", "stream", l.name, "id", id, "err", err)
				return
			}
			released++
			n.log.Debug("close: released stream", "stream", l.name, "id", id, "frontier", frontier)
		})
	}
	wg.Wait()
	return released, failed
}
