package loglet

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// run is the one loop that executes the Core's decisions (step.go): it
// cuts flights and has the Core claim their slots, feeds it the uploads'
// results, and carries out the effects (uploads, acks in slot order, the
// halted epoch's drain, fence and mint). Cut order is slot order because
// nothing else claims slots.
func (l *Loglet) run(ctx context.Context) {
	defer close(l.done)
	defer l.shutdown()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		var recovered <-chan recovery
		late := l.lateC()
		switch {
		case l.core.Phase() == Deposed:
			l.failPool(l.deposedErr)
		case l.rec != nil:
			// Nothing is cut or released until the next epoch is minted.
			recovered = l.rec.done
			if err := l.degradedErr(); err != nil {
				l.answerPool(err)
			}
		default:
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
		oldest, _ := l.pool.Oldest()
		switch v, wait := l.core.Cut(l.policy, time.Now(), n, bytes, oldest, l.lastCut); v {
		case CutIdle:
			l.blocked.set("")
			return 0
		case CutWait:
			l.blocked.set("")
			return wait
		case CutWindowFull:
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
	f := &flight{buckets: l.epoch.Params.Buckets, started: time.Now()}
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
		if b := e.Value; b.Trace != nil {
			f.traced = append(f.traced, b)
			b.Trace(Step{Name: "pool wait", Start: e.Admitted, End: f.started})
		}
	}
	l.pool.Release(poolBytes)
	for _, id := range order {
		f.batches = append(f.batches, byStream[id]...)
	}
	eff, err := l.core.Claim(f)
	if err != nil { // tryCut asked the Core first: a bug
		l.depose(err)
		return false
	}
	f.epoch, f.slot = eff.Upload[0].Epoch, eff.Upload[0].Slot
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
	if f.traced != nil {
		f.trace(Step{Name: "cut", Start: f.started, End: time.Now()})
	}
	l.metrics.inflight.Set(float64(l.core.Inflight()))
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
	var each func(chain.PutAttempt)
	if traced := f.traced; traced != nil {
		each = func(p chain.PutAttempt) {
			st := Step{Name: "put " + p.Bucket, Start: p.Start, End: p.End, Slot: slot, Err: p.Err}
			for _, b := range traced {
				b.Trace(st)
			}
		}
	}
	go func() {
		err := w.CommitObserved(ctx, slot, body, each)
		l.results <- uploadResult{epoch: epoch, slot: slot, err: err}
	}()
}

// trace tells f's traced batches about a step of the flight.
func (f *flight) trace(st Step) {
	st.Slot = f.slot
	for _, b := range f.traced {
		b.Trace(st)
	}
}

// onResult feeds one upload's outcome to the Core and carries out what it
// decides: a commit releases what is now releasable in slot order, a
// failure halts the epoch.
func (l *Loglet) onResult(ctx context.Context, r uploadResult) {
	if l.rec != nil {
		return // a straggler of an epoch being recovered
	}
	eff := l.core.Uploaded(r.epoch, r.slot, r.err)
	for _, f := range eff.Committed {
		f.committed = time.Now()
		l.metrics.commitLatency.Observe(f.committed.Sub(f.started).Seconds())
	}
	if eff.Halt != nil {
		l.startRecovery(ctx, eff)
		return
	}
	if eff.Healed {
		l.healed()
	}
	l.releaseAll(eff.Release)
}

// releaseAll acknowledges flights the Core released, in its (slot) order.
func (l *Loglet) releaseAll(fs []*flight) {
	for _, f := range fs {
		l.release(f)
	}
	l.metrics.inflight.Set(float64(l.core.Inflight()))
}

func (l *Loglet) release(f *flight) {
	l.index.Add(f)
	now := time.Now()
	if f.traced != nil {
		// A flight released by a recovery's fence has no commit time.
		from := f.committed
		if from.IsZero() {
			from = f.started
		}
		f.trace(Step{Name: "release", Start: from, End: now})
		f.traced = nil
	}
	for _, b := range f.batches {
		b.answer(nil)
	}
	l.metrics.ackLatency.Observe(now.Sub(f.started).Seconds())
	l.metrics.ackQuantiles.Observe(now.Sub(f.started).Seconds())
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
	started time.Time
	done    chan recovery

	// results, filled by fenceAndMint
	cut    uint64
	next   meta.Epoch
	writer *chain.Writer
	fail   error
}

// startRecovery handles a halted epoch (self-recovery, the seed's "When
// the chain halts"): stop the epoch's uploads and feed the Core each one's
// report until every one has reported and every background copy has
// ended, so nothing of this writer lands after its fence reads; then fence
// it on what the Core knows, mint the next epoch, and resume in
// finishRecovery.
func (l *Loglet) startRecovery(ctx context.Context, eff Effects[*flight]) {
	h := eff.Halt
	l.log.Warn("epoch halted; recovering", "epoch", h.Epoch, "slot", h.Slot, "err", h.Err)
	l.metrics.halts.Inc()
	l.noteHalt(h.Err)
	l.backlog.setRecovering(true)
	l.noteBlocked(CauseEpochSettling)

	l.epochStop()
	fence := eff.Fence
	for fence == nil {
		select {
		case res := <-l.results:
			fence = l.core.Uploaded(res.epoch, res.slot, res.err).Fence
		case <-ctx.Done():
			return
		}
	}
	l.writer.Close()

	rec := &recovery{epoch: fence.Epoch, started: time.Now(), done: make(chan recovery, 1)}
	l.rec = rec
	go l.fenceAndMint(ctx, *rec, fence.Known)
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

// finishRecovery resumes after fenceAndMint: the Core acknowledges late
// every flight below the cut (they are committed) and republishes the
// rest, same seq nums, into the new epoch's first slots.
func (l *Loglet) finishRecovery(rec recovery) {
	l.rec = nil
	l.backlog.setRecovering(false)
	if rec.fail != nil {
		l.metrics.recoveries.WithLabelValues("deposed").Inc()
		l.depose(rec.fail)
		return
	}
	eff := l.core.Recovered(rec.cut, rec.next.Epoch)
	if eff.Deposed != nil {
		// The cut says another writer's hand was in this epoch.
		rec.writer.Close()
		l.deposed(eff)
		return
	}
	l.releaseAll(eff.Release) // ack late: everything below the cut
	if eff.Healed {
		l.healed()
	}
	l.install(rec.next, rec.writer)
	l.metrics.recoveries.WithLabelValues("recovered").Inc()
	l.log.Info("epoch recovered", "halted", rec.epoch, "cut", rec.cut, "acked_late", eff.Late, "republished", len(eff.Upload), "epoch", l.epoch.Epoch, "took", time.Since(rec.started))
	for _, c := range eff.Upload {
		f := c.Flight
		old := f.bodyLen
		f.epoch, f.buckets, f.slot = c.Epoch, l.epoch.Params.Buckets, c.Slot
		f.started = time.Now()
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
func (l *Loglet) depose(cause error) { l.deposed(l.core.Depose(cause)) }

// deposed carries out the Core's deposition (eff.Deposed is the cause).
func (l *Loglet) deposed(eff Effects[*flight]) {
	cause := eff.Deposed
	if cause == nil {
		return // deposed already
	}
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
	for _, f := range eff.Fail {
		l.fail(f, err)
	}
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
	for _, f := range l.core.Stop() {
		l.fail(f, err)
	}
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
