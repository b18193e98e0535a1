package settle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
)

// Quarantine (docs/settle.md "Quarantine"): a stream whose settle fails
// in Config.QuarantineAfter consecutive jobs is set aside. Its row in
// meta.SettleFailPK pins the slots of the markers it rides, the markers
// resolve without it, and the trim-check retires every slot but the
// pinned ones, so one bad stream no longer holds back its epoch's trim.
// Its bytes stay readable from the pinned slots until the operator's
// Retry settles it (or Force finds nothing of it left standing in them):
// shared/settle/quarantine, through Failures, PutFailure, SettlePinned,
// ReadEpoch and ReadRefs below and in group.go.

// failRow is one stream's row of meta.SettleFailPK.
type failRow struct {
	ver int64
	f   meta.SettleFail
}

// readFailures reads the whole meta.SettleFailPK partition.
func readFailures(ctx context.Context, ms meta.Store) (map[string]failRow, error) {
	out := map[string]failRow{}
	q := meta.Query{PK: meta.SettleFailPK, Limit: 256}
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("settle: read failed streams: %w", err)
		}
		for _, it := range pg.Items {
			var f meta.SettleFail
			if err := meta.Decode(it.Val, &f); err != nil {
				return nil, fmt.Errorf("settle: failed-stream row %s: %w", it.SK, err)
			}
			out[it.SK] = failRow{ver: it.Ver, f: f}
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
}

// Failures reads every failing stream's row (meta.SettleFailPK), by id.
func Failures(ctx context.Context, ms meta.Store) (map[string]meta.SettleFail, error) {
	fails, err := readFailures(ctx, ms)
	if err != nil {
		return nil, err
	}
	out := make(map[string]meta.SettleFail, len(fails))
	for id, r := range fails {
		out[id] = r.f
	}
	return out, nil
}

// PutFailure writes a stream's row over the version read (0: absent).
func PutFailure(ctx context.Context, ms meta.Store, id string, ver int64, f meta.SettleFail) error {
	k := meta.SettleFailKey(id)
	cond := meta.IfAbsent()
	if ver != 0 {
		cond = meta.IfVer(ver)
	}
	_, err := ms.Put(ctx, k.PK, k.SK, meta.Encode(f), cond)
	return err
}

// pinsFor adds to pins the slots of the era's markers naming id.
func pinsFor(pins []meta.SlotPin, era *eraSet, id string) []meta.SlotPin {
	for _, lm := range era.markers {
		if !slices.Contains(lm.Streams, id) {
			continue
		}
		p := meta.SlotPin{Star: era.ch.Star, Class: era.ch.Class, Epoch: era.epoch, From: lm.M.FromSlot, End: lm.M.EndSlot}
		if !slices.Contains(pins, p) {
			pins = append(pins, p)
		}
	}
	slices.SortFunc(pins, func(a, b meta.SlotPin) int {
		return cmp.Or(cmp.Compare(a.Star, b.Star), cmp.Compare(a.Class, b.Class), cmp.Compare(a.Epoch, b.Epoch), cmp.Compare(a.From, b.From))
	})
	return pins
}

// setAside pins the era's markers naming the quarantined streams among
// works, so the markers resolve without them; a stream whose pins cannot
// be written fails (its markers stay) instead.
func setAside(ctx context.Context, st *Stores, era *eraSet, works []*streamWork, fails map[string]failRow) {
	for _, w := range works {
		row, ok := fails[w.id]
		if !ok || row.f.Quarantined == 0 {
			continue
		}
		w.judged = true
		pins := pinsFor(slices.Clone(row.f.Pins), era, w.id)
		if len(pins) != len(row.f.Pins) {
			f := row.f
			f.Pins = pins
			if err := PutFailure(ctx, st.Meta, w.id, row.ver, f); err != nil {
				w.err = fmt.Errorf("settle: pin the slots of quarantined stream %s: %w", w.id, err)
				continue
			}
		}
		w.quarantined = true
	}
}

// noteOutcomes counts each stream's failure (quarantining it at the
// limit, its era's slots pinned) and clears the count of a stream that
// settled. Lost conditional writes are left: a concurrent job counted.
func noteOutcomes(ctx context.Context, st *Stores, era *eraSet, works []*streamWork, fails map[string]failRow, now time.Time) {
	limit := st.cfg().QuarantineAfter
	for _, w := range works {
		row, had := fails[w.id]
		switch {
		case w.quarantined:
		case w.err != nil:
			if ctx.Err() != nil {
				continue // the job ran out of time: not the stream's fault
			}
			f := row.f
			f.Failures++
			f.Err, f.At = FailureText(w.err), millis(now)
			if w.basin != "" {
				f.Basin = w.basin
			}
			if f.Failures >= limit {
				f.Quarantined = millis(now)
				f.Pins = pinsFor(f.Pins, era, w.id)
			}
			if err := PutFailure(ctx, st.Meta, w.id, row.ver, f); err != nil {
				st.Log().Warn("settle: count a failed stream", "stream", w.id, "err", err)
				continue
			}
			if f.Quarantined != 0 {
				st.metrics().quarantined.WithLabelValues(string(era.ch.Class)).Inc()
				st.Log().Error("settle: stream quarantined", "stream", w.id, "failures", f.Failures, "err", w.err)
				w.quarantined, w.err = true, nil
			}
		case had && row.f.Quarantined == 0:
			k := meta.SettleFailKey(w.id)
			if err := st.Meta.Delete(ctx, k.PK, k.SK, meta.IfVer(row.ver)); err != nil && !errors.Is(err, meta.ErrConditionFailed) {
				st.Log().Warn("settle: clear a stream's failures", "stream", w.id, "err", err)
			}
		}
	}
}

