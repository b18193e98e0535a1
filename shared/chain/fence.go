package chain

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// fenceBatch is how many slots a fence arbitrates at once.
const fenceBatch = 64

// Fence fences epoch to its cut and returns the cut: every slot below it is
// committed, the cut itself is dead, so nothing at or past it will ever
// release. own is true when the epoch's writer fences itself after a halt;
// then any foreign claim on the head means it was deposed (ErrDeposed).
// A successor claims the fence on the head (so the writer's next mint
// fails) and adopts a cut already recorded. Every step is idempotent.
func (c *Chain) Fence(ctx context.Context, epoch uint64, own bool) (uint64, error) {
	cut, done, err := c.claimFence(ctx, epoch, own)
	if err != nil || done {
		return cut, err
	}
	rec, err := c.epochOrFromHead(ctx, epoch)
	if err != nil {
		return 0, err
	}
	cut, err = c.findCut(ctx, rec)
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

// claimFence records this actor as the epoch's fencer on the head. It
// returns done with the cut when one is already recorded.
func (c *Chain) claimFence(ctx context.Context, epoch uint64, own bool) (uint64, bool, error) {
	for {
		h, ver, ok, err := c.Head(ctx)
		if err != nil {
			return 0, false, err
		}
		if !ok || h.Epoch < epoch {
			return 0, false, fmt.Errorf("chain %s/%s: fence epoch %d: not minted", c.Star, c.Class, epoch)
		}
		if h.Epoch > epoch {
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
		}
		if own {
			mine := (h.State == meta.HeadOpen && h.Owner == c.Me) || (h.State == meta.HeadFencing && h.Fencer == c.Me)
			if !mine {
				return 0, false, fmt.Errorf("chain %s/%s epoch %d (%s, fencer %q): %w", c.Star, c.Class, epoch, h.State, h.Fencer, ErrDeposed)
			}
			if h.Cut != nil {
				return *h.Cut, true, nil
			}
		} else if h.State == meta.HeadSettled {
			return *h.Cut, true, nil
		}
		if h.State == meta.HeadFencing && h.Fencer == c.Me {
			if h.Cut != nil {
				return *h.Cut, true, nil
			}
			return 0, false, nil
		}
		// Claim it (a successor also takes over a claim already recorded,
		// so the deposed writer's mint CAS fails).
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

// recordCut writes the cut onto the head by CAS, or checks the one there.
func (c *Chain) recordCut(ctx context.Context, epoch, cut uint64, own bool) error {
	for {
		h, ver, _, err := c.Head(ctx)
		if err != nil {
			return err
		}
		if h.Epoch != epoch {
			return nil // moved on: the epoch record holds the cut
		}
		if h.Cut != nil {
			if *h.Cut != cut {
				return fmt.Errorf("chain %s/%s epoch %d: recorded cut %d, fence found %d", c.Star, c.Class, epoch, *h.Cut, cut)
			}
			if own && h.Fencer != c.Me {
				return fmt.Errorf("chain %s/%s epoch %d fenced by %s: %w", c.Star, c.Class, epoch, h.Fencer, ErrDeposed)
			}
			return nil
		}
		if h.State != meta.HeadFencing {
			return fmt.Errorf("chain %s/%s epoch %d: head %s while recording the cut", c.Star, c.Class, epoch, h.State)
		}
		if own && h.Fencer != c.Me {
			return fmt.Errorf("chain %s/%s epoch %d fenced by %s: %w", c.Star, c.Class, epoch, h.Fencer, ErrDeposed)
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

// findCut poisons slots from the checkpoint upward, fenceBatch at a time,
// until it meets a dead slot: the lowest dead slot is the cut.
func (c *Chain) findCut(ctx context.Context, rec meta.Epoch) (uint64, error) {
	nonce, err := ParseNonce(rec.Params.Nonce)
	if err != nil {
		return 0, err
	}
	bs := c.buckets(rec.Params)
	for from := rec.Checkpoint; ; from += fenceBatch {
		fates := make([]Fate, fenceBatch)
		errs := make([]error, fenceBatch)
		var wg sync.WaitGroup
		for i := range fenceBatch {
			wg.Go(func() {
				fates[i], errs[i] = c.fenceSlot(ctx, bs, rec, nonce, from+uint64(i))
			})
		}
		wg.Wait()
		for i := range fenceBatch {
			if errs[i] != nil {
				return 0, errs[i]
			}
			if fates[i] == Dead {
				return from + uint64(i), nil
			}
		}
	}
}

// fenceSlot writes poison to the slot's buckets until its fate is decided.
// Absence is never inferred from a 404: only a won poison write makes a
// bucket's occupant permanent.
func (c *Chain) fenceSlot(ctx context.Context, bs []objstore.Bucket, rec meta.Epoch, nonce format.Nonce, slot uint64) (Fate, error) {
	key := c.slotKey(rec.Epoch, slot)
	poison := format.EncodePoison(rec.Epoch, slot, c.fenceNonce)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type res struct {
		i   int
		occ Occupant
		err error
	}
	results := make(chan res, len(bs))
	for i, b := range bs {
		go func() {
			occ, err := c.poisonCopy(sctx, b, key, rec.Epoch, slot, nonce, poison)
			results <- res{i, occ, err}
		}()
	}
	t := NewTally(len(bs), rec.Params.W)
	var lastErr error
	for range bs {
		r := <-results
		if r.err != nil {
			lastErr = r.err
		}
		t.Observe(r.i, r.occ)
		if f := t.Fate(); f != Undecided {
			return f, nil
		}
	}
	if err := ctx.Err(); err != nil {
		return Undecided, err
	}
	return Undecided, fmt.Errorf("chain: fence slot %s undecided: %w", key, lastErr)
}

// poisonCopy makes one bucket's occupant at key permanent and reports it.
func (c *Chain) poisonCopy(ctx context.Context, b objstore.Bucket, key string, epoch, slot uint64, nonce format.Nonce, poison []byte) (Occupant, error) {
	r := c.newRetrier("poison " + b.Name() + " " + key)
	for {
		actx, cancel := c.attempt(ctx)
		_, err := b.PutIfAbsent(actx, key, poison)
		cancel()
		switch {
		case err == nil:
			return Poison, nil
		case errors.Is(err, objstore.ErrExists) || objstore.IsIndefinite(err):
			occ, perr := c.probe(ctx, b, key, epoch, slot, nonce)
			if occ != Unknown {
				return occ, nil
			}
			if perr != nil {
				err = perr
			}
		}
		if !r.wait(ctx) {
			return Unknown, fmt.Errorf("chain: poison %s/%s: %w", b.Name(), key, err)
		}
	}
}

// SlotFooter is one committed slot as the walk reads it.
type SlotFooter struct {
	Slot     uint64
	Bucket   string // a bucket holding a flight copy
	Envelope format.Envelope
	Footer   format.BundleFooter
}

// walkAhead is how many slots the walk reads ahead of its consumer.
const walkAhead = 64

// Walk reads the footer of every committed slot in [from, to) by point
// lookups (never a listing) and hands them to fn in slot order.
func (c *Chain) Walk(ctx context.Context, rec meta.Epoch, from, to uint64, fn func(SlotFooter) error) error {
	nonce, err := ParseNonce(rec.Params.Nonce)
	if err != nil {
		return err
	}
	bs := c.buckets(rec.Params)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type res struct {
		sf  SlotFooter
		err error
	}
	queue := make(chan chan res, walkAhead)
	go func() {
		defer close(queue)
		for s := from; s < to; s++ {
			ch := make(chan res, 1)
			select {
			case queue <- ch:
			case <-ctx.Done():
				return
			}
			go func() {
				sf, err := c.ReadFooter(ctx, bs, rec.Epoch, s, nonce)
				ch <- res{sf, err}
			}()
		}
	}()
	for ch := range queue {
		r := <-ch
		if r.err != nil {
			return r.err
		}
		if err := fn(r.sf); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// ReadFooter finds a flight copy of a committed slot in any bucket of the
// set and reads its footer, retrying while no copy is reachable.
func (c *Chain) ReadFooter(ctx context.Context, bs []objstore.Bucket, epoch, slot uint64, nonce format.Nonce) (SlotFooter, error) {
	key := c.slotKey(epoch, slot)
	r := c.newRetrier("footer " + key)
	var lastErr error
	for attempt := 0; ; attempt++ {
		for j := range bs {
			b := bs[(int(slot)+attempt+j)%len(bs)] // spread reads over the set
			actx, cancel := c.attempt(ctx)
			head, err := b.Get(actx, key, 0, format.EnvelopeSize)
			cancel()
			if err != nil {
				lastErr = err
				continue
			}
			env, err := format.DecodeEnvelope(head)
			if err != nil || env.Kind != format.KindFlight || env.Epoch != epoch || env.Slot != slot || env.Nonce != nonce {
				continue // poison or a stranger: try another bucket
			}
			actx, cancel = c.attempt(ctx)
			raw, err := b.Get(actx, key, int64(env.FooterOffset), int64(env.FooterLen))
			cancel()
			if err != nil {
				lastErr = err
				continue
			}
			f, err := format.DecodeBundleFooter(raw)
			if err != nil {
				return SlotFooter{}, fmt.Errorf("chain: footer of %s/%s: %w", b.Name(), key, err)
			}
			return SlotFooter{Slot: slot, Bucket: b.Name(), Envelope: env, Footer: f}, nil
		}
		if !r.wait(ctx) {
			return SlotFooter{}, fmt.Errorf("chain: no readable flight copy of committed slot %s: %v", key, lastErr)
		}
	}
}

// ProbeGarbage makes every slot in (cut, cut+window) dead: slots the writer
// may have uploaded in parallel but never released. Flight copies found
// there are deleted and the bucket poisoned, so no reader ever meets them
// and no late upload can land.
func (c *Chain) ProbeGarbage(ctx context.Context, rec meta.Epoch, cut uint64) error {
	nonce, err := ParseNonce(rec.Params.Nonce)
	if err != nil {
		return err
	}
	bs := c.buckets(rec.Params)
	var wg sync.WaitGroup
	errs := make(chan error, len(bs)*rec.Params.Window)
	for s := cut + 1; s < cut+uint64(rec.Params.Window); s++ {
		key := c.slotKey(rec.Epoch, s)
		poison := format.EncodePoison(rec.Epoch, s, c.fenceNonce)
		for _, b := range bs {
			wg.Go(func() {
				r := c.newRetrier("reap " + b.Name() + " " + key)
				for {
					occ, err := c.poisonCopy(ctx, b, key, rec.Epoch, s, nonce, poison)
					if err != nil {
						errs <- err
						return
					}
					if occ == Poison {
						return
					}
					actx, cancel := c.attempt(ctx)
					err = b.Delete(actx, key)
					cancel()
					if err != nil && !r.wait(ctx) {
						errs <- fmt.Errorf("chain: reap %s/%s: %w", b.Name(), key, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	return errors.Join(func() []error {
		var all []error
		for e := range errs {
			all = append(all, e)
		}
		return all
	}()...)
}

// Classify reads the envelope of a slot in every bucket without writing:
// for readers, tests and diagnostics. Unreachable buckets stay Unknown.
func (c *Chain) Classify(ctx context.Context, rec meta.Epoch, slot uint64) (*Tally, error) {
	nonce, err := ParseNonce(rec.Params.Nonce)
	if err != nil {
		return nil, err
	}
	bs := c.buckets(rec.Params)
	t := NewTally(len(bs), rec.Params.W)
	key := c.slotKey(rec.Epoch, slot)
	var errs []error
	for i, b := range bs {
		occ, err := c.probe(ctx, b, key, rec.Epoch, slot, nonce)
		if err != nil {
			errs = append(errs, err)
		}
		t.Observe(i, occ)
	}
	return t, errors.Join(errs...)
}

// Trim deletes slots [rec.Trimmed, upTo) from every bucket of the set and
// advances the epoch's trimmed cursor. Callers keep upTo ≤ rewritten and
// wait out the read grace first; the auditor is the only caller.
func (c *Chain) Trim(ctx context.Context, rec meta.Epoch, upTo uint64) error {
	if upTo <= rec.Trimmed {
		return nil
	}
	keys := make([]string, 0, upTo-rec.Trimmed)
	for s := rec.Trimmed; s < upTo; s++ {
		keys = append(keys, c.slotKey(rec.Epoch, s))
	}
	for _, b := range c.buckets(rec.Params) {
		for i := 0; i < len(keys); i += 1000 {
			if err := b.DeleteMany(ctx, keys[i:min(i+1000, len(keys))]); err != nil {
				return fmt.Errorf("chain %s/%s: trim epoch %d in %s: %w", c.Star, c.Class, rec.Epoch, b.Name(), err)
			}
		}
	}
	_, err := c.UpdateEpoch(ctx, rec.Epoch, func(e *meta.Epoch) bool {
		if e.Trimmed >= upTo {
			return false
		}
		e.Trimmed = upTo
		return true
	})
	return err
}
