// Package quarantine holds the operator's commands on quarantined
// streams (star settle quarantine list, retry, force): list the failing
// streams, retry one (settle it now over the slots its row pins, then
// lift the quarantine and delete the pinned slots the trim-check already
// passed), or force one out when nothing of it still reads a pinned slot.
// Setting a stream aside, pinning its slots and keeping them from the
// trim-check is shared/settle's (docs/settle.md "Quarantine").
package quarantine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// ErrNotQuarantined means the stream has no quarantine row.
var ErrNotQuarantined = errors.New("settle: the stream is not quarantined")

// Quarantined is one quarantined (or failing) stream, for the operator.
type Quarantined struct {
	Stream string
	meta.SettleFail
}

// List returns the streams with failed settles, quarantined or
// still counting, by id.
func List(ctx context.Context, ms meta.Store) ([]Quarantined, error) {
	fails, err := settle.Failures(ctx, ms)
	if err != nil {
		return nil, err
	}
	out := make([]Quarantined, 0, len(fails))
	for id, f := range fails {
		out = append(out, Quarantined{Stream: id, SettleFail: f})
	}
	slices.SortFunc(out, func(a, b Quarantined) int { return cmp.Compare(a.Stream, b.Stream) })
	return out, nil
}

// Retry settles a quarantined stream now, over the slots its row pins
// (each pinned chain epoch as an era of cap-ripe markers naming only it).
// Success lifts the quarantine and releases the pins (slots the trim-check
// already passed are deleted here, unless another row pins them); failure
// leaves it quarantined with the new error.
func Retry(ctx context.Context, st *settle.Stores, id string) (settle.Report, error) {
	var rep settle.Report
	if err := st.Check(); err != nil {
		return rep, err
	}
	k := meta.SettleFailKey(id)
	it, err := st.Meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return rep, fmt.Errorf("%w: %s", ErrNotQuarantined, id)
	}
	if err != nil {
		return rep, fmt.Errorf("settle: read quarantine of %s: %w", id, err)
	}
	var f meta.SettleFail
	if err := meta.Decode(it.Val, &f); err != nil {
		return rep, err
	}
	now := st.Clock()
	var errs []error
	for _, g := range pinGroups(f.Pins) {
		if err := settle.SettlePinned(ctx, st, id, g, now, &rep); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		f.Err, f.At = settle.FailureText(err), now.UnixMilli()
		if perr := settle.PutFailure(ctx, st.Meta, id, it.Ver, f); perr != nil {
			st.Log().Warn("settle: record a failed retry", "stream", id, "err", perr)
		}
		return rep, fmt.Errorf("settle: retry %s: %w", id, err)
	}
	return rep, release(ctx, st, id, it.Ver, f)
}

// pinGroups splits pins by chain epoch, each ascending by slot.
func pinGroups(pins []meta.SlotPin) [][]meta.SlotPin {
	var out [][]meta.SlotPin
	for _, p := range pins {
		if n := len(out); n > 0 {
			if q := out[n-1][0]; q.Star == p.Star && q.Class == p.Class && q.Epoch == p.Epoch {
				out[n-1] = append(out[n-1], p)
				continue
			}
		}
		out = append(out, []meta.SlotPin{p})
	}
	return out
}

// Force lifts a quarantine without a settle: it deletes the row and
// releases its pins, but only when no standing span ref of the stream
// rides a pinned slot (the stream is deleted, or its bytes there were
// settled or trimmed since), so no byte a reader can reach is dropped.
func Force(ctx context.Context, st *settle.Stores, id string) error {
	if err := st.Check(); err != nil {
		return err
	}
	k := meta.SettleFailKey(id)
	it, err := st.Meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return fmt.Errorf("%w: %s", ErrNotQuarantined, id)
	}
	if err != nil {
		return fmt.Errorf("settle: read quarantine of %s: %w", id, err)
	}
	var f meta.SettleFail
	if err := meta.Decode(it.Val, &f); err != nil {
		return err
	}
	alive, _, err := st.Streams.StreamState(ctx, id)
	if err != nil {
		return fmt.Errorf("settle: force %s: %w", id, err)
	}
	if alive {
		refs, err := settle.ReadRefs(ctx, st.Meta, id)
		if err != nil {
			return fmt.Errorf("settle: force %s: %w", id, err)
		}
		for _, r := range refs {
			sp := r.Span
			if sp == nil {
				continue
			}
			for _, sl := range sp.Slots {
				for _, p := range f.Pins {
					if p.Star == sp.Star && p.Class == sp.Class && p.Epoch == sp.Epoch && p.From <= sl.Slot && sl.Slot < p.End {
						return fmt.Errorf("settle: force %s: refused: its span ref at seq %d still reads pinned slot %d of %s/%s epoch %d (retry it instead)",
							id, r.FirstSeq, sl.Slot, sp.Star, sp.Class, sp.Epoch)
					}
				}
			}
		}
	}
	return release(ctx, st, id, it.Ver, f)
}

// release deletes a stream's row (by version) and then the pinned slots
// the trim-check passed while they were pinned, unless another row pins
// them; slots above the trimmed cursor are left to the trim-check.
func release(ctx context.Context, st *settle.Stores, id string, ver int64, f meta.SettleFail) error {
	k := meta.SettleFailKey(id)
	if err := st.Meta.Delete(ctx, k.PK, k.SK, meta.IfVer(ver)); err != nil {
		return fmt.Errorf("settle: lift quarantine of %s: %w", id, err)
	}
	pins, err := settle.ReadPins(ctx, st.Meta)
	if err != nil {
		return err
	}
	for _, g := range pinGroups(f.Pins) {
		ch := settle.ChainRef{Star: g[0].Star, Class: g[0].Class}
		e, err := settle.ReadEpoch(ctx, st.Meta, ch, g[0].Epoch)
		if err != nil {
			return err
		}
		others := pins.In(ch, e.Epoch)
		for _, p := range g {
			if p.From >= e.Trimmed {
				continue
			}
			if err := settle.DeleteSlots(ctx, st, ch, e, p.From, min(p.End, e.Trimmed), others); err != nil {
				return err
			}
		}
	}
	st.Log().Info("settle: quarantine lifted", "stream", id)
	return nil
}
