package settle

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// Era is a contiguous run of one epoch's due markers: [From, End) in slots.
type Era struct {
	From, End uint64
	Markers   int // due markers in the run
	Slots     int // slots of those markers
}

// Ripe reports whether a marker is due: ripened by now and wholly below
// the epoch's checkpoint (a marker at or above it belongs to a pass whose
// checkpoint CAS has not landed, so its refs may not all be written).
func Ripe(m meta.Marker, checkpoint uint64, now time.Time) bool {
	return m.Ripen <= millis(now) && m.EndSlot <= checkpoint
}

// Due reports whether a marker may be settled now: ripe, or gathered into
// an era (an age-cap marker that ripens within gather, wholly below the
// checkpoint). Only a ripe marker starts an era.
func Due(m meta.Marker, checkpoint uint64, now time.Time, gather time.Duration) bool {
	if Ripe(m, checkpoint, now) {
		return true
	}
	return gather > 0 && m.Cause == "cap" && m.Ripen <= millis(now.Add(gather)) && m.EndSlot <= checkpoint
}

// CutEras cuts an epoch's live markers (ascending by first slot) into
// eras: maximal runs of due markers (Due) that start at a ripe one and are
// not interrupted by a marker that is not due, each of at most maxSlots
// slots and maxBytes bytes (a single larger ripe marker is an era of its
// own). Slots between markers of a run are already resolved. Pure.
func CutEras(markers []meta.Marker, checkpoint uint64, now time.Time, gather time.Duration, maxSlots int, maxBytes uint64) []Era {
	var eras []Era
	var cur *Era
	var curBytes uint64
	for _, m := range markers {
		if !Due(m, checkpoint, now, gather) {
			cur = nil
			continue
		}
		n := int(m.EndSlot - m.FromSlot)
		if cur != nil && (cur.Slots+n > maxSlots || curBytes+m.Bytes > maxBytes) {
			cur = nil
		}
		if cur == nil {
			if !Ripe(m, checkpoint, now) {
				continue // gathered only behind a ripe marker
			}
			eras = append(eras, Era{From: m.FromSlot})
			cur, curBytes = &eras[len(eras)-1], 0
		}
		cur.End = m.EndSlot
		cur.Markers++
		cur.Slots += n
		curBytes += m.Bytes
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
//
// Plan works one chain at a time and reads at most PlanMaxMarkers marker
// rows per chain (markers carry no stream lists: meta.ShardStreams), so
// its memory and time per invocation are bounded by the chain count and
// that budget; markers past the budget are planned by a later invocation,
// once settles have moved the frontier. A row it cannot decode is set
// aside (plan_bad_rows_total, a log line): a bad marker stands as an
// unripe one that no era spans, a bad epoch record or directory row is
// skipped. A chain whose rows cannot be read is logged and skipped; Plan
// fails only when no chain could be planned.
func Plan(ctx context.Context, st *Stores, now time.Time) ([]Job, error) {
	if err := st.check(); err != nil {
		return nil, err
	}
	chains, err := listChainsQuarantine(ctx, st)
	if err != nil {
		return nil, err
	}
	stats := map[meta.Class]*classStats{meta.Standard: {}, meta.Express: {}}
	var jobs []Job
	var errs []error
	for _, ch := range chains {
		js, err := planChain(ctx, st, ch, now, stats[ch.Class])
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			st.Log().Warn("settle: plan: chain skipped", "chain", ch.String(), "err", err)
			st.metrics().jobErrors.WithLabelValues(string(ch.Class), "plan").Inc()
			errs = append(errs, err)
			continue
		}
		jobs = append(jobs, js...)
	}
	if len(chains) > 0 && len(errs) == len(chains) {
		return nil, fmt.Errorf("settle: plan: no chain could be planned: %w", errors.Join(errs...))
	}
	m := st.metrics()
	for class, cs := range stats {
		l := string(class)
		m.settleLag.WithLabelValues(l).Set(cs.lag.Seconds())
		m.unsettled.WithLabelValues(l).Set(float64(cs.unsettled))
		m.trimLag.WithLabelValues(l).Set(cs.trimLag.Seconds())
	}
	return jobs, nil
}

// PlanChain is Plan for one chain.
func PlanChain(ctx context.Context, st *Stores, ch ChainRef, now time.Time) ([]Job, error) {
	if err := st.check(); err != nil {
		return nil, err
	}
	if err := ch.validate(); err != nil {
		return nil, err
	}
	return planChain(ctx, st, ch, now, &classStats{})
}

// planChain plans one chain, accumulating its gauges into cs.
func planChain(ctx context.Context, st *Stores, ch ChainRef, now time.Time, cs *classStats) ([]Job, error) {
	cfg, m := st.cfg(), st.metrics()
	epochs, err := listEpochsQuarantine(ctx, st, ch)
	if err != nil {
		return nil, err
	}
	var jobs []Job
	trimDue := false
	budget := cfg.PlanMaxMarkers
	for _, e := range epochs {
		if due, ok := dueTrim(e, now, cfg.ReadGrace); ok && due > e.Trimmed || staleRewrites(e) || garbageDue(e) {
			trimDue = true
		}
		for _, rw := range e.Rewrites {
			if rw.Upto > e.Trimmed {
				cs.trimLag = max(cs.trimLag, now.Sub(time.UnixMilli(rw.At)))
			}
		}
		if e.Rewritten >= e.Checkpoint || budget <= 0 {
			continue // no live marker below the checkpoint, or none to be read now
		}
		markers, err := scanMarkers(ctx, st.Meta, ch, e, budget, func(it meta.Item, err error) {
			planBadRow(st, ch, "marker", it, err)
		})
		if err != nil {
			return nil, err
		}
		budget -= len(markers)
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
		for _, era := range CutEras(mks, e.Checkpoint, now, cfg.Timers(ch.Class).Gather, cfg.EraMaxSlots, cfg.EraMaxBytes) {
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
	return jobs, nil
}

// planBadRow reports a row Plan sets aside.
func planBadRow(st *Stores, ch ChainRef, kind string, it meta.Item, err error) {
	st.metrics().badRows.WithLabelValues(string(ch.Class), kind).Inc()
	st.Log().Error("settle: plan: row set aside (quarantined): it cannot be decoded", "kind", kind, "pk", it.PK, "sk", it.SK, "err", err)
}

// listChainsQuarantine reads the chain directory, setting aside rows that
// do not name a chain.
func listChainsQuarantine(ctx context.Context, st *Stores) ([]ChainRef, error) {
	var out []ChainRef
	q := meta.Query{PK: meta.ChainDirKey("", meta.Standard).PK}
	for {
		pg, err := st.Meta.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("settle: list chain directory: %w", err)
		}
		for _, it := range pg.Items {
			ch, err := parseChainDir(it.SK)
			if err != nil {
				planBadRow(st, ChainRef{}, "directory", it, err)
				continue
			}
			out = append(out, ch)
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
}

func parseChainDir(sk string) (ChainRef, error) {
	i := strings.LastIndexByte(sk, '/')
	if i <= 0 {
		return ChainRef{}, fmt.Errorf("settle: chain directory row %q is not <star>/<class>", sk)
	}
	ch := ChainRef{Star: sk[:i], Class: meta.Class(sk[i+1:])}
	if ch.validate() != nil {
		return ChainRef{}, fmt.Errorf("settle: chain directory row %q is not <star>/<class>", sk)
	}
	return ch, nil
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
			ch, err := parseChainDir(it.SK)
			if err != nil {
				return nil, err
			}
			out = append(out, ch)
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
}

// listEpochsQuarantine is listEpochRecords setting aside undecodable rows.
func listEpochsQuarantine(ctx context.Context, st *Stores, ch ChainRef) ([]meta.Epoch, error) {
	return readEpochRecords(ctx, st.Meta, ch, func(it meta.Item, err error) { planBadRow(st, ch, "epoch", it, err) })
}

// listEpochRecords reads every epoch record of a chain, ascending.
func listEpochRecords(ctx context.Context, ms meta.Store, ch ChainRef) ([]meta.Epoch, error) {
	return readEpochRecords(ctx, ms, ch, nil)
}

// readEpochRecords reads a chain's epoch records, ascending; a row that
// does not decode goes to bad, or fails the read when bad is nil.
func readEpochRecords(ctx context.Context, ms meta.Store, ch ChainRef, bad func(meta.Item, error)) ([]meta.Epoch, error) {
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
				err = fmt.Errorf("settle: epoch row %s/%s: %w", it.PK, it.SK, err)
				if bad == nil {
					return nil, err
				}
				bad(it, err)
				continue
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
	// Streams is the marker's stream set, inline or from its shards (set
	// by loadStreams).
	Streams []string
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
	return scanMarkers(ctx, ms, ch, e, limit, nil)
}

// scanMarkers is liveMarkers. A row that does not decode as its key's
// marker goes to bad and stands in the result as a marker that never
// ripens, one slot long from its key's slot (or is left out when its key
// is not a marker's), so no era spans it; with bad nil it fails the scan.
func scanMarkers(ctx context.Context, ms meta.Store, ch ChainRef, e meta.Epoch, limit int, bad func(meta.Item, error)) ([]liveMarker, error) {
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
			err := meta.Decode(it.Val, &m)
			if err == nil && (m.Epoch != e.Epoch || m.EndSlot <= m.FromSlot || it.SK != meta.MarkerKey(ch.Star, ch.Class, e.Epoch, m.FromSlot).SK) {
				err = fmt.Errorf("settle: marker %s/%s does not match its key (epoch %d slots [%d,%d))", it.PK, it.SK, m.Epoch, m.FromSlot, m.EndSlot)
			}
			if err != nil {
				if bad == nil {
					return nil, fmt.Errorf("settle: marker %s/%s: %w", it.PK, it.SK, err)
				}
				bad(it, err)
				slot, ok := markerSlot(ch, e.Epoch, it.SK)
				if !ok {
					continue
				}
				m = meta.Marker{Epoch: e.Epoch, FromSlot: slot, EndSlot: slot + 1, Ripen: math.MaxInt64, Cause: "quarantined"}
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

// markerSlot parses the first slot out of a marker key of epoch.
func markerSlot(ch ChainRef, epoch uint64, sk string) (uint64, bool) {
	prefix := meta.MarkerKey(ch.Star, ch.Class, epoch, 0).SK
	prefix = prefix[:len(prefix)-20]
	rest, ok := strings.CutPrefix(sk, prefix)
	if !ok || len(rest) != 20 {
		return 0, false
	}
	n, err := strconv.ParseUint(rest, 10, 64)
	return n, err == nil
}

// loadStreams sets each marker's Streams: inline, or read from its shard
// rows. A missing shard is an error: every marker below the checkpoint
// has all of its shards (meta.Marker).
func loadStreams(ctx context.Context, ms meta.Store, ch ChainRef, markers []liveMarker) error {
	for i := range markers {
		lm := &markers[i]
		if lm.M.Shards == 0 {
			lm.Streams = lm.M.Streams
			continue
		}
		pk := meta.ChainPK(ch.Star, ch.Class)
		q := meta.Query{PK: pk, From: meta.MarkerShardKey(ch.Star, ch.Class, lm.M.Epoch, lm.M.FromSlot, 0).SK,
			To: meta.MarkerShardKey(ch.Star, ch.Class, lm.M.Epoch, lm.M.FromSlot, lm.M.Shards-1).SK}
		var ids []string
		n := 0
		for {
			pg, err := ms.Query(ctx, q)
			if err != nil {
				return fmt.Errorf("settle: stream shards of marker %d/%d: %w", lm.M.Epoch, lm.M.FromSlot, err)
			}
			for _, it := range pg.Items {
				var sh meta.MarkerShard
				if err := meta.Decode(it.Val, &sh); err != nil {
					return fmt.Errorf("settle: stream shard %s/%s: %w", it.PK, it.SK, err)
				}
				ids = append(ids, sh.Streams...)
				n++
			}
			if pg.Next == "" {
				break
			}
			q.PageToken = pg.Next
		}
		if n != lm.M.Shards {
			return fmt.Errorf("settle: marker %d/%d has %d of its %d stream shards", lm.M.Epoch, lm.M.FromSlot, n, lm.M.Shards)
		}
		lm.Streams = ids
	}
	return nil
}

// deleteShards deletes a resolved marker's shard rows.
func deleteShards(ctx context.Context, ms meta.Store, ch ChainRef, m meta.Marker) error {
	if m.Shards == 0 {
		return nil
	}
	keys := make([]meta.Key, m.Shards)
	for i := range keys {
		keys[i] = meta.MarkerShardKey(ch.Star, ch.Class, m.Epoch, m.FromSlot, i)
	}
	if err := ms.BatchDelete(ctx, keys); err != nil {
		return fmt.Errorf("settle: delete stream shards of marker %d/%d: %w", m.Epoch, m.FromSlot, err)
	}
	return nil
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

// firstLiveMarker is the epoch's first live marker, if any: one that does
// not decode stands there as a never-ripe marker of its key's slot, so the
// cursors that stop at the first live marker (the settle frontier, the
// rewritten cursor) stop at it rather than fail the job.
func firstLiveMarker(ctx context.Context, st *Stores, ch ChainRef, e meta.Epoch) ([]liveMarker, error) {
	return scanMarkers(ctx, st.Meta, ch, e, 1, func(it meta.Item, err error) {
		st.Log().Warn("settle: a marker that cannot be decoded holds the epoch's cursors", "pk", it.PK, "sk", it.SK, "err", err)
	})
}

// sweepShards deletes the stream shards left of markers in [from, to) of
// epoch, which the rewritten cursor just passed: every such marker is
// resolved, so a shard still there was left by a settler that died
// between deleting its marker and its shards. One query, normally empty;
// a failure is logged and leaves them (rows nothing reads).
func sweepShards(ctx context.Context, st *Stores, ch ChainRef, epoch, from, to uint64) {
	q := meta.Query{PK: meta.ChainPK(ch.Star, ch.Class), From: meta.MarkerShardKey(ch.Star, ch.Class, epoch, from, 0).SK,
		To: meta.MarkerShardKey(ch.Star, ch.Class, epoch, to-1, math.MaxInt).SK}
	for range 64 { // bounded: 64 pages of orphans per advance, the rest on no later pass
		pg, err := st.Meta.Query(ctx, q)
		if err != nil {
			st.Log().Warn("settle: reading stream shards left behind", "chain", ch.String(), "epoch", epoch, "err", err)
			return
		}
		keys := make([]meta.Key, len(pg.Items))
		for i, it := range pg.Items {
			keys[i] = meta.Key{PK: it.PK, SK: it.SK}
		}
		if len(keys) > 0 {
			if err := st.Meta.BatchDelete(ctx, keys); err != nil {
				st.Log().Warn("settle: deleting stream shards left behind", "chain", ch.String(), "epoch", epoch, "err", err)
				return
			}
		}
		if pg.Next == "" {
			return
		}
		q.PageToken = pg.Next
	}
}
