package chain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// SlotFooter is one committed slot as the walk reads it.
type SlotFooter struct {
	Slot     uint64
	Bucket   string // a bucket holding a flight copy
	Envelope format.Envelope
	Footer   format.BundleFooter
}

// walkAhead is how many slots the walk reads ahead of its consumer: it
// bounds the footers held in memory.
const walkAhead = 64

// Walk reads the footer of every committed slot in [from, to) by point
// lookups (never a listing) and hands them to fn in slot order. A bucket
// that failed a read is tried last for the rest of the walk, so a zone
// that is down costs one timeout, not one per slot.
func (c *Chain) Walk(ctx context.Context, rec meta.Epoch, from, to uint64, fn func(SlotFooter) error) error {
	nonce, err := ParseNonce(rec.Params.Nonce)
	if err != nil {
		return err
	}
	bs := c.buckets(rec.Params)
	sick := make([]atomic.Bool, len(bs))
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
				sf, err := c.readFooter(ctx, bs, copyID{rec.Epoch, s, nonce}, sick)
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
	return c.readFooter(ctx, bs, copyID{epoch, slot, nonce}, make([]atomic.Bool, len(bs)))
}

func (c *Chain) readFooter(ctx context.Context, bs []objstore.Bucket, want copyID, sick []atomic.Bool) (SlotFooter, error) {
	key := c.slotKey(want.epoch, want.slot)
	r := c.newRetrier("footer " + key)
	var lastErr error
	for attempt := 0; ; attempt++ {
		for _, j := range readOrder(len(bs), int(want.slot)+attempt, sick) {
			b := bs[j]
			actx, cancel := c.attempt(ctx)
			head, err := b.Get(actx, key, 0, format.EnvelopeSize)
			cancel()
			occ, err := classify(head, err, want, c.readVersion())
			if err != nil {
				sick[j].Store(true)
				lastErr = err
				continue
			}
			if occ != Flight {
				continue // absent, poison, a stranger or damaged: try another bucket
			}
			env, _ := format.DecodeEnvelopeUpTo(head, c.readVersion())
			actx, cancel = c.attempt(ctx)
			raw, err := b.Get(actx, key, int64(env.FooterOffset), int64(env.FooterLen))
			cancel()
			if err != nil {
				sick[j].Store(true)
				lastErr = err
				continue
			}
			sick[j].Store(false)
			f, err := format.DecodeBundleFooter(raw)
			if err != nil {
				lastErr = fmt.Errorf("footer of %s/%s: %w", b.Name(), key, err)
				continue // a damaged copy: another bucket may hold a good one
			}
			return SlotFooter{Slot: want.slot, Bucket: b.Name(), Envelope: env, Footer: f}, nil
		}
		if !r.wait(ctx) {
			return SlotFooter{}, fmt.Errorf("chain: no readable flight copy of committed slot %s: %v", key, lastErr)
		}
	}
}

// readOrder lists bucket indexes starting at start mod n (spreading reads
// over the set), healthy buckets first.
func readOrder(n, start int, sick []atomic.Bool) []int {
	order := make([]int, 0, n)
	for pass := range 2 {
		for j := range n {
			i := (start + j) % n
			if sick[i].Load() == (pass == 1) {
				order = append(order, i)
			}
		}
	}
	return order
}

// ProbeGarbage poisons the slots in [cut, cut+window): the slots the
// writer may have uploaded in parallel but never released (the cut slot
// itself included: a writer's own fence may cut at a slot it could not
// decide physically). It only writes poison, create-once, into buckets
// where the key is absent; it never deletes: a star may not delete slots
// (the auditor's trim is their one deleter, and reaps the flight copies
// left here, ReapGarbage). Nothing here is needed for safety: no slot at
// or above the cut is ever released (release is in slot order and the cut
// is dead, or cut by its own writer, who moved to the next epoch), and no
// ref points there. A slot is done once every bucket answered; a bucket
// still unreachable a second after the first one answered is left, so one
// zone down does not hold a settle up.
func (c *Chain) ProbeGarbage(ctx context.Context, rec meta.Epoch, cut uint64) error {
	return c.eachGarbageSlot(ctx, rec, cut, c.poisonSlot)
}

// ReapGarbage deletes the writer's flight copies left in [cut, cut+window)
// once the epoch is settled: the trim calls it when it reaches the cut.
// It reads each bucket's envelope and replaces only a flight copy of the
// epoch's writer with poison; a poison and anything unreadable stay (the
// poison keeps the cut slot dead; an unreadable object may be a poison). Deleting a copy is safe: the slot is garbage no read points to,
// and a late upload landing there can never be released.
func (c *Chain) ReapGarbage(ctx context.Context, rec meta.Epoch, cut uint64) error {
	return c.eachGarbageSlot(ctx, rec, cut, c.reapSlot)
}

