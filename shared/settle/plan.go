package settle

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// Era is a contiguous run of one epoch's ripe markers: [From, End) in slots.
type Era struct {
	From, End uint64
	Markers   int // ripe markers in the run
	Slots     int // slots of those markers
}

// Ripe reports whether a marker is due: ripened by now and wholly below
// the epoch's checkpoint (a marker at or above it belongs to a pass whose
// checkpoint CAS has not landed, so its refs may not all be written).
func Ripe(m meta.Marker, checkpoint uint64, now time.Time) bool {
	return m.Ripen <= millis(now) && m.EndSlot <= checkpoint
}

// CutEras cuts an epoch's live markers (ascending by first slot) into
// eras: maximal runs of ripe markers not interrupted by a live unripe one,
// each of at most maxSlots slots (a single larger marker is an era of its
// own). Slots between markers of a run are already resolved. Pure.
func CutEras(markers []meta.Marker, checkpoint uint64, now time.Time, maxSlots int) []Era {
	var eras []Era
	var cur *Era
	for _, m := range markers {
		if !Ripe(m, checkpoint, now) {
			cur = nil
			continue
		}
		n := int(m.EndSlot - m.FromSlot)
		if cur != nil && cur.Slots+n > maxSlots {
			cur = nil
		}
		if cur == nil {
			eras = append(eras, Era{From: m.FromSlot})
			cur = &eras[len(eras)-1]
		}
		cur.End = m.EndSlot
		cur.Markers++
		cur.Slots += n
	}
	return eras
}

// classStats accumulates Plan's gauges for one class.
type classStats struct {
	lag, trimLag time.Duration
	unsettled    uint64
}

// Plan finds the auditor's due work: for every chain in the chain
// directory and every epoch with live markers, one settle job per era of
// ripe markers (from the settle frontier, below the checkpoint), and one
// trim-check job per chain whose rewritten cursor can advance or whose
// rewritten slots have waited out the read grace. It writes nothing but
// gauges; running it twice plans the same jobs, and a job planned twice is
// safe.
func Plan(ctx context.Context, st *Stores, now time.Time) ([]Job, error) {
	if err := st.check(); err != nil {
		return nil, err
	}
	cfg := st.cfg()
	m := st.metrics()
	chains, err := listChains(ctx, st.Meta)
	if err != nil {
		return nil, err
	}
	stats := map[meta.Class]*classStats{meta.Standard: {}, meta.Express: {}}
	var jobs []Job
	for _, ch := range chains {
		epochs, err := listEpochRecords(ctx, st.Meta, ch)
		if err != nil {
			return nil, err
		}
		cs := stats[ch.Class]
		trimDue := false
		for _, e := range epochs {
			if due, ok := dueTrim(e, now, cfg.ReadGrace); ok && due > e.Trimmed || staleRewrites(e) || garbageDue(e) {
				trimDue = true
			}
			for _, rw := range e.Rewrites {
				if rw.Upto > e.Trimmed {
					cs.trimLag = max(cs.trimLag, now.Sub(time.UnixMilli(rw.At)))
				}
			}
			if e.Rewritten >= e.Checkpoint {
				continue // no live marker below the checkpoint
			}
			markers, err := liveMarkers(ctx, st.Meta, ch, e, 0)
			if err != nil {
				return nil, err
			}
			firstLive := e.Checkpoint
			if len(markers) > 0 {
				firstLive = min(firstLive, markers[0].M.FromSlot)
			}
			if firstLive > e.Rewritten {
				trimDue = true
			}
			mks := make([]meta.Marker, len(markers))
			for i, lm := range markers {
				mks[i] = lm.M
				cs.unsettled += lm.M.Bytes
				if Ripe(lm.M, e.Checkpoint, now) {
					cs.lag = max(cs.lag, now.Sub(time.UnixMilli(lm.M.Ripen)))
				}
			}
			for _, era := range CutEras(mks, e.Checkpoint, now, cfg.EraMaxSlots) {
				jobs = append(jobs, Job{Kind: KindSettle, Chain: ch, Epoch: e.Epoch, From: era.From, End: era.End})
				m.erasPlanned.WithLabelValues(string(ch.Class)).Inc()
			}
		}
		if !trimDue && collectDue(epochs) {
			// A chain whose epochs are all spent: its trim-check collects
			// the garbage if its star is decommissioned.
			if trimDue, err = collectPending(ctx, st, ch); err != nil {
				return nil, err
			}
		}
		if trimDue {
			jobs = append(jobs, Job{Kind: KindTrim, Chain: ch})
		}
	}
	for class, cs := range stats {
		l := string(class)
		m.settleLag.WithLabelValues(l).Set(cs.lag.Seconds())
		m.unsettled.WithLabelValues(l).Set(float64(cs.unsettled))
		m.trimLag.WithLabelValues(l).Set(cs.trimLag.Seconds())
	}
	return jobs, nil
}

