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

// ProbeGarbage makes every slot in [cut, cut+window) dead (or, where an
// unreadable occupant stands, poisoned in every other bucket): the slots the
// writer may have uploaded in parallel but never released (the cut slot
// itself included: a writer's own fence may cut at a slot it could not
// decide physically). Flight copies found there are deleted and the
// bucket poisoned, so no reader ever meets them and no late upload can
// land. A slot is done once K−W+1 poisons stand and every bucket that
// answers is reaped (a bucket still unreachable a second after that is
// left: its copy is garbage no read ever points to, so one zone down does
// not hold the settle up), or once every bucket holds poison or an
// unreadable object, which is never deleted (it may be a poison).
func (c *Chain) ProbeGarbage(ctx context.Context, rec meta.Epoch, cut uint64) error {
	nonce, err := ParseNonce(rec.Params.Nonce)
	if err != nil {
		return err
	}
	bs := c.buckets(rec.Params)
	var wg sync.WaitGroup
	errs := make(chan error, rec.Params.Window)
	for s := cut; s < cut+uint64(rec.Params.Window); s++ {
		wg.Go(func() {
			if err := c.reapSlot(ctx, bs, rec.Params.W, copyID{rec.Epoch, s, nonce}); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	var all []error
	for e := range errs {
		all = append(all, e)
	}
	return errors.Join(all...)
}

// reapGrace is how long a garbage probe keeps trying a bucket that does
// not answer after the slot is already dead.
const reapGrace = time.Second

func (c *Chain) reapSlot(ctx context.Context, bs []objstore.Bucket, w int, want copyID) error {
	key := c.slotKey(want.epoch, want.slot)
	poison := format.EncodePoison(want.epoch, want.slot, c.fenceNonce)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type res struct {
		i   int
		occ Occupant
		err error
	}
	results := make(chan res, len(bs))
	for i, b := range bs {
		go func() {
			occ, err := c.reapCopy(rctx, b, key, want, poison)
			results <- res{i, occ, err}
		}()
	}
	t := NewTally(len(bs), w)
	// Once the slot is dead, a bucket that has not answered a grace later
	// is given up: its copy is garbage no read points to, and one zone
	// down must not hold the settle up.
	grace := time.NewTimer(reapGrace)
	grace.Stop()
	defer grace.Stop()
	graced := false
	var lastErr error
	for pending := len(bs); pending > 0; {
		select {
		case r := <-results:
			pending--
			if r.err != nil {
				lastErr = r.err
			}
			t.Observe(r.i, r.occ)
			if t.Fate() == Dead && !graced {
				graced = true
				grace.Reset(reapGrace)
			}
		case <-grace.C:
			cancel()
		}
	}
	if t.Fate() == Dead {
		return nil
	}
	// Poison or unreadable in every bucket is all a probe can leave: an
	// unreadable object may be a poison, and is never deleted.
	done := true
	for _, o := range t.Occupants() {
		done = done && (o == Poison || o == Unreadable)
	}
	if done {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("chain: garbage probe of %s: not dead (%v): %v", key, t.Occupants(), lastErr)
}

// reapCopy leaves poison in one bucket at key, deleting a flight copy it
// finds there first; an unreadable occupant is left alone.
func (c *Chain) reapCopy(ctx context.Context, b objstore.Bucket, key string, want copyID, poison []byte) (Occupant, error) {
	r := c.newRetrier("reap " + b.Name() + " " + key)
	for {
		actx, cancel := c.attempt(ctx)
		_, err := b.PutIfAbsent(actx, key, poison)
		cancel()
		occ := Poison
		switch {
		case err == nil:
			return Poison, nil
		case errors.Is(err, objstore.ErrExists) || objstore.IsIndefinite(err):
			occ, err = c.probe(ctx, b, key, want)
		}
		if err == nil {
			switch occ {
			case Poison:
				return Poison, nil
			case Unreadable:
				// Never delete what cannot be read: it may be a poison that
				// keeps the cut slot dead. It counts neither way and stays.
				return Unreadable, nil
			case Flight:
				actx, cancel := c.attempt(ctx)
				err = b.Delete(actx, key)
				cancel()
			}
		}
		if err == nil {
			continue // deleted, or absent after an indefinite write: poison again
		}
		if !r.wait(ctx) {
			return Unknown, fmt.Errorf("chain: reap %s/%s: %w", b.Name(), key, err)
		}
	}
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
