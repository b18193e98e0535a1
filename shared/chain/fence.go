package chain

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// fenceReadAhead is how many slots past the lowest undecided one a fence
// reads at most at once (it starts at the window and grows with a backlog
// of committed slots). Reads are harmless; writes (poison, roll-forward copies)
// stay within the minted window of the lowest undecided slot, so a fence
// writes at most the window past its cut. Against a writer that is still
// alive and winning the slots the fence reaches (a slot read absent holds
// its copy by the time the fence writes), a window-wide gate would trail
// the writer forever, since the writer's own window starts at or above
// the fence's lowest undecided slot: the fence then writes over its whole
// read-ahead, getting ahead of the writer, which meets poison within its
// window.
const fenceReadAhead = 64

// Known is what an epoch's writer knows when it fences its own epoch after
// a halt. Its own releases are the one fact no bucket can show: a slot it
// never released can be cut without deciding it physically.
type Known struct {
	// Released: every slot below it was acknowledged (so it is committed),
	// none at or above it was, and the writer will never release one now.
	Released uint64
	// Committed reports the slots at or above Released the writer saw
	// reach W (nil: none).
	Committed func(slot uint64) bool
}

// Fence fences epoch to its cut and returns the cut: every slot below it
// is committed and the cut itself is dead, so nothing at or past it will
// ever release. own is true when the epoch's writer fences itself (with no
// knowledge of its releases; FenceOwn is the writer's form); then any
// foreign claim on the head means it was deposed (ErrDeposed). A
// successor claims the fence on the head (so the writer's next mint
// fails) and adopts a cut already recorded. Every step is idempotent.
func (c *Chain) Fence(ctx context.Context, epoch uint64, own bool) (uint64, error) {
	return c.fence(ctx, epoch, own, nil)
}

// FenceOwn is the writer's own fence of its halted epoch, given what it
// knows: it decides the slots from k.Released upward (those below were
// acknowledged, so they are committed, and it need not read them), treats
// the slots it saw commit as committed, and decides the others by their
// buckets, rolling a lone copy forward or poisoning. A slot it cannot
// decide within OwnFenceWait, for want of a bucket that does not answer,
// becomes the cut all the same: the writer never released it and never
// will, and the cut recorded on the head, not the slot's bytes, is what
// every later walk obeys. So a writer recovers with a zone down whatever
// that zone holds.
func (c *Chain) FenceOwn(ctx context.Context, epoch uint64, k Known) (uint64, error) {
	return c.fence(ctx, epoch, true, &k)
}

func (c *Chain) fence(ctx context.Context, epoch uint64, own bool, known *Known) (uint64, error) {
	cut, done, err := c.claimFence(ctx, epoch, own)
	if err != nil || done {
		return cut, err
	}
	rec, err := c.epochOrFromHead(ctx, epoch)
	if err != nil {
		return 0, err
	}
	cut, err = c.findCut(ctx, rec, known)
	if err != nil {
		return 0, err
	}
	if err := c.recordCut(ctx, epoch, cut, own); err != nil {
		return cut, err
	}
	return cut, c.recordCutOnEpoch(ctx, epoch, cut)
}

// epochOrFromHead reads the epoch record, creating it from the head when a
// minter crashed between its head CAS and the record's creation.
func (c *Chain) epochOrFromHead(ctx context.Context, epoch uint64) (meta.Epoch, error) {
	rec, _, err := c.Epoch(ctx, epoch)
	if !errors.Is(err, meta.ErrNotFound) {
		return rec, err
	}
	h, _, ok, herr := c.Head(ctx)
	if herr != nil {
		return rec, herr
	}
	if !ok || h.Epoch != epoch {
		return rec, err
	}
	return c.ensureEpochRecord(ctx, h)
}

