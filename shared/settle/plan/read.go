package plan

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// Plan finds the auditor's due work: for every chain in the chain
// directory and every epoch with live markers, one settle job per era of
// ripe markers (from the settle frontier, below the checkpoint), and one
// trim-check job per chain whose rewritten cursor can advance or whose
// rewritten slots have waited out the read grace. It writes nothing but
// gauges; running it twice plans the same jobs, and a job planned twice is
// safe. It reads each chain (readChain) and plans it with PlanOf, which
// does no I/O.
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
func Plan(ctx context.Context, st *settle.Stores, now time.Time) ([]settle.Job, error) {
	if err := st.Check(); err != nil {
		return nil, err
	}
	chains, err := listChainsQuarantine(ctx, st)
	if err != nil {
		return nil, err
	}
	type gauges struct {
		lag, trimLag time.Duration
		unsettled    uint64
	}
	stats := map[meta.Class]*gauges{meta.Standard: {}, meta.Express: {}}
	var jobs []settle.Job
	var errs []error
	for _, ch := range chains {
		p, err := planChain(ctx, st, ch, now)
		if err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			st.Log().Warn("settle: plan: chain skipped", "chain", ch.String(), "err", err)
			st.Instruments().PlanFailed(ch.Class)
			errs = append(errs, err)
			continue
		}
		g := stats[ch.Class]
		g.lag, g.trimLag = max(g.lag, p.Lag), max(g.trimLag, p.TrimLag)
		g.unsettled += p.Unsettled
		jobs = append(jobs, p.Jobs...)
	}
	if len(chains) > 0 && len(errs) == len(chains) {
		return nil, fmt.Errorf("settle: plan: no chain could be planned: %w", errors.Join(errs...))
	}
	for class, g := range stats {
		st.Instruments().Planned(class, g.lag, g.trimLag, g.unsettled)
	}
	return jobs, nil
}

// PlanChain is Plan for one chain.
func PlanChain(ctx context.Context, st *settle.Stores, ch settle.ChainRef, now time.Time) ([]settle.Job, error) {
	if err := st.Check(); err != nil {
		return nil, err
	}
	if err := ch.Validate(); err != nil {
		return nil, err
	}
	p, err := planChain(ctx, st, ch, now)
	return p.Jobs, err
}

// planChain reads one chain and plans it: the read, PlanOf, and the
// decommission read PlanOf may ask for (then PlanOf again).
func planChain(ctx context.Context, st *settle.Stores, ch settle.ChainRef, now time.Time) (ChainPlan, error) {
	cfg := st.Config.WithDefaults()
	v, err := readChain(ctx, st, ch, cfg.PlanMaxMarkers)
	if err != nil {
		return ChainPlan{}, err
	}
	p := PlanOf(v, cfg, now)
	if p.AskDecommissioned {
		if v.Decommissioned, err = collectPending(ctx, st, ch); err != nil {
			return ChainPlan{}, err
		}
		p = PlanOf(v, cfg, now)
	}
	for _, j := range p.Jobs {
		if j.Kind == settle.KindSettle {
			st.Instruments().EraPlanned(ch.Class)
		}
	}
	return p, nil
}

// readChain reads what PlanOf needs of one chain: its epoch records and
// the live markers of each epoch that has slots below its checkpoint not
// yet rewritten, at most budget markers in all (the rest wait for a later
// plan). Rows that do not decode are set aside (planBadRow).
func readChain(ctx context.Context, st *settle.Stores, ch settle.ChainRef, budget int) (ChainView, error) {
	epochs, err := listEpochsQuarantine(ctx, st, ch)
	if err != nil {
		return ChainView{}, err
	}
	v := ChainView{Chain: ch, Epochs: make([]EpochView, len(epochs))}
	for i, e := range epochs {
		v.Epochs[i].Epoch = e
		if e.Rewritten >= e.Checkpoint || budget <= 0 {
			continue // no live marker below the checkpoint, or none to be read now
		}
		markers, err := settle.ScanMarkers(ctx, st.Meta, ch, e, budget, func(it meta.Item, err error) {
			planBadRow(st, ch, "marker", it, err)
		})
		if err != nil {
			return ChainView{}, err
		}
		budget -= len(markers)
		v.Epochs[i].Scanned = true
		v.Epochs[i].Markers = markers
	}
	return v, nil
}

// planBadRow reports a row Plan sets aside.
func planBadRow(st *settle.Stores, ch settle.ChainRef, kind string, it meta.Item, err error) {
	st.Instruments().BadRow(ch.Class, kind)
	st.Log().Error("settle: plan: row set aside (quarantined): it cannot be decoded", "kind", kind, "pk", it.PK, "sk", it.SK, "err", err)
}

// listChainsQuarantine reads the chain directory, setting aside rows that
// do not name a chain.
func listChainsQuarantine(ctx context.Context, st *settle.Stores) ([]settle.ChainRef, error) {
	var out []settle.ChainRef
	q := meta.Query{PK: meta.ChainDirKey("", meta.Standard).PK}
	for {
		pg, err := st.Meta.Query(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("settle: list chain directory: %w", err)
		}
		for _, it := range pg.Items {
			ch, err := parseChainDir(it.SK)
			if err != nil {
				planBadRow(st, settle.ChainRef{}, "directory", it, err)
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

func parseChainDir(sk string) (settle.ChainRef, error) {
	i := strings.LastIndexByte(sk, '/')
	if i <= 0 {
		return settle.ChainRef{}, fmt.Errorf("settle: chain directory row %q is not <star>/<class>", sk)
	}
	ch := settle.ChainRef{Star: sk[:i], Class: meta.Class(sk[i+1:])}
	if ch.Validate() != nil {
		return settle.ChainRef{}, fmt.Errorf("settle: chain directory row %q is not <star>/<class>", sk)
	}
	return ch, nil
}

// listEpochsQuarantine is settle.ListEpochs setting aside undecodable rows.
func listEpochsQuarantine(ctx context.Context, st *settle.Stores, ch settle.ChainRef) ([]meta.Epoch, error) {
	return settle.ReadEpochRecords(ctx, st.Meta, ch, func(it meta.Item, err error) { planBadRow(st, ch, "epoch", it, err) })
}

// collectPending reports whether a chain all of whose epochs are spent
// has garbage its trim-check may collect now: its star is decommissioned
// (it is still listed, so at least its directory row is left).
func collectPending(ctx context.Context, st *settle.Stores, ch settle.ChainRef) (bool, error) {
	c := chain.New(ch.Star, ch.Class, settle.AuditorID, st.Meta, st.Objects)
	_, ok, err := settle.Decommissioned(ctx, st, c, ch)
	return ok, err
}