// FailureText is err as a failure row keeps it: its first 500 bytes.
func FailureText(err error) string {
	const n = 500
	s := err.Error()
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// Pins are the slots quarantined streams pin, which the trim-check
// (shared/reclaim) keeps while it retires the rest of their epoch.
type Pins struct{ fails map[string]failRow }

// ReadPins reads every stream's pins (the meta.SettleFailPK partition).
func ReadPins(ctx context.Context, ms meta.Store) (Pins, error) {
	fails, err := readFailures(ctx, ms)
	return Pins{fails}, err
}

// In returns the pins on chain ch's epoch.
func (p Pins) In(ch ChainRef, epoch uint64) []meta.SlotPin { return pinnedIn(p.fails, ch, epoch) }

// pinnedIn returns the pins of rows on chain ch's epoch.
func pinnedIn(fails map[string]failRow, ch ChainRef, epoch uint64) []meta.SlotPin {
	var out []meta.SlotPin
	for _, r := range fails {
		for _, p := range r.f.Pins {
			if p.Star == ch.Star && p.Class == ch.Class && p.Epoch == epoch {
				out = append(out, p)
			}
		}
	}
	return out
}

func pinned(pins []meta.SlotPin, slot uint64) bool {
	return slices.ContainsFunc(pins, func(p meta.SlotPin) bool { return p.From <= slot && slot < p.End })
}

// DeleteSlots deletes the slot keys of epoch e in [from, to) that no pin
// keeps, from every bucket of its set.
func DeleteSlots(ctx context.Context, st *Stores, ch ChainRef, e meta.Epoch, from, to uint64, pins []meta.SlotPin) error {
	var keys []string
	for s := from; s < to; s++ {
		if !pinned(pins, s) {
			keys = append(keys, chain.SlotKey(ch.Star, ch.Class, e.Epoch, s))
		}
	}
	for _, name := range e.Params.Buckets {
		b := st.Objects.Bucket(name)
		for i := 0; i < len(keys); i += 1000 {
			if err := b.DeleteMany(ctx, keys[i:min(i+1000, len(keys))]); err != nil {
				return fmt.Errorf("settle: delete slots of %s epoch %d in %s: %w", ch, e.Epoch, name, err)
			}
		}
	}
	return nil
}

// PublishQuarantine sets the quarantined-streams gauge from the failure
// rows (one query of a partition that holds the failing streams only).
func (st *Stores) PublishQuarantine(ctx context.Context) error {
	fails, err := readFailures(ctx, st.Meta)
	if err != nil {
		return err
	}
	n := 0
	for _, r := range fails {
		if r.f.Quarantined != 0 {
			n++
		}
	}
	st.metrics().quarantinedNow.Set(float64(n))
	return nil
}

// SettlePinned settles stream id's window in one pinned chain epoch
// (pins: one group of a quarantine row's pins, ascending by slot), as an
// era of cap-ripe markers naming only it: the operator's retry of a
// quarantined stream.
func SettlePinned(ctx context.Context, st *Stores, id string, pins []meta.SlotPin, now time.Time, rep *Report) error {
	ch := ChainRef{Star: pins[0].Star, Class: pins[0].Class}
	rec, err := ReadEpoch(ctx, st.Meta, ch, pins[0].Epoch)
	if err != nil {
		return err
	}
	era := &eraSet{ch: ch, epoch: rec.Epoch, checkpoints: map[epochRef]uint64{{ch, rec.Epoch}: rec.Checkpoint}}
	for _, p := range pins {
		era.markers = append(era.markers, liveMarker{M: meta.Marker{FromSlot: p.From, EndSlot: p.End, Streams: []string{id}, Cause: "cap"}, Streams: []string{id}})
	}
	cfg := st.cfg()
	w := &streamWork{id: id}
	if err := judge(ctx, st, era, w, cfg.Trigger, cfg.Timers(ch.Class).AgeCap, now); err != nil {
		return err
	}
	if !w.alive || !w.qualifies {
		return nil
	}
	job := Job{Kind: KindSettle, Chain: ch, Epoch: rec.Epoch, From: pins[0].From, End: pins[len(pins)-1].End}
	for q := []*streamWork{w}; len(q) > 0; {
		if q, err = settleBatch(ctx, st, job, era, q, rep); err != nil {
			return err
		}
	}
	if w.err != nil {
		return w.err
	}
	rep.Settled++
	rep.Objects += w.objects
	return nil
}
