// Package chainsettle settles a chain whose writer is gone (a dead or
// stopped star, or a restarting one settling its own): fence each
// unsettled epoch to its cut, walk the committed slots through the same
// absorb consumer the live leader uses, make the garbage window dead, and
// mark the epoch settled. Concurrent settlers of one chain take turns on
// its settle claim (claim.go), the CAS'd row shared/settle's jobs also
// hold per era. Group settle, the plan and quarantine stay in
// shared/settle, which runs after this has restored the refs.
package chainsettle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
)

// A walk's absorb pass takes the walked slots until they carry
// walkPassExtents extents (its memory: the walked footers' extents), or
// walkPassSlots slots. A pass writes a ref per stream it carries, so at
// many streams the successor's writes are about streams × passes: at
// 10,000 streams a 2,251-flight backlog of S3-sized flights took 352,787
// writes (112 s on DynamoDB Local) at 64 slots a pass and 30,064 at 1,024.
// Counting extents keeps S3's large flights (~200 streams each) near
// 1,300 slots a pass, while a directory store's small ones (one append's
// stream or a few, up to its 131,072-flight backlog) go 6,144 a pass.
// walkPassSlots bounds a pass in slots where the epoch's record does not
// say what its writer's own passes took (meta.EpochParams.PassSlots: half
// its backlog, 6,144 at the S3 default, 65,536 on a directory store): a
// marker this walk records and then leaves (a crash) stays one a live
// writer of the epoch can complete itself.
const (
	walkPassExtents = 1 << 18
	walkPassSlots   = 6144
)

// passFull reports whether a walk's pending slots (carrying extents
// extents) make a pass: need is the slots a recorded marker asks for (0:
// none), most the epoch's own pass bound (0: unknown). Pure.
func passFull(slots, extents, need, most int) bool {
	if most <= 0 {
		most = walkPassSlots
	}
	return slots >= need && (slots >= most || extents >= walkPassExtents)
}

// Chain restores "refs cover every acknowledged byte" for every unsettled
// epoch of a chain whose writer is gone, its current mint head included:
// ChainThrough up to whatever the head is now. Only a caller that knows
// no later incarnation can have minted (a restarting star settling its own
// chain) may use it; a successor passes the head it judged to ChainThrough.
func Chain(ctx context.Context, c *chain.Chain, abs *absorb.Absorber) error {
	return ChainThrough(ctx, c, abs, math.MaxUint64)
}

// ChainThrough settles every unsettled epoch of the chain up to and
// including epoch last: fence each to its cut (or adopt the recorded
// one), walk the committed slots above its checkpoint through the same
// absorb consumer the live leader uses, make the garbage window above the
// cut dead, and mark the epoch settled; when last is the mint head, mark
// the head settled too. An epoch above last (minted by a later
// incarnation after the caller judged the chain) is never fenced. Every
// step is idempotent and CAS-guarded, and concurrent settlers of one
// chain serialise on its claim: the second finds the work done.
func ChainThrough(ctx context.Context, c *chain.Chain, abs *absorb.Absorber, last uint64) error {
	return serialised(ctx, c, func(ctx context.Context) error { return chainThrough(ctx, c, abs, last) })
}

func chainThrough(ctx context.Context, c *chain.Chain, abs *absorb.Absorber, last uint64) error {
	h, _, ok, err := c.Head(ctx)
	if err != nil || !ok {
		return err
	}
	through := min(last, h.Epoch)
	epochs, err := listEpochs(ctx, c)
	if err != nil {
		return err
	}
	listed := false
	for _, e := range epochs {
		listed = listed || e.Epoch == through
		if e.Settled || e.Epoch > through {
			continue
		}
		if err := settleEpoch(ctx, c, abs, e.Epoch); err != nil {
			return err
		}
	}
	if !listed && through == h.Epoch { // its minter crashed before writing the record
		if err := settleEpoch(ctx, c, abs, h.Epoch); err != nil {
			return err
		}
	}
	if through < h.Epoch {
		return nil
	}
	return markHeadSettled(ctx, c, h.Epoch)
}

// Epoch settles one epoch: fence or adopt its cut, walk, absorb, probe,
// mark settled; callers decide whether the epoch may be fenced.
//
// The fence claims the epoch's cut on the head, or adopts the cut already
// recorded (all a fence of an epoch below the mint head does); the walk
// feeds the committed slots [checkpoint, cut) to abs in passes, a pass
// whose marker another run (crashed, or a leader still absorbing beside
// the walk) recorded with more slots (absorb.ErrNeedMore) waiting for them
// so the walk writes the very same rows; the garbage
// window above the cut is made dead; and the record is marked settled.
// Every step is idempotent and CAS-guarded, so Epoch is safe to run twice
// at once and again after settlement (concurrent settlers serialise on
// the chain's claim). Fencing the mint head's epoch deposes its writer: a
// caller that must leave a live star alone refuses the head epoch before
// calling Epoch.
func Epoch(ctx context.Context, c *chain.Chain, abs *absorb.Absorber, epoch uint64) error {
	return serialised(ctx, c, func(ctx context.Context) error { return settleEpoch(ctx, c, abs, epoch) })
}

