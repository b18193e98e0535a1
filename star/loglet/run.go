package loglet

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/star/pool"
)

// run is the one loop that cuts flights, claims their slots, releases them
// in slot order and recovers from halts. Cut order is slot order because
// nothing else claims slots.
func (l *Loglet) run(ctx context.Context) {
	defer close(l.done)
	defer l.shutdown()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		if l.deposedErr != nil {
			l.failPool(l.deposedErr)
		} else {
			l.releaseReady()
			if wait := l.tryCut(); wait > 0 {
				timer.Reset(wait)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-l.pool.Ready():
		case <-timer.C:
		case r := <-l.results:
			l.onResult(ctx, r)
		case <-l.backlog.freed():
		}
		timer.Stop()
	}
}

// tryCut cuts and launches flights while the pool has a due flight, the
// window has room and the backlog budget allows. It returns how long until
// the oldest pooled byte is due, when that is what it waits for.
func (l *Loglet) tryCut() time.Duration {
	for {
		n, bytes := l.pool.Len()
		if n == 0 {
			return 0
		}
		oldest, _ := l.pool.Oldest()
		due := oldest.Add(l.cfg.FlushInterval)
		if now := time.Now(); bytes < l.cfg.TargetFlight && now.Before(due) {
			return due.Sub(now)
		}
		if len(l.inflight) >= l.cfg.Window {
			return 0 // an upload result frees a slot
		}
		if !l.backlog.tryAcquire() {
			if l.stalledSince.IsZero() { // one count and one log line per stall
				l.stalledSince = time.Now()
				cause := l.backlog.cause()
				l.metrics.stalls.WithLabelValues(cause).Inc()
				l.log.Warn("backlog budget stall: publishing blocks", "cause", cause,
					"flights", l.backlog.flightsNow(), "bytes", l.backlog.bytesNow())
			}
			return 0 // the absorb frees tokens
		}
		if !l.stalledSince.IsZero() {
			l.log.Info("backlog budget stall over", "took", time.Since(l.stalledSince))
			l.stalledSince = time.Time{}
		}
		l.cut()
	}
}

// cut takes one flight off the pool, groups its batches by stream (keeping
// each stream's order, so a stream's blocks are contiguous in the bundle),
// claims the next slot and starts its upload.
func (l *Loglet) cut() {
	entries := l.pool.Cut(l.cfg.TargetFlight)
	f := &flight{epoch: l.epoch.Epoch, slot: l.nextSlot, started: time.Now()}
	var order []string
	byStream := map[string][]*Batch{}
	for _, e := range entries {
		f.bytes += e.Size
		id := e.Value.StreamID
		if _, ok := byStream[id]; !ok {
			order = append(order, id)
		}
		byStream[id] = append(byStream[id], e.Value)
		l.metrics.poolWait.Observe(f.started.Sub(e.Admitted).Seconds())
	}
	for _, id := range order {
		f.batches = append(f.batches, byStream[id]...)
	}
	if err := l.render(f); err != nil {
		// The facade validated every batch, so this is a bug: fail the
		// batches rather than commit something unreadable.
		l.log.Error("render flight", "err", err)
		l.fail(f, err)
		l.backlog.release(1, 0)
		return
	}
	f.bodyLen = int64(len(f.body))
	l.backlog.addBytes(f.bodyLen)
	l.nextSlot++
	l.inflight[f.slot] = f
	l.metrics.inflight.Set(float64(len(l.inflight)))
	l.metrics.flightBytes.Observe(float64(len(f.body)))
	l.upload(f)
}

func (l *Loglet) render(f *flight) error {
	bs := make([]format.Batch, len(f.batches))
	for i, b := range f.batches {
		bs[i] = format.Batch{StreamID: b.StreamID, FencingToken: b.Seq.FencingToken, Records: b.Seq.Records}
	}
	body, err := l.writer.Render(f.slot, bs)
	if err != nil {
		return fmt.Errorf("loglet: render slot %d: %w", f.slot, err)
	}
	_, footer, err := format.DecodeBundle(body)
	if err != nil {
		return fmt.Errorf("loglet: re-read rendered slot %d: %w", f.slot, err)
	}
	f.body, f.extents = body, footer.Extents
	return nil
}

func (l *Loglet) upload(f *flight) {
	w, ctx, epoch, slot, body := l.writer, l.epochCtx, f.epoch, f.slot, f.body
	go func() {
		err := w.Commit(ctx, slot, body)
		l.results <- uploadResult{epoch: epoch, slot: slot, err: err}
	}()
}

func (l *Loglet) onResult(ctx context.Context, r uploadResult) {
	if r.epoch != l.epoch.Epoch {
		return // a straggler of an epoch that recovery already settled
	}
	f, ok := l.inflight[r.slot]
	if !ok {
		return
	}
	f.reported = true
	if r.err == nil {
		f.committed = true
		l.metrics.commitLatency.Observe(time.Since(f.started).Seconds())
		return
	}
	l.recover(ctx, r)
}

// releaseReady acknowledges, strictly in slot order, every committed flight
// whose predecessors are all released.
func (l *Loglet) releaseReady() {
	for {
		f, ok := l.inflight[l.releaseAt]
		if !ok || !f.committed {
			break
		}
		delete(l.inflight, l.releaseAt)
		l.releaseAt++
		l.release(f)
	}
	l.metrics.inflight.Set(float64(len(l.inflight)))
}

