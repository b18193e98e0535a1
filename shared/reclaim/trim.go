package reclaim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// TrimReport is what one trim-check did.
type TrimReport struct {
	Epochs  int    // epochs whose cursors moved
	Trimmed uint64 // slots deleted from every bucket of their set
	// Collected is the chain garbage of a decommissioned star it reclaimed.
	Collected CollectReport
}

// TrimCheck retires a chain's slots (docs/design.md §7, §10). Per epoch, as pure
// cursor arithmetic, never probing a slot: it advances the rewritten cursor
// to the first live marker (or the checkpoint when none is left below it)
// and records when it saw that; then it deletes [trimmed, r) from every
// bucket of the epoch's set, where r is the furthest rewritten position
// recorded at least the read grace ago, so a reader holding a span ref it
// fetched moments before the settle is never cut off. The auditor is the
// only deleter of slots.
func TrimCheck(ctx context.Context, st *settle.Stores, ch settle.ChainRef, now time.Time) (rep TrimReport, err error) {
	if err := st.Check(); err != nil {
		return rep, err
	}
	if err := ch.Validate(); err != nil {
		return rep, err
	}
	cfg, m := st.Config.WithDefaults(), st.Instruments()
	t0 := time.Now()
	defer func() { m.JobDone(ch.Class, settle.KindTrim, time.Since(t0), err) }()
	epochs, err := settle.ListEpochs(ctx, st.Meta, ch)
	if err != nil {
		return rep, err
	}
	// Slots pinned by quarantined streams are kept (settle.Pins).
	pins, err := settle.ReadPins(ctx, st.Meta)
	if err != nil {
		return rep, err
	}
	c := chain.New(ch.Star, ch.Class, settle.AuditorID, st.Meta, st.Objects)
	var errs []error
	for _, e := range epochs {
		n, err := trimEpoch(ctx, st, c, ch, e, now, cfg.ReadGrace, pins.In(ch, e.Epoch))
		if n > 0 {
			rep.Epochs++
			rep.Trimmed += n
			m.SlotsTrimmed(ch.Class, n)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 && settle.CollectDue(epochs) {
		// The epochs as read before this run's trims: a chain whose last
		// trim just landed is collected by the next run.
		if rep.Collected, err = collect(ctx, st, c, ch); err != nil {
			errs = append(errs, fmt.Errorf("settle: collect %s's garbage: %w", ch, err))
		}
	}
	return rep, errors.Join(errs...)
}

// trimEpoch runs the trim-check on one epoch record (read before its
// markers, so no marker below its checkpoint is missed) and returns how
// many slots it deleted.
func trimEpoch(ctx context.Context, st *settle.Stores, c *chain.Chain, ch settle.ChainRef, e meta.Epoch, now time.Time, grace time.Duration, pins []meta.SlotPin) (uint64, error) {
	if e.Rewritten < e.Checkpoint {
		r, err := settle.FirstLive(ctx, st, ch, e)
		if err != nil {
			return 0, err
		}
		if r > e.Rewritten {
			from := e.Rewritten
			frontier := meta.MarkerKey(ch.Star, ch.Class, e.Epoch, r).SK
			e, err = c.UpdateEpoch(ctx, e.Epoch, func(x *meta.Epoch) bool {
				if x.Rewritten >= r {
					return false
				}
				x.Rewritten = r
				x.Rewrites = append(x.Rewrites, meta.Rewrite{Upto: r, At: millis(now)})
				x.Frontier = max(x.Frontier, frontier)
				return true
			})
			if err != nil {
				return 0, fmt.Errorf("settle: advance rewritten of %s epoch %d to %d: %w", ch, e.Epoch, r, err)
			}
			settle.SweepShards(ctx, st, ch, e.Epoch, from, r)
		}
	}
	var trimmed uint64
	if upto, ok := settle.DueTrim(e, now, grace); ok && upto > e.Trimmed {
		from := e.Trimmed
		if len(pins) > 0 {
			// Delete around the pinned slots, then move the cursor (the
			// lifted quarantine deletes the pinned slots it passed).
			if err := settle.DeleteSlots(ctx, st, ch, e, from, upto, pins); err != nil {
				return 0, err
			}
			if _, err := c.UpdateEpoch(ctx, e.Epoch, func(x *meta.Epoch) bool {
				if x.Trimmed >= upto {
					return false
				}
				x.Trimmed = upto
				return true
			}); err != nil {
				return 0, fmt.Errorf("settle: trim %s epoch %d [%d,%d): %w", ch, e.Epoch, from, upto, err)
			}
			e.Trimmed = upto // c.Trim below only reaps the garbage, if due
		}
		if err := c.Trim(ctx, e, upto); err != nil {
			return 0, fmt.Errorf("settle: trim %s epoch %d [%d,%d): %w", ch, e.Epoch, from, upto, err)
		}
		e.Trimmed, trimmed = upto, upto-from
	} else if settle.GarbageDue(e) {
		// Trimmed to the cut before the epoch was settled: reap now.
		if err := c.Trim(ctx, e, e.Trimmed); err != nil {
			return 0, fmt.Errorf("settle: reap %s epoch %d's garbage: %w", ch, e.Epoch, err)
		}
	}
	if !settle.StaleRewrites(e) {
		return trimmed, nil
	}
	_, err := c.UpdateEpoch(ctx, e.Epoch, func(x *meta.Epoch) bool {
		if !settle.StaleRewrites(*x) {
			return false
		}
		x.Rewrites = slices.DeleteFunc(x.Rewrites, func(rw meta.Rewrite) bool { return rw.Upto <= x.Trimmed })
		return true
	})
	if err != nil {
		return trimmed, fmt.Errorf("settle: drop trimmed rewrites of %s epoch %d: %w", ch, e.Epoch, err)
	}
	return trimmed, nil
}