func settleEpoch(ctx context.Context, c *chain.Chain, abs *absorb.Absorber, epoch uint64) error {
	// A settled epoch is done: whoever waited on the claim finds it so.
	if rec, _, err := c.Epoch(ctx, epoch); err == nil && rec.Settled {
		return nil
	} else if err != nil && !errors.Is(err, meta.ErrNotFound) {
		return err
	}
	cut, err := c.Fence(ctx, epoch, false)
	if err != nil {
		return fmt.Errorf("settle %s/%s epoch %d: fence: %w", c.Star, c.Class, epoch, err)
	}
	rec, _, err := c.Epoch(ctx, epoch)
	if err != nil {
		return err
	}
	var pending []absorb.Slot
	extents := 0 // in pending
	need := 0    // slots the next pass must have: a recorded marker's
	flush := func(all bool) error {
		for len(pending) > 0 && (all || passFull(len(pending), extents, need, rec.Params.PassSlots)) {
			n, err := abs.Pass(ctx, epoch, pending)
			if nm := (*absorb.NeedMoreError)(nil); errors.As(err, &nm) && !all {
				need = nm.Slots
				return nil
			}
			need = 0
			if err != nil {
				return fmt.Errorf("settle %s/%s epoch %d: absorb from slot %d: %w", c.Star, c.Class, epoch, pending[0].Slot, err)
			}
			for _, s := range pending[:n] {
				extents -= len(s.Extents)
			}
			pending = pending[n:]
		}
		return nil
	}
	err = c.Walk(ctx, rec, rec.Checkpoint, cut, func(sf chain.SlotFooter) error {
		pending = append(pending, absorb.Slot{Slot: sf.Slot, Extents: sf.Footer.Extents})
		extents += len(sf.Footer.Extents)
		return flush(false)
	})
	if err != nil {
		return fmt.Errorf("settle %s/%s epoch %d: walk: %w", c.Star, c.Class, epoch, err)
	}
	if err := flush(true); err != nil {
		return err
	}
	if err := c.ProbeGarbage(ctx, rec, cut); err != nil {
		return fmt.Errorf("settle %s/%s epoch %d: garbage probe: %w", c.Star, c.Class, epoch, err)
	}
	_, err = c.UpdateEpoch(ctx, epoch, func(e *meta.Epoch) bool {
		if e.Settled {
			return false
		}
		e.Settled = true
		return true
	})
	if err != nil {
		return fmt.Errorf("settle %s/%s epoch %d: mark settled: %w", c.Star, c.Class, epoch, err)
	}
	return nil
}

func markHeadSettled(ctx context.Context, c *chain.Chain, epoch uint64) error {
	for {
		h, ver, _, err := c.Head(ctx)
		if err != nil {
			return err
		}
		if h.Epoch != epoch || h.State == meta.HeadSettled {
			return nil
		}
		if h.Cut == nil {
			return fmt.Errorf("settle %s/%s: head epoch %d has no cut after settlement", c.Star, c.Class, epoch)
		}
		h.State = meta.HeadSettled
		k := meta.HeadKey(c.Star, c.Class)
		_, err = c.Meta.Put(ctx, k.PK, k.SK, meta.Encode(h), meta.IfVer(ver))
		if err == nil {
			return nil
		}
		if !errors.Is(err, meta.ErrConditionFailed) {
			return fmt.Errorf("settle %s/%s: mark head settled: %w", c.Star, c.Class, err)
		}
	}
}

// listEpochs reads every epoch record of the chain in ascending order.
func listEpochs(ctx context.Context, c *chain.Chain) ([]meta.Epoch, error) {
	q := meta.Query{PK: meta.ChainPK(c.Star, c.Class), From: "e#", To: "e#~"}
	var out []meta.Epoch
	for {
		pg, err := c.Meta.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("settle %s/%s: list epochs: %w", c.Star, c.Class, err)
		}
		for _, it := range pg.Items {
			if !strings.HasPrefix(it.SK, "e#") {
				continue
			}
			var e meta.Epoch
			if err := meta.Decode(it.Val, &e); err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
}
