package auditjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// JanitorReport says what one janitor pass found.
type JanitorReport struct {
	Chains int
	// Jobs are the chain-settle jobs due.
	Jobs []Job
	// Deferred counts unsettled epochs below a mint head that are not yet
	// absorbed up to their cut: their leader's absorb (or its successor's
	// open gate) still owns them.
	Deferred int
}

// Janitor runs the janitor's settle duty as it exists today: every epoch
// below its chain's mint head that is not marked settled and is absorbed
// up to its cut gets a chain-settle job (fence adoption, garbage probe,
// mark settled; the walk finds nothing left). Such an epoch was halted by
// its writer, which recorded the cut and minted the next epoch, so it is
// terminal whatever the registry says.
//
// An epoch below the head not yet absorbed to its cut is deferred: the
// live leader absorbs epochs in order and will get there, and running a
// second absorber beside it could group the same slots into different
// passes. A head epoch is never settled here (a live star's head is
// deferred, never displaced).
//
// Not done yet (later issues): marking stars dead by heartbeat and settling
// a dead star's whole chain, retention and deleted streams (rows, then
// settled objects), deleting superseded tail revisions, and the poison of
// decommissioned stars.
//
// It writes nothing: running it twice finds the same jobs, and a job found
// twice is safe.
func Janitor(ctx context.Context, st *settle.Stores) (JanitorReport, error) {
	var rep JanitorReport
	if st.Meta == nil {
		return rep, errors.New("auditjob: Stores needs Meta")
	}
	chains, err := listChains(ctx, st.Meta)
	if err != nil {
		return rep, err
	}
	log := st.Logger
	if log == nil {
		log = slog.Default()
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
	return rep, nil
}

// listChains reads the chain directory (DESIGN §5: `chains` / <star>/<class>).
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