// claimFence records this actor as the epoch's fencer on the head
// (judgeFence decides). It returns done with the cut when one is already
// recorded.
func (c *Chain) claimFence(ctx context.Context, epoch uint64, own bool) (uint64, bool, error) {
	for {
		h, ver, ok, err := c.Head(ctx)
		if err != nil {
			return 0, false, err
		}
		switch judgeFence(h, ok, epoch, c.Star, c.Me, own) {
		case vNotMinted:
			return 0, false, fmt.Errorf("chain %s/%s: fence epoch %d: not minted", c.Star, c.Class, epoch)
		case vDeposed:
			return 0, false, fmt.Errorf("chain %s/%s epoch %d (head epoch %d %s, owner %s, fencer %q): %w", c.Star, c.Class, epoch, h.Epoch, h.State, h.Owner, h.Fencer, ErrDeposed)
		case vCutOnRecord:
			// The head moved on, and it only does so once the cut is sealed
			// onto the epoch's record.
			rec, _, err := c.Epoch(ctx, epoch)
			if err != nil {
				return 0, false, err
			}
			if rec.Cut == nil {
				return 0, false, fmt.Errorf("chain %s/%s: epoch %d below head %d has no cut", c.Star, c.Class, epoch, h.Epoch)
			}
			return *rec.Cut, true, nil
		case vCutOnHead:
			if h.Cut == nil {
				return 0, false, fmt.Errorf("chain %s/%s: epoch %d is %s with no cut", c.Star, c.Class, epoch, h.State)
			}
			return *h.Cut, true, nil
		case vFindCut:
			return 0, false, nil
		case vClaim:
			h.State, h.Fencer = meta.HeadFencing, c.Me
			won, err := c.casHead(ctx, h, ver)
			if err != nil {
				return 0, false, err
			}
			if won {
				if h.Cut != nil {
					return *h.Cut, true, nil
				}
				return 0, false, nil
			}
			if err := ctx.Err(); err != nil {
				return 0, false, err
			}
		}
	}
}

