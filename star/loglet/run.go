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
	"github.com/starlog/starlog/shared/meta"
)

// run is the one loop that cuts flights, claims their slots, releases them
// in slot order and decides recovery from halts. Cut order is slot order
// because nothing else claims slots.
func (l *Loglet) run(ctx context.Context) {
	defer close(l.done)
	defer l.shutdown()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var recovered <-chan recovery
		late := l.lateC()
		switch {
		case l.deposedErr != nil:
			l.failPool(l.deposedErr)
		case l.rec != nil:
			// Nothing is cut or released until the next epoch is minted.
			recovered = l.rec.done
			if err := l.degradedErr(); err != nil {
				l.answerPool(err)
			}
		default:
			l.releaseReady()
			if err := l.degradedErr(); err != nil {
				// A batch that reserved before the class degraded.
				l.answerWaiting(err)
			}
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
		case r := <-recovered:
			l.finishRecovery(r)
		case <-late:
			l.degrade()
		}
		timer.Stop()
	}
}

// tryCut cuts and launches flights while the pool has a due flight (the
// cut policy), the window has room and the backlog budget allows. It returns
// how long until the next flight is due, when that is what it waits for.
func (l *Loglet) tryCut() time.Duration {
	for {
		n, bytes := l.pool.Len()
		if n == 0 {
			l.blocked.set("")
			return 0
		}
		oldest, _ := l.pool.Oldest()
		now := time.Now()
		if due, at := l.policy.Due(now, bytes, oldest, l.lastCut, len(l.inflight) == 0); !due {
			l.blocked.set("")
			return max(at.Sub(now), time.Microsecond)
		}
		if len(l.inflight) >= l.cfg.Window {
			l.noteBlocked(CauseStorageSlow)
			return 0 // an upload result frees a slot
		}
		if !l.backlog.tryAcquire() {
			cause := l.backlog.cause()
			l.noteBlocked(cause)
			if l.stalledSince.IsZero() { // one count and one log line per stall
				l.stalledSince = time.Now()
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
		if !l.cut() {
			return 0
		}
	}
}

// noteBlocked records why the flusher stopped cutting; an admission stall
// in progress takes the new cause.
func (l *Loglet) noteBlocked(cause string) {
	if l.blocked.set(cause) {
		l.admit.recause(cause)
	}
}

// cut takes one flight off the pool, groups its batches by stream (keeping
// each stream's order, so a stream's blocks are contiguous in the bundle),
// claims the next slot and starts its upload. The batches' pool bytes are
// released here: from now on the flight is the backlog's. It returns false
// when the loglet stopped (a flight it cannot render).
func (l *Loglet) cut() bool {
	entries := l.pool.Cut(l.cfg.TargetFlight)
	f := &flight{epoch: l.epoch.Epoch, buckets: l.epoch.Params.Buckets, slot: l.nextSlot, started: time.Now()}
	l.lastCut = f.started
	var order []string
	byStream := map[string][]*Batch{}
	var poolBytes int64
	for _, e := range entries {
		poolBytes += e.Size
		id := e.Value.StreamID
		if _, ok := byStream[id]; !ok {
			order = append(order, id)
		}
		byStream[id] = append(byStream[id], e.Value)
		l.metrics.poolWait.Observe(f.started.Sub(e.Admitted).Seconds())
	}
	l.pool.Release(poolBytes)
	for _, id := range order {
		f.batches = append(f.batches, byStream[id]...)
	}
	l.nextSlot++
	l.inflight[f.slot] = f
	if err := l.render(f); err != nil {
		// The facade validated every batch, so this is a bug. Its batches
		// are sequenced, and later batches of their streams may already
		// be in flight: failing them alone would leave a hole in those
		// streams' seq nums. The loglet stops instead, failing everything.
		l.log.Error("render flight: stopping the loglet", "slot", f.slot, "err", err)
		l.depose(fmt.Errorf("render slot %d: %w", f.slot, err))
		return false
	}
	l.backlog.addBytes(f.bodyLen)
	l.metrics.inflight.Set(float64(len(l.inflight)))
	l.metrics.flightBytes.Observe(float64(len(f.body)))
	l.upload(f)
	return true
}

// render encodes f into its slot, replacing an earlier rendering's size
// in the backlog's bytes.
func (l *Loglet) render(f *flight) error {
	if l.cfg.testRender != nil {
		if err := l.cfg.testRender(f.epoch, f.slot); err != nil {
			return err
		}
	}
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
	f.body, f.bodyLen, f.extents = body, int64(len(body)), footer.Extents
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
	if r.epoch != l.epoch.Epoch || l.rec != nil {
		return // a straggler of an epoch being (or already) recovered
	}
	f, ok := l.inflight[r.slot]
	if !ok {
		return
	}
	f.reported = true
	if r.err == nil {
		f.committed = true
		l.metrics.commitLatency.Observe(time.Since(f.started).Seconds())
		if r.slot == l.releaseAt {
			// The oldest waiting flight goes through (a later slot's
			// commit alone would restart the deadline while it waits).
			l.healed()
		}
		return
	}
	l.startRecovery(ctx, r)
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
		b.answer(nil)
	}
	l.metrics.ackLatency.Observe(now.Sub(f.started).Seconds())
	// From here the flight index serves the flight, from its bundle until
	// the index evicts it, then from its slot object: the batches (and the
	// request buffers their records alias) are let go, so at most one copy
	// of the bytes stays.
	f.batches = nil
	select {
	case l.absorbNudge <- struct{}{}:
	default:
	}
}

// recovery is a halted epoch being fenced and replaced. Its fence and mint
// run beside the loop (fenceAndMint), so the loop can answer the waiting
// appends when the class overruns its recovery deadline (failing).
type recovery struct {
	epoch   uint64
	halted  uint64 // the slot that halted
	started time.Time
	done    chan recovery

	// results, filled by fenceAndMint
	cut    uint64
	next   meta.Epoch
	writer *chain.Writer
	fail   error
}

// startRecovery handles a halted epoch (self-recovery, the seed's "When
// the chain halts"): stop the epoch's uploads and wait until each has
// reported and every background copy has ended, so nothing of this writer
// lands after its fence reads; then fence it on what the loop knows, mint
// the next epoch, and resume in finishRecovery.
func (l *Loglet) startRecovery(ctx context.Context, r uploadResult) {
	epoch := l.epoch.Epoch
	l.log.Warn("epoch halted; recovering", "epoch", epoch, "slot", r.slot, "err", r.err)
	l.metrics.halts.Inc()
	l.noteHalt(r.err)
	l.backlog.setRecovering(true)
	l.noteBlocked(CauseEpochSettling)

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
	l.writer.Close()

	committed := map[uint64]bool{}
	for s, f := range l.inflight {
		if f.committed {
			committed[s] = true
		}
	}
	known := chain.Known{Released: l.releaseAt, Committed: func(s uint64) bool { return committed[s] }}
	rec := &recovery{epoch: epoch, halted: r.slot, started: time.Now(), done: make(chan recovery, 1)}
	l.rec = rec
	go l.fenceAndMint(ctx, *rec, known)
}

// fenceAndMint fences the halted epoch on what the writer knows and mints
// the next one, retrying everything but deposition until it succeeds or
// the loglet closes: the loop answers the waiting appends meanwhile, and
// recovery resumes as soon as the store takes writes again.
func (l *Loglet) fenceAndMint(ctx context.Context, rec recovery, known chain.Known) {
	defer func() { rec.done <- rec }()
	rec.fail = l.retry(ctx, "fence", func() (err error) {
		rec.cut, err = l.chain.FenceOwn(ctx, rec.epoch, known)
		return err
	})
	if rec.fail != nil {
		return
	}
	rec.fail = l.retry(ctx, "mint", func() (err error) {
		rec.next, rec.writer, err = l.mintEpoch(ctx)
		return err
	})
}

// answerPool answers the uncut batches without dropping them.
func (l *Loglet) answerPool(err error) {
	for _, b := range l.pool.Uncut() {
		b.answer(err)
	}
}

// finishRecovery resumes after fenceAndMint: acknowledge late every
// flight below the cut (they are committed), and republish the rest, same
// seq nums, into the new epoch's first slots.
func (l *Loglet) finishRecovery(rec recovery) {
	l.rec = nil
	l.backlog.setRecovering(false)
	if rec.fail != nil {
		l.metrics.recoveries.WithLabelValues("deposed").Inc()
		l.depose(rec.fail)
		return
	}
	cut := rec.cut
	if cut < l.releaseAt {
		// Released slots are committed, so the cut can't be below them.
		rec.writer.Close()
		l.depose(fmt.Errorf("loglet: epoch %d cut %d below released slot %d", rec.epoch, cut, l.releaseAt))
		return
	}
	for s := l.releaseAt; s < cut; s++ {
		f, ok := l.inflight[s]
		if !ok {
			rec.writer.Close()
			l.depose(fmt.Errorf("loglet: epoch %d: committed slot %d below cut %d is not ours", rec.epoch, s, cut))
			return
		}
		f.committed = true
	}
	late := cut - l.releaseAt
	l.releaseReady() // ack late: everything below the cut
	rest := l.sortedInflight()
	clear(l.inflight)
	if len(rest) == 0 && late > 0 {
		// Nothing is left to probe the store with, and the fence found
		// the flights committed: the class takes writes. (With flights
		// left, the first of them to commit in the new epoch decides.)
		l.healed()
	}
	l.install(rec.next, rec.writer)
	l.metrics.recoveries.WithLabelValues("recovered").Inc()
	l.log.Info("epoch recovered", "halted", rec.epoch, "cut", cut, "acked_late", late, "republished", len(rest), "epoch", l.epoch.Epoch, "took", time.Since(rec.started))
	for _, f := range rest {
		old := f.bodyLen
		f.epoch, f.buckets, f.slot = l.epoch.Epoch, l.epoch.Params.Buckets, l.nextSlot
		f.committed, f.reported, f.started = false, false, time.Now()
		l.nextSlot++
		l.inflight[f.slot] = f
		if err := l.render(f); err != nil {
			l.log.Error("re-render flight: stopping the loglet", "slot", f.slot, "err", err)
			l.depose(fmt.Errorf("re-render slot %d: %w", f.slot, err))
			return
		}
		l.backlog.addBytes(f.bodyLen - old)
		l.upload(f)
	}
}

// retry runs op until it succeeds, ctx ends, or it reports deposition (the
// taxonomy in shared/chain/errors.go). Each attempt is bounded by the
// chain's per-request timeouts; the retries are bounded by the loglet's
// life, and the appends waiting on them by the recovery deadline.
func (l *Loglet) retry(ctx context.Context, what string, op func() error) error {
	r := 10 * time.Millisecond
	var lastKey string
	for {
		err := op()
		if err == nil || errors.Is(err, chain.ErrDeposed) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		l.metrics.recoveryRetry.WithLabelValues(what).Inc()
		var ue *chain.UndecidableError
		if errors.As(err, &ue) && ue.Key != lastKey {
			lastKey = ue.Key
			l.metrics.undecidable.Inc()
			l.log.Error("recovery "+what+": a slot cannot be decided; retrying (an unreadable occupant needs an operator)", "key", ue.Key, "permanent", ue.Permanent, "err", err)
		} else {
			l.log.Warn("recovery "+what+" failed; retrying", "err", err, "in", r)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(r):
		}
		r = min(2*r, 2*time.Second)
	}
}

// depose sheds everything: a successor owns the chain, or the loglet can no
// longer tell (or met a bug). Every batch not yet released fails
// indefinitely, and the loglet takes no more.
func (l *Loglet) depose(cause error) {
	err := fmt.Errorf("%w (%v)", ErrDeposed, cause)
	if errors.Is(cause, context.Canceled) {
		err = ErrClosed
	}
	l.log.Error("deposed: shedding every stream of the chain", "err", cause)
	l.mu.Lock()
	l.closed = err
	l.signalRefusedLocked()
	l.mu.Unlock()
	l.deposedErr = err
	if l.failing != nil { // deposed, not degraded: the star leads nothing more
		l.failing.late.Stop()
		l.failing = nil
		l.metrics.degraded.Set(0)
	}
	for _, f := range l.sortedInflight() {
		l.fail(f, err)
	}
	clear(l.inflight)
	l.failPool(err)
}

func (l *Loglet) fail(f *flight, err error) {
	for _, b := range f.batches {
		b.answer(err)
	}
}

func (l *Loglet) failPool(err error) {
	for {
		entries := l.pool.Cut(1 << 62)
		if len(entries) == 0 {
			return
		}
		for _, e := range entries {
			e.Value.answer(err)
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
	l.signalRefusedLocked()
	l.mu.Unlock()
	if l.epochStop != nil {
		l.epochStop()
	}
	for _, f := range l.sortedInflight() {
		l.fail(f, err)
	}
	clear(l.inflight)
	l.failPool(err)
	if l.rec != nil {
		// fenceAndMint ends with the loop's context; a writer it minted
		// meanwhile is closed unused.
		if r := <-l.rec.done; r.writer != nil {
			r.writer.Close()
		}
	}
	if l.writer != nil {
		l.writer.Close()
	}
}
