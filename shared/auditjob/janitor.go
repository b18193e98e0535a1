package auditjob

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
)

// JanitorReport says what one janitor pass found.
type JanitorReport struct {
	Chains int
	// Jobs are the chain-settle jobs due.
	Jobs []Job
	// Deferred counts unsettled epochs below a live star's mint head that
	// are not yet absorbed up to their cut: their leader's absorb (or its
	// successor's open gate) still owns them.
	Deferred int
	// MarkedDead names the stars this pass marked dead.
	MarkedDead []string
	// Spared names the stars whose heartbeat is stale but that no live
	// star's heartbeats witness dead (see markStaleDead).
	Spared []string
	// Gone counts chains whose head epoch is settled for a star that is
	// gone (dead, stopped, superseded, or closed with a settle marker).
	Gone int
	// Retention is what the retention pass did (trimmed catalog rows).
	Retention RetentionReport
	// Deleted is what the deleted-stream reclamation did.
	Deleted reclaim.StreamsReport
	// Reclaim is what the reclaim pass did (superseded and trimmed
	// settled objects).
	Reclaim reclaim.ReclaimReport
}

// Janitor runs the janitor's registry and settle duties (docs/design.md §9):
//
//   - A star whose heartbeat is older than Config.DeadAfter is marked dead,
//     by CAS on the registry row it read (a heartbeat that lands first
//     wins; the star learns from its next lost heartbeat that it is dead),
//     once another live star's heartbeats show the metastore was reachable
//     for a whole dead-after bound after its last one (see markStaleDead).
//   - The chains of a star that is gone (dead, stopped, superseded by a
//     later incarnation, or that left a settle marker when it closed) are
//     settled whole, head epoch included: one chain-settle job through the
//     head, naming the head's owner so the job re-checks before it fences.
//   - Of a live star's chain, every epoch below the mint head that is not
//     settled and is absorbed up to its cut gets a chain-settle job. Such
//     an epoch was halted by its writer, which recorded the cut and minted
//     the next epoch, so it is terminal whatever the registry says. One not
//     yet absorbed to its cut is deferred: the live leader absorbs epochs
//     in order and will get there, and a second absorber beside it could
//     group the same slots into different passes. A live star's head epoch
//     is deferred, never displaced (decommission settles it from the star).
//
// Besides the dead marks it writes nothing (a settle marker is cleared by
// the job that serves it, or here once its epoch is settled): running it
// twice finds the same jobs, and a job found twice is safe.
//
// Then it runs the retention pass (Retention: every live stream's
// catalog rows below its trim point or older than its retention age are
// deleted, and deleted streams are registered), the deleted-stream pass
// (reclaim.ReclaimStreams: rows, then objects) and the reclaim pass
// (reclaim.Reclaim): superseded tail revisions and the objects of trimmed
// rows are deleted a read grace after it first saw no row name them. A
// failure of any does not hold back the jobs found: they are in the
// report beside the error.
//
// Not done yet: delete_on_empty, and the poison, epoch records and chain
// directory rows of decommissioned stars.
func Janitor(ctx context.Context, st *settle.Stores) (JanitorReport, error) {
	var rep JanitorReport
	if st.Meta == nil {
		return rep, errors.New("auditjob: Stores needs Meta")
	}
	chains, err := listChains(ctx, st.Meta)
	if err != nil {
		return rep, err
	}
	log := st.Log()
	now := time.Now()
	if st.Now != nil {
		now = st.Now()
	}
	deadAfter := st.Config.WithDefaults().DeadAfter
	if err := markStaleDead(ctx, st, chains, now, deadAfter, &rep); err != nil {
		return rep, err
	}
	for _, ch := range chains {
		rep.Chains++
		hk := meta.HeadKey(ch.Star, ch.Class)
		it, err := st.Meta.Get(ctx, hk.PK, hk.SK)
		if errors.Is(err, meta.ErrNotFound) {
			continue // listed before its first mint
		}
		if err != nil {
			return rep, fmt.Errorf("auditjob: janitor: head of %s: %w", ch, err)
		}
		var h meta.Head
		if err := meta.Decode(it.Val, &h); err != nil {
			return rep, fmt.Errorf("auditjob: janitor: head of %s: %w", ch, err)
		}
		gone := h.State == meta.HeadSettled
		if !gone {
			// headGone finds the dead marks made above.
			if gone, _, err = headGone(ctx, st.Meta, ch, h); err != nil {
				return rep, fmt.Errorf("auditjob: janitor: %w", err)
			}
		}
		// A marker for an epoch the head has moved past (its star restarted
		// and settled it) or that is settled has nothing left to authorise.
		served := h.Epoch - 1
		if h.State == meta.HeadSettled {
			served = h.Epoch
		}
		if err := settle.ClearDue(ctx, st.Meta, ch, served); err != nil {
			return rep, err
		}
		if h.State == meta.HeadSettled {
			continue
		}
		if gone {
			rep.Gone++
			rep.Jobs = append(rep.Jobs, ChainSettleHead(ch, h.Epoch, h.Owner))
			continue
		}
		epochs, err := listEpochs(ctx, st.Meta, ch, h.Epoch)
		if err != nil {
			return rep, err
		}
		for _, e := range epochs {
			switch {
			case e.Settled:
			case e.Cut == nil:
				// A writer records the cut on the epoch before it mints
				// the next one; a record without one below the head is
				// damage to look at, not work to queue.
				log.Warn("janitor: epoch below its chain's head has no cut", "chain", ch.String(), "epoch", e.Epoch, "head", h.Epoch)
			case e.Checkpoint < *e.Cut:
				rep.Deferred++
			default:
				rep.Jobs = append(rep.Jobs, ChainSettle(ch, e.Epoch))
			}
		}
	}
	var errs []error
	if rep.Retention, err = Retention(meta.WithWriter(ctx, meta.WriterRetention), st, now); err != nil {
		errs = append(errs, err)
	}
	rctx := meta.WithWriter(ctx, meta.WriterReclaim) // counted apart from the janitor's own writes
	if rep.Deleted, err = reclaim.ReclaimStreams(rctx, st, now); err != nil {
		errs = append(errs, fmt.Errorf("auditjob: janitor: %w", err))
	}
	if rep.Reclaim, err = reclaim.Reclaim(rctx, st, now); err != nil {
		errs = append(errs, fmt.Errorf("auditjob: janitor: %w", err))
	}
	return rep, errors.Join(errs...)
}