// listChains reads the chain directory.
func listChains(ctx context.Context, ms meta.Store) ([]ChainRef, error) {
	var out []ChainRef
	q := meta.Query{PK: meta.ChainDirKey("", meta.Standard).PK}
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("settle: list chain directory: %w", err)
		}
		for _, it := range pg.Items {
			i := strings.LastIndexByte(it.SK, '/')
			ch := ChainRef{Star: it.SK[:max(i, 0)], Class: meta.Class(it.SK[i+1:])}
			if i <= 0 || ch.validate() != nil {
				return nil, fmt.Errorf("settle: chain directory row %q is not <star>/<class>", it.SK)
			}
			out = append(out, ch)
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
}

// listEpochRecords reads every epoch record of a chain, ascending.
func listEpochRecords(ctx context.Context, ms meta.Store, ch ChainRef) ([]meta.Epoch, error) {
	pk := meta.ChainPK(ch.Star, ch.Class)
	q := meta.Query{PK: pk, From: "e#", To: "e#~"}
	var out []meta.Epoch
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("settle: list epochs of %s: %w", ch, err)
		}
		for _, it := range pg.Items {
			var e meta.Epoch
			if err := meta.Decode(it.Val, &e); err != nil {
				return nil, fmt.Errorf("settle: epoch row %s/%s: %w", it.PK, it.SK, err)
			}
			out = append(out, e)
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
}

// liveMarker is a marker row with its version, for CAS.
type liveMarker struct {
	M   meta.Marker
	Ver int64
}

// markerStart is where an epoch's live markers begin: nothing below the
// settle frontier or the rewritten cursor is live.
func markerStart(ch ChainRef, e meta.Epoch) string {
	from := meta.MarkerKey(ch.Star, ch.Class, e.Epoch, e.Rewritten).SK
	return max(from, e.Frontier)
}

// liveMarkers reads the epoch's markers whose passes start below its
// checkpoint, from the frontier up, ascending; at most limit (0: all).
// Callers read the epoch record (its checkpoint) first: a marker is written
// before the checkpoint passes it, so none below that checkpoint is missed.
func liveMarkers(ctx context.Context, ms meta.Store, ch ChainRef, e meta.Epoch, limit int) ([]liveMarker, error) {
	if e.Checkpoint == 0 {
		return nil, nil
	}
	q := meta.Query{PK: meta.ChainPK(ch.Star, ch.Class), From: markerStart(ch, e),
		To: meta.MarkerKey(ch.Star, ch.Class, e.Epoch, e.Checkpoint-1).SK, Limit: limit}
	var out []liveMarker
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("settle: markers of %s epoch %d: %w", ch, e.Epoch, err)
		}
		for _, it := range pg.Items {
			var m meta.Marker
			if err := meta.Decode(it.Val, &m); err != nil {
				return nil, fmt.Errorf("settle: marker %s/%s: %w", it.PK, it.SK, err)
			}
			if m.Epoch != e.Epoch || m.EndSlot <= m.FromSlot || it.SK != meta.MarkerKey(ch.Star, ch.Class, e.Epoch, m.FromSlot).SK {
				return nil, fmt.Errorf("settle: marker %s/%s does not match its key (epoch %d slots [%d,%d))", it.PK, it.SK, m.Epoch, m.FromSlot, m.EndSlot)
			}
			out = append(out, liveMarker{M: m, Ver: it.Ver})
			if limit > 0 && len(out) >= limit {
				return out, nil
			}
		}
		if pg.Next == "" {
			return out, nil // ascending: keys order markers by first slot
		}
		q.PageToken = pg.Next
	}
}

// dueTrim is how far the epoch may be trimmed at now: the greatest
// recorded rewrite that has waited out the grace. Pure.
func dueTrim(e meta.Epoch, now time.Time, grace time.Duration) (uint64, bool) {
	var upto uint64
	ok := false
	for _, rw := range e.Rewrites {
		if rw.At <= millis(now.Add(-grace)) && rw.Upto > upto {
			upto, ok = rw.Upto, true
		}
	}
	return min(upto, e.Rewritten), ok
}