func (c *Chain) eachGarbageSlot(ctx context.Context, rec meta.Epoch, cut uint64, do func(context.Context, []objstore.Bucket, copyID) error) error {
	nonce, err := ParseNonce(rec.Params.Nonce)
	if err != nil {
		return err
	}
	bs := c.buckets(rec.Params)
	var wg sync.WaitGroup
	errs := make([]error, rec.Params.Window)
	for i := range rec.Params.Window {
		wg.Go(func() { errs[i] = do(ctx, bs, copyID{rec.Epoch, cut + uint64(i), nonce}) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// reapGrace is how long a garbage probe keeps trying a bucket that does
// not answer after another one did.
const reapGrace = time.Second

// poisonSlot writes poison into every bucket of one garbage slot where the
// key is absent.
func (c *Chain) poisonSlot(ctx context.Context, bs []objstore.Bucket, want copyID) error {
	key := c.slotKey(want.epoch, want.slot)
	poison := format.EncodePoison(want.epoch, want.slot, c.fenceNonce)
	return c.eachBucket(ctx, bs, key, func(ctx context.Context, b objstore.Bucket) error {
		r := c.newRetrier("poison " + b.Name() + " " + key)
		for {
			actx, cancel := c.attempt(ctx)
			_, err := b.PutIfAbsent(actx, key, poison)
			cancel()
			if err == nil || errors.Is(err, objstore.ErrExists) {
				return nil // ours, or an occupant is there: done either way
			}
			if !r.wait(ctx) {
				return fmt.Errorf("chain: poison %s/%s: %w", b.Name(), key, err)
			}
		}
	})
}

// reapSlot deletes the writer's flight copies of one garbage slot,
// leaving poison in their place.
func (c *Chain) reapSlot(ctx context.Context, bs []objstore.Bucket, want copyID) error {
	key := c.slotKey(want.epoch, want.slot)
	poison := format.EncodePoison(want.epoch, want.slot, c.fenceNonce)
	return c.eachBucket(ctx, bs, key, func(ctx context.Context, b objstore.Bucket) error {
		r := c.newRetrier("reap " + b.Name() + " " + key)
		for {
			err := c.reapCopy(ctx, b, key, want, poison)
			if err == nil {
				return nil
			}
			if !r.wait(ctx) {
				return err
			}
		}
	})
}

// reapCopy replaces the writer's flight copy at key in b with poison, and
// poisons the key where it is absent; a poison or an unreadable object
// stays.
func (c *Chain) reapCopy(ctx context.Context, b objstore.Bucket, key string, want copyID, poison []byte) error {
	occ, err := c.probe(ctx, b, key, want)
	if err != nil || occ == Poison || occ == Unreadable {
		return err
	}
	if occ == Flight {
		actx, cancel := c.attempt(ctx)
		err = b.Delete(actx, key)
		cancel()
		if err != nil {
			return fmt.Errorf("chain: reap %s/%s: %w", b.Name(), key, err)
		}
	}
	actx, cancel := c.attempt(ctx)
	defer cancel()
	if _, err := b.PutIfAbsent(actx, key, poison); err != nil && !errors.Is(err, objstore.ErrExists) {
		return fmt.Errorf("chain: poison reaped %s/%s: %w", b.Name(), key, err)
	}
	return nil
}

// eachBucket runs do on every bucket at once; once one has finished, the
// others get reapGrace more before they are given up. It fails only when
// none finished.
func (c *Chain) eachBucket(ctx context.Context, bs []objstore.Bucket, key string, do func(context.Context, objstore.Bucket) error) error {
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(bs))
	for _, b := range bs {
		go func() { errs <- do(bctx, b) }()
	}
	grace := time.NewTimer(reapGrace)
	grace.Stop()
	defer grace.Stop()
	done := 0
	var lastErr error
	for pending := len(bs); pending > 0; {
		select {
		case err := <-errs:
			pending--
			if err != nil {
				lastErr = err
				continue
			}
			if done++; done == 1 {
				grace.Reset(reapGrace)
			}
		case <-grace.C:
			cancel()
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if done == 0 {
		return fmt.Errorf("chain: garbage slot %s: no bucket answered: %w", key, lastErr)
	}
	return nil
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
		occ, err := c.probe(ctx, b, key, copyID{rec.Epoch, slot, nonce})
		if err != nil {
			errs = append(errs, err)
		}
		t.Observe(i, occ)
	}
	return t, errors.Join(errs...)
}

// Trim deletes slots [rec.Trimmed, upTo) from every bucket of the set and
// advances the epoch's trimmed cursor; reaching the cut of a settled
// epoch, it also reaps the garbage window (ReapGarbage). Callers keep upTo ≤ rewritten and
// wait out the read grace first; the auditor is the only caller.
func (c *Chain) Trim(ctx context.Context, rec meta.Epoch, upTo uint64) error {
	reap := rec.Settled && rec.Cut != nil && max(upTo, rec.Trimmed) >= *rec.Cut && !rec.Reaped
	if upTo <= rec.Trimmed && !reap {
		return nil
	}
	keys := make([]string, 0, max(upTo, rec.Trimmed)-rec.Trimmed)
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
	// At the cut of a settled epoch, the flight copies the garbage probe
	// left above it go too.
	if reap {
		if err := c.ReapGarbage(ctx, rec, *rec.Cut); err != nil {
			return fmt.Errorf("chain %s/%s: reap epoch %d's garbage: %w", c.Star, c.Class, rec.Epoch, err)
		}
	}
	_, err := c.UpdateEpoch(ctx, rec.Epoch, func(e *meta.Epoch) bool {
		if e.Trimmed >= upTo && (!reap || e.Reaped) {
			return false
		}
		e.Trimmed = max(e.Trimmed, upTo)
		e.Reaped = e.Reaped || reap
		return true
	})
	return err
}