// markStaleDead marks dead every star whose heartbeat is older than
// deadAfter and that leader.PresumeDead judges dead on the evidence of the
// other stars' rows: some live star's heartbeats landed without a gap for
// a whole deadAfter bound after the stale star's last one. A stale star
// without such a witness is spared (rep.Spared): at the start or the end
// of an outage between the stars and the metastore (which the janitor may
// well reach) every star looks stale or only just back, and marking one
// dead would depose it as the cluster comes back. Stars come from the
// star directory and the chain directory.
func markStaleDead(ctx context.Context, st *settle.Stores, chains []settle.ChainRef, now time.Time, deadAfter time.Duration, rep *JanitorReport) error {
	ids, err := leader.Stars(ctx, st.Meta)
	if err != nil {
		return err
	}
	for _, ch := range chains {
		if !slices.Contains(ids, ch.Star) {
			ids = append(ids, ch.Star)
		}
	}
	var (
		stale     []leader.Witness
		witnesses []leader.Witness
	)
	for _, id := range ids {
		reg, _, ok, err := leader.ReadRegistration(ctx, st.Meta, id)
		if err != nil {
			return fmt.Errorf("auditjob: janitor: %w", err)
		}
		if !ok {
			continue
		}
		witnesses = append(witnesses, leader.Witness{Star: id, Reg: reg})
		if leader.Stale(reg, now, deadAfter) {
			stale = append(stale, leader.Witness{Star: id, Reg: reg})
		}
	}
	log := st.Log()
	for _, x := range stale {
		if _, dead := leader.PresumeDead(x.Star, x.Reg, witnesses, now, deadAfter); !dead {
			rep.Spared = append(rep.Spared, x.Star)
			continue
		}
		reg, dead, by, err := leader.MarkPresumedDead(ctx, st.Meta, x.Star, witnesses, now, deadAfter)
		if err != nil {
			return fmt.Errorf("auditjob: janitor: %w", err)
		}
		if dead && reg.State == meta.StarDead && by != "" {
			rep.MarkedDead = append(rep.MarkedDead, x.Star)
			log.Warn("janitor: marked star dead: heartbeat too old", "dead_star", x.Star, "incarnation", reg.Incarnation,
				"heartbeat", time.UnixMilli(reg.Heartbeat), "dead_after", deadAfter, "witness", by)
		}
	}
	if len(rep.Spared) > 0 {
		log.Warn("janitor: stale heartbeats, but no live star reached the metastore for a whole dead-after bound after them (an outage between the stars and the metastore, or its end); marking them not dead yet", "stale", rep.Spared)
	}
	return nil
}

// listChains reads the chain directory (docs/design.md §5: `chains` / <star>/<class>).
func listChains(ctx context.Context, ms meta.Store) ([]settle.ChainRef, error) {
	var out []settle.ChainRef
	q := meta.Query{PK: meta.ChainDirKey("", meta.Standard).PK}
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("auditjob: list chain directory: %w", err)
		}
		for _, it := range pg.Items {
			i := strings.LastIndexByte(it.SK, '/')
			if i <= 0 {
				return nil, fmt.Errorf("auditjob: chain directory row %q is not <star>/<class>", it.SK)
			}
			ch := settle.ChainRef{Star: it.SK[:i], Class: meta.Class(it.SK[i+1:])}
			if !ch.Class.Valid() {
				return nil, fmt.Errorf("auditjob: chain directory row %q has no valid class", it.SK)
			}
			out = append(out, ch)
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
}

// listEpochs reads a chain's epoch records below epoch, ascending.
func listEpochs(ctx context.Context, ms meta.Store, ch settle.ChainRef, below uint64) ([]meta.Epoch, error) {
	if below == 0 {
		return nil, nil
	}
	q := meta.Query{PK: meta.ChainPK(ch.Star, ch.Class), From: meta.EpochKey(ch.Star, ch.Class, 0).SK,
		To: meta.EpochKey(ch.Star, ch.Class, below-1).SK}
	var out []meta.Epoch
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("auditjob: list epochs of %s: %w", ch, err)
		}
		for _, it := range pg.Items {
			var e meta.Epoch
			if err := meta.Decode(it.Val, &e); err != nil {
				return nil, fmt.Errorf("auditjob: epoch row %s/%s: %w", it.PK, it.SK, err)
			}
			out = append(out, e)
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
}