func (l *Loglet) release(f *flight) {
	l.index.Add(f)
	now := time.Now()
	for _, b := range f.batches {
		b.Done(nil)
	}
	l.metrics.ackLatency.Observe(now.Sub(f.started).Seconds())
	// From here the flight index serves the flight from its bundle: the
	// batches (and the request buffers their records alias) are let go, so
	// one copy of the bytes stays, charged to the pool until the absorb
	// covers it: the pool budget bounds what the class holds in memory.
	f.batches = nil
	select {
	case l.absorbNudge <- struct{}{}:
	default:
	}
}

func (l *Loglet) fail(f *flight, err error) {
	for _, b := range f.batches {
		b.Done(err)
	}
	l.pool.Release(f.bytes)
}

// recover handles a halted epoch: fence it (own), ack late every flight
// found committed below the cut, mint the next epoch and republish the rest
// into its first slots with the same seq nums. Losing either the fence claim
// or the mint CAS means a successor exists: shed everything.
func (l *Loglet) recover(ctx context.Context, r uploadResult) {
	epoch := l.epoch.Epoch
	l.log.Warn("epoch halted; recovering", "epoch", epoch, "slot", r.slot, "err", r.err)
	l.metrics.halts.Inc()
	l.backlog.setRecovering(true)
	defer l.backlog.setRecovering(false)

	// Stop this epoch's uploads and wait until each has reported, so no
	// result of it arrives after the epoch is gone.
	l.epochStop()
	for _, f := range l.inflight {
		for !f.reported {
			select {
			case res := <-l.results:
				if g, ok := l.inflight[res.slot]; ok && res.epoch == epoch {
					g.reported = true
					g.committed = g.committed || res.err == nil
				}
			case <-ctx.Done():
				return
			}
		}
	}

	var cut uint64
	if err := l.retry(ctx, "fence own epoch", func() (err error) {
		cut, err = l.chain.Fence(ctx, epoch, true)
		return err
	}); err != nil {
		l.depose(err)
		return
	}
	if cut < l.releaseAt {
		// Released slots are committed, so the cut can't be below them.
		l.depose(fmt.Errorf("loglet: epoch %d cut %d below released slot %d", epoch, cut, l.releaseAt))
		return
	}
	for s := l.releaseAt; s < cut; s++ {
		f, ok := l.inflight[s]
		if !ok {
			l.depose(fmt.Errorf("loglet: epoch %d: committed slot %d below cut %d is not ours", epoch, s, cut))
			return
		}
		f.committed = true
	}
	late := cut - l.releaseAt
	l.releaseReady() // ack late: everything below the cut
	rest := make([]*flight, 0, len(l.inflight))
	for _, f := range l.inflight {
		rest = append(rest, f)
	}
	slices.SortFunc(rest, func(a, b *flight) int { return cmp.Compare(a.slot, b.slot) })
	clear(l.inflight)

	if err := l.retry(ctx, "mint next epoch", func() error { return l.mint(ctx) }); err != nil {
		for _, f := range rest {
			l.inflight[f.slot] = f
		}
		l.depose(err)
		return
	}
	l.log.Info("epoch recovered", "halted", epoch, "cut", cut, "acked_late", late, "republished", len(rest), "epoch", l.epoch.Epoch)
	for _, f := range rest {
		f.epoch, f.slot = l.epoch.Epoch, l.nextSlot
		f.committed, f.reported, f.started = false, false, time.Now()
		if err := l.render(f); err != nil {
			l.log.Error("re-render flight", "err", err)
			l.fail(f, err)
			continue
		}
		l.nextSlot++
		l.inflight[f.slot] = f
		l.upload(f)
	}
}

// retry runs op until it succeeds, ctx ends, or it reports deposition.
func (l *Loglet) retry(ctx context.Context, what string, op func() error) error {
	r := 10 * time.Millisecond
	for {
		err := op()
		if err == nil || errors.Is(err, chain.ErrDeposed) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l.log.Warn(what+" failed; retrying", "err", err, "in", r)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r):
		}
		r = min(2*r, 2*time.Second)
	}
}

// depose sheds everything: a successor owns the chain (or the loglet can no
// longer tell). Every batch not yet released fails indefinitely.
func (l *Loglet) depose(cause error) {
	err := fmt.Errorf("%w (%v)", ErrDeposed, cause)
	if errors.Is(cause, context.Canceled) {
		err = ErrClosed
	}
	l.log.Error("deposed: shedding every stream of the chain", "err", cause)
	l.mu.Lock()
	l.closed = err
	l.mu.Unlock()
	l.deposedErr = err
	for _, f := range l.sortedInflight() {
		l.fail(f, err)
	}
	clear(l.inflight)
	l.failPool(err)
}

func (l *Loglet) failPool(err error) {
	for {
		entries := l.pool.Cut(1 << 62)
		if len(entries) == 0 {
			return
		}
		for _, e := range entries {
			e.Value.Done(err)
			l.pool.Release(e.Size)
		}
	}
}

func (l *Loglet) sortedInflight() []*flight {
	fs := make([]*flight, 0, len(l.inflight))
	for _, f := range l.inflight {
		fs = append(fs, f)
	}
	slices.SortFunc(fs, func(a, b *flight) int { return cmp.Compare(a.slot, b.slot) })
	return fs
}

func (l *Loglet) shutdown() {
	l.mu.Lock()
	if l.closed == nil {
		l.closed = ErrClosed
	}
	err := l.closed
	l.mu.Unlock()
	if l.epochStop != nil {
		l.epochStop()
	}
	for _, f := range l.sortedInflight() {
		l.fail(f, err)
	}
	clear(l.inflight)
	l.failPool(err)
	if l.writer != nil {
		l.writer.Close()
	}
}

var _ = pool.Entry[*Batch]{}
