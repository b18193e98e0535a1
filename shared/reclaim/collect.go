package reclaim

import (
	"context"
	"errors"
	"fmt"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// CollectReport is what one chain-garbage collection did.
type CollectReport struct {
	Epochs  int // epoch records deleted
	Objects int // slot keys deleted (poison and garbage of those epochs, per bucket)
	Chains  int // chain directory rows deleted
}

// collect reclaims a chain's garbage once its star is decommissioned
// (docs/design.md §11; the seed keeps poison "until the star is decommissioned").
// It is the last step of the chain's trim-check (the trim job owns slots
// and cursors), planned for a chain all of whose epoch records are spent.
// When the star's registry row says it stopped after a decommission
// (meta.Registration.Decommissioned) and the chain's mint head is settled
// by that incarnation or an earlier one:
//
//  1. each epoch record below the head that is settled, trimmed to its
//     cut and reaped, with no batch marker left, loses the keys of its
//     garbage window [cut, cut+window) in every bucket of its set (the
//     fence's and the reap's poison, and anything unreadable), then the
//     record itself: the record is what locates those keys, so it goes
//     last, and a crash between the two re-runs the deletes;
//  2. once no epoch record below the head is left and the head epoch is
//     spent too, the chain's directory row goes, so plans stop visiting
//     it; the head row and the head epoch's record stay (a restart of the
//     star id mints from the head, and a chain settle treats a head epoch
//     without a record as one its minter never recorded, to be fenced).
//
// Why it is safe: poison exists to stop a late writer of its epoch from
// committing (and acknowledging) a slot above the cut. Every epoch at or
// below the head was minted by an incarnation no later than the one that
// stopped after its decommission; a decommissioned star's host is
// terminated, so no process of those incarnations runs, and a PUT landing
// after its writer is gone is acknowledged to nobody. Slots below the cut
// are long trimmed, markers resolved and span refs settled, so no reader
// or settler reads the record or the keys again. A restart of the star id
// is a later incarnation (its registry row is live, so collection stops)
// and mints a later epoch, and Mint writes the directory row on every
// mint; a directory row deleted while a mint raced it is put back when
// the head read after the delete has moved.
func collect(ctx context.Context, st *settle.Stores, c *chain.Chain, ch settle.ChainRef) (CollectReport, error) {
	var rep CollectReport
	err := collectChain(ctx, st, c, ch, &rep)
	m := st.Instruments()
	m.ChainGarbage(ch.Class, "epoch", rep.Epochs)
	m.ChainGarbage(ch.Class, "slot", rep.Objects)
	m.ChainGarbage(ch.Class, "directory", rep.Chains)
	return rep, err
}

func collectChain(ctx context.Context, st *settle.Stores, c *chain.Chain, ch settle.ChainRef, rep *CollectReport) error {
	h, ok, err := settle.Decommissioned(ctx, st, c, ch)
	if err != nil || !ok {
		return err
	}
	epochs, err := settle.ListEpochs(ctx, st.Meta, ch)
	if err != nil {
		return err
	}
	left := false
	for _, e := range epochs {
		switch {
		case e.Epoch == h.Epoch:
			left = left || !settle.Spent(e)
			continue
		case e.Epoch > h.Epoch || !settle.Spent(e):
			left = true
			continue
		}
		ms, err := markersOf(ctx, st.Meta, ch, e.Epoch)
		if err != nil {
			return err
		}
		if ms {
			left = true
			continue
		}
		n, err := collectEpoch(ctx, st, c, e)
		rep.Objects += n
		if err != nil {
			return err
		}
		rep.Epochs++
	}
	if left {
		return nil
	}
	return dropDirRow(ctx, st, c, ch, h, rep)
}

// markersOf reports whether any batch marker of epoch is left.
func markersOf(ctx context.Context, ms meta.Store, ch settle.ChainRef, epoch uint64) (bool, error) {
	from := meta.MarkerKey(ch.Star, ch.Class, epoch, 0).SK
	pg, err := ms.Query(ctx, meta.Query{PK: meta.ChainPK(ch.Star, ch.Class), From: from, To: from[:len(from)-20] + "~", Limit: 1})
	if err != nil {
		return false, err
	}
	return len(pg.Items) > 0, nil
}

// collectEpoch deletes epoch e's garbage window from every bucket of its
// set, then its record (if unchanged), and returns the keys it deleted.
func collectEpoch(ctx context.Context, st *settle.Stores, c *chain.Chain, e meta.Epoch) (int, error) {
	cut := *e.Cut
	keys := make([]string, 0, e.Params.Window)
	for i := range uint64(max(e.Params.Window, 0)) {
		keys = append(keys, chain.SlotKey(c.Star, c.Class, e.Epoch, cut+i))
	}
	n := 0
	for _, b := range e.Params.Buckets {
		if err := st.Objects.Bucket(b).DeleteMany(ctx, keys); err != nil {
			return n, fmt.Errorf("delete epoch %d's garbage window in %s: %w", e.Epoch, b, err)
		}
		n += len(keys)
	}
	rec, ver, err := c.Epoch(ctx, e.Epoch)
	if errors.Is(err, meta.ErrNotFound) {
		return n, nil
	}
	if err != nil {
		return n, err
	}
	if !settle.Spent(rec) {
		return n, fmt.Errorf("epoch %d changed while its garbage was collected", e.Epoch)
	}
	k := meta.EpochKey(c.Star, c.Class, e.Epoch)
	if err := st.Meta.Delete(ctx, k.PK, k.SK, meta.IfVer(ver)); err != nil && !errors.Is(err, meta.ErrNotFound) {
		return n, fmt.Errorf("delete epoch %d's record: %w", e.Epoch, err)
	}
	return n, nil
}

// dropDirRow deletes ch's chain directory row, then reads the head again:
// a head that moved since h (a restart minted) means a mint may have
// written the row before the delete, so the row is put back.
func dropDirRow(ctx context.Context, st *settle.Stores, c *chain.Chain, ch settle.ChainRef, h meta.Head, rep *CollectReport) error {
	dk := meta.ChainDirKey(ch.Star, ch.Class)
	if _, err := st.Meta.Get(ctx, dk.PK, dk.SK); errors.Is(err, meta.ErrNotFound) {
		return nil
	} else if err != nil {
		return err
	}
	if err := st.Meta.Delete(ctx, dk.PK, dk.SK, meta.Always()); err != nil && !errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("delete chain directory row: %w", err)
	}
	now, _, ok, err := c.Head(ctx)
	if err == nil && ok && now.Epoch == h.Epoch && now.Owner == h.Owner && now.State == h.State {
		rep.Chains++
		return nil
	}
	if _, perr := st.Meta.Put(ctx, dk.PK, dk.SK, nil, meta.Always()); perr != nil {
		return errors.Join(err, fmt.Errorf("restore chain directory row: %w", perr))
	}
	return err
}