// recordCut writes the cut onto the head by CAS, or checks the one there.
func (c *Chain) recordCut(ctx context.Context, epoch, cut uint64, own bool) error {
	for {
		h, ver, _, err := c.Head(ctx)
		if err != nil {
			return err
		}
		if h.Epoch != epoch {
			if own {
				return fmt.Errorf("chain %s/%s epoch %d: head moved to epoch %d: %w", c.Star, c.Class, epoch, h.Epoch, ErrDeposed)
			}
			return nil // moved on: the epoch record holds the cut
		}
		if own && h.Fencer != c.Me {
			return fmt.Errorf("chain %s/%s epoch %d fenced by %s: %w", c.Star, c.Class, epoch, h.Fencer, ErrDeposed)
		}
		if h.Cut != nil {
			if *h.Cut != cut {
				return fmt.Errorf("chain %s/%s epoch %d: recorded cut %d, fence found %d", c.Star, c.Class, epoch, *h.Cut, cut)
			}
			return nil
		}
		if h.State != meta.HeadFencing {
			return fmt.Errorf("chain %s/%s epoch %d: head %s while recording the cut", c.Star, c.Class, epoch, h.State)
		}
		h.Cut = &cut
		won, err := c.casHead(ctx, h, ver)
		if err != nil || won {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// slotOutcome is one slot's fence result.
type slotOutcome struct {
	slot  uint64
	fate  Fate
	stuck bool
	tally *Tally
	err   error
}

// findCut decides slots from the search start upward, slot by slot, and
// returns the lowest dead one: the cut. A successor starts at the
// checkpoint; a writer with its knowledge starts at its release frontier
// and skips the slots it saw commit. Slots are read up to fenceReadAhead
// past the lowest undecided one; they are written only within the minted
// window of it. A slot above the cut never holds the cut up.
func (c *Chain) findCut(ctx context.Context, rec meta.Epoch, known *Known) (uint64, error) {
	nonce, err := ParseNonce(rec.Params.Nonce)
	if err != nil {
		return 0, err
	}
	bs := c.buckets(rec.Params)
	window := uint64(max(rec.Params.Window, 1))
	lo := rec.Checkpoint
	if known != nil {
		lo = max(lo, known.Released)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	results := make(chan slotOutcome, fenceReadAhead)
	race := &raceSignal{wake: make(chan struct{}, 1)}
	gates := map[uint64]chan struct{}{}
	decided := map[uint64]slotOutcome{}
	launched := lo
	running := 0
	start := lo
	launch := func() {
		// Read-ahead starts at the window and grows with the committed
		// slots behind it (a backlog), so a short epoch is not read 64
		// slots past its cut.
		ahead := min(max(fenceReadAhead, window), window+2*(lo-start))
		for ; launched < lo+ahead; launched++ {
			s := launched
			if known != nil && known.Committed != nil && known.Committed(s) {
				decided[s] = slotOutcome{slot: s, fate: Committed}
				continue
			}
			gate := make(chan struct{})
			gates[s] = gate
			running++
			go func() {
				want := copyID{rec.Epoch, s, nonce}
				results <- c.decideSlot(ctx, bs, want, rec.Params.W, gate, race)
			}()
		}
		gate := lo + window
		if race.seen.Load() {
			gate = lo + ahead
		}
		for s, g := range gates {
			if s < gate {
				close(g)
				delete(gates, s)
			}
		}
	}
	drain := func() {
		cancel()
		for ; running > 0; running-- {
			<-results
		}
	}
	var ownWait <-chan time.Time
	var ownTimer *time.Timer
	resetOwnWait := func() {
		if known == nil {
			return
		}
		if ownTimer != nil {
			ownTimer.Stop()
		}
		ownTimer = time.NewTimer(c.ownFenceWait())
		ownWait = ownTimer.C
	}
	defer func() {
		if ownTimer != nil {
			ownTimer.Stop()
		}
	}()
	launch()
	resetOwnWait()
	for {
		// Advance over decided slots from the bottom: the first dead one
		// is the cut; a stuck one below it stops the fence.
		for {
			o, ok := decided[lo]
			if !ok {
				break
			}
			switch {
			case o.fate == Dead:
				drain()
				return lo, nil
			case o.fate == Committed:
				delete(decided, lo)
				lo++
				launch()
				resetOwnWait()
				continue
			default:
				drain()
				return 0, c.undecidable(rec, o)
			}
		}
		select {
		case o := <-results:
			running--
			decided[o.slot] = o
		case <-race.wake:
			launch() // widen the write gate
		case <-ownWait:
			// A slot the writer never released, undecidable without a
			// bucket that does not answer: cut there on what it knows.
			drain()
			return lo, nil
		case <-ctx.Done():
			// Report the lowest undecided slot as its fence saw it.
			err := ctx.Err()
			cancel()
			out := slotOutcome{slot: lo, err: err}
			for ; running > 0; running-- {
				if o := <-results; o.slot == lo {
					out = o
				}
			}
			if o, ok := decided[lo]; ok {
				out = o
			}
			out.stuck = false
			return 0, c.undecidable(rec, out)
		}
	}
}

func (c *Chain) ownFenceWait() time.Duration {
	if c.OwnFenceWait > 0 {
		return c.OwnFenceWait
	}
	return time.Second
}

// undecidable describes a slot the fence stopped at.
func (c *Chain) undecidable(rec meta.Epoch, o slotOutcome) error {
	e := &UndecidableError{Key: c.slotKey(rec.Epoch, o.slot), Slot: o.slot, Buckets: rec.Params.Buckets,
		Permanent: o.stuck, Err: o.err}
	if o.tally != nil {
		e.Occupants = o.tally.Occupants()
	} else {
		e.Occupants = make([]Occupant, len(rec.Params.Buckets))
	}
	return e
}

// raceSignal tells a fence's driver that a slot fence saw the writer win a
// slot it had read absent.
type raceSignal struct {
	seen atomic.Bool
	wake chan struct{}
}

func (r *raceSignal) set() {
	if !r.seen.Swap(true) {
		r.wake <- struct{}{}
	}
}

// decideSlot drives one slotFence with I/O until the slot's fate is
// decided, it is stuck, or ctx ends. Writes wait for write to close.
func (c *Chain) decideSlot(ctx context.Context, bs []objstore.Bucket, want copyID, w int, write <-chan struct{}, race *raceSignal) slotOutcome {
	key := c.slotKey(want.epoch, want.slot)
	f := newSlotFence(len(bs), w)
	out := slotOutcome{slot: want.slot, tally: f.tally}
	sctx, cancel := context.WithCancel(ctx)
	answers := make(chan fenceObs, len(bs)) // one request per bucket at a time
	// Requests still out when the slot is decided are cancelled and waited
	// for: a PUT of poison should not land after the fence has returned (a
	// store need not stop a write its context ends in the middle of). The
	// wait is bounded by twice an attempt's timeout (each request had one,
	// and a write under way may finish past it): a store that never
	// returns is left behind rather than holding the fence (a late write
	// agrees with the decision; answers has room for every request, so
	// none blocks sending).
	outstanding := 0
	defer func() {
		cancel()
		if outstanding == 0 {
			return
		}
		bound := time.NewTimer(2 * c.attemptTimeout())
		defer bound.Stop()
		for ; outstanding > 0; outstanding-- {
			select {
			case <-answers:
			case <-bound.C:
				if c.OnAbandoned != nil {
					c.OnAbandoned(outstanding)
				}
				return
			}
		}
	}()
	retries := make(chan int, len(bs))
	var timers []*time.Timer
	defer func() {
		for _, t := range timers {
			t.Stop()
		}
	}()
	backoff := make([]*retrier, len(bs))
	for i, b := range bs {
		backoff[i] = c.newRetrier("fence " + b.Name() + " " + key)
	}
	poison := format.EncodePoison(want.epoch, want.slot, c.fenceNonce)
	mayWrite := false
	var lastErr error
	for {
		reqs, fate, stuck := f.plan(mayWrite)
		if fate != Undecided || stuck {
			out.fate, out.stuck = fate, stuck
			return out
		}
		for _, r := range reqs {
			body := poison
			if r.op == opCopy {
				body = f.copy
			}
			outstanding++
			go func() { answers <- c.fenceRequest(sctx, bs[r.bucket], key, want, r, body) }()
		}
		select {
		case o := <-answers:
			outstanding--
			f.observe(o)
			if f.raced {
				race.set()
			}
			if o.err != nil {
				lastErr = o.err
				i := o.req.bucket
				timers = append(timers, time.AfterFunc(backoff[i].delay(), func() { retries <- i }))
			}
		case i := <-retries:
			f.retry(i)
		case <-write:
			mayWrite, write = true, nil
		case <-ctx.Done():
			out.err = errors.Join(ctx.Err(), lastErr) // lastErr nil: ctx's alone
			return out
		}
	}
}

// fenceRequest makes one request a slot fence asked for.
func (c *Chain) fenceRequest(ctx context.Context, b objstore.Bucket, key string, want copyID, r fenceReq, body []byte) fenceObs {
	o := fenceObs{req: r}
	actx, cancel := c.attempt(ctx)
	defer cancel()
	switch r.op {
	case opRead:
		raw, err := b.Get(actx, key, 0, format.EnvelopeSize)
		o.absent = errors.Is(err, objstore.ErrNotFound)
		o.occ, o.err = classify(raw, err, want, c.readVersion())
	case opFetch:
		raw, err := b.Get(actx, key, 0, -1)
		if err != nil {
			o.err = err
			break
		}
		o.copy, o.bad = raw, !c.verifiedCopy(raw, want)
	case opCopy, opPoison:
		_, err := b.PutIfAbsent(actx, key, body)
		switch {
		case err == nil:
			o.won = true
		case errors.Is(err, objstore.ErrExists) || objstore.IsIndefinite(err):
			o.recheck = true
		default:
			o.err = err
		}
	}
	if o.err != nil {
		o.err = fmt.Errorf("chain: fence %s %s/%s: %w", r.op, b.Name(), key, o.err)
	}
	return o
}

// verifiedCopy reports whether obj is the writer's flight copy of want with
// every CRC intact: only such bytes may be rolled forward.
func (c *Chain) verifiedCopy(obj []byte, want copyID) bool {
	env, err := format.DecodeEnvelopeUpTo(obj, c.readVersion())
	if err != nil || env.Kind != format.KindFlight || env.Epoch != want.epoch || env.Slot != want.slot || env.Nonce != want.nonce {
		return false
	}
	_, _, err = format.VerifyBundle(obj)
	return err == nil
}
