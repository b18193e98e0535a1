package lead

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/chainsettle"
	"github.com/starlog/starlog/star/loglet"
)

// settleFn settles what incarnation key.inc (and earlier) of key.star left
// on its key.class chain. A head owned by a later incarnation needs
// nothing: that incarnation settled the chain before it minted. The loop
// covers an epoch minted by a cut-off writer between the settle's read of
// the head and its fence claim.
func (ls *Leadership) settleFn(ctx context.Context, key settleKey) error {
	ch := chain.New(key.star, key.class, chain.Incarnation(ls.me.Star, ls.me.Incarnation), ls.meta, ls.cfg.Objects)
	abs := &absorb.Absorber{Star: key.star, Class: key.class, Meta: ls.meta, Rip: ls.cfg.Ripening(key.class), UpdateEpoch: ch.UpdateEpoch}
	for round := 0; ; round++ {
		h, _, ok, err := ch.Head(ctx)
		if err != nil || !ok {
			return err
		}
		owner, err := chain.ParseIncarnation(h.Owner, key.star)
		if err != nil {
			return err
		}
		if owner > key.inc || h.State == meta.HeadSettled {
			return nil
		}
		if round == maxSettleRounds {
			return fmt.Errorf("chain %s/%s: head still unsettled after %d settle rounds", key.star, key.class, round)
		}
		// Never fence past the head judged here: an epoch minted since by a
		// later incarnation (a restart) is that incarnation's to write.
		if err := chainsettle.ChainThrough(ctx, ch, abs, h.Epoch); err != nil {
			return err
		}
		// A marker the closed star left for this epoch is served.
		if err := settle.ClearDue(ctx, ls.meta, settle.ChainRef{Star: key.star, Class: key.class}, h.Epoch); err != nil {
			ls.log.Warn("settled a chain but could not clear its settle marker (the janitor will)", "chain", key.star+"/"+string(key.class), "err", err)
		}
	}
}

const maxSettleRounds = 8

// settleRunTimeout bounds one settle run of the star-local runner, far
// below forever. A takeover of a few streams' full backlog takes seconds;
// at 10,000 streams the walk writes a ref per stream per 64 slots, and a
// full default backlog can take minutes on DynamoDB (docs/bench.md,
// "Density"). A run the bound cuts off keeps every pass it checkpointed:
// the next open's run walks on from the checkpoint.
const settleRunTimeout = 5 * time.Minute

// settleKey names what one settle run covers: the chain (star, class) up
// to and including incarnation inc's epochs.
type settleKey struct {
	star  string
	class meta.Class
	inc   uint64
}

// settleRunner is the star-local settle runner: one run per key at a time,
// joined by every open that needs it. Runs use the runner's own context
// (cancelled by Close), so a client that gives up stops only its wait.
type settleRunner struct {
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	running map[settleKey]*settleRun
	done    map[settleKey]bool

	runs   *prometheus.CounterVec
	nudged *prometheus.CounterVec
	dur    prometheus.Histogram
}

type settleRun struct {
	done  chan struct{}
	err   error
	cause string // what started it: "gate" (an open) or "nudge" (a closing peer)
}

func newSettleRunner() *settleRunner {
	ctx, cancel := context.WithCancel(context.Background())
	return &settleRunner{
		ctx: ctx, cancel: cancel,
		running: map[settleKey]*settleRun{}, done: map[settleKey]bool{},
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "leader", Name: "gate_settles_total",
			Help: "Open-gate settle runs of a previous leader's chain, by result.",
		}, []string{"result"}),
		nudged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "leader", Name: "nudged_settles_total",
			Help: "Settle runs of a gracefully closed peer's chains that its nudge started, by result.",
		}, []string{"result"}),
		dur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "starlog", Subsystem: "leader", Name: "gate_settle_duration_seconds",
			Help:    "Duration of open-gate settle runs.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5 ms … 41 s
		}),
	}
}

// wait joins or starts the run of key and waits for it or ctx. A key that
// settled once stays settled: only its incarnation could add epochs, and
// the run's fence claim stopped that.
func (r *settleRunner) wait(ctx context.Context, key settleKey, fn func(context.Context, settleKey) error) error {
	run, err := r.start(key, "gate", fn)
	if run == nil {
		return err
	}
	select {
	case <-run.done:
		return run.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// start joins or starts the run of key without waiting for it; a nil run
// means the key is settled (nil error) or the runner closed.
func (r *settleRunner) start(key settleKey, cause string, fn func(context.Context, settleKey) error) (*settleRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done[key] {
		return nil, nil
	}
	run := r.running[key]
	if run == nil {
		if err := r.ctx.Err(); err != nil {
			return nil, loglet.ErrClosed
		}
		run = &settleRun{done: make(chan struct{}), cause: cause}
		r.running[key] = run
		r.wg.Add(1)
		go r.run(key, run, fn)
	}
	return run, nil
}

func (r *settleRunner) run(key settleKey, run *settleRun, fn func(context.Context, settleKey) error) {
	defer r.wg.Done()
	start := time.Now()
	// A run is bounded, so a settle stuck on a store refusing it (a bucket
	// down for good, a grant missing) ends as an error the metric counts
	// and the log names; the next open that needs the chain starts a new
	// run.
	ctx, cancel := context.WithTimeout(r.ctx, settleRunTimeout)
	err := fn(ctx, key)
	cancel()
	r.dur.Observe(time.Since(start).Seconds())
	res := "ok"
	if err != nil {
		res = "error"
	}
	if run.cause == "nudge" {
		r.nudged.WithLabelValues(res).Inc()
	} else {
		r.runs.WithLabelValues(res).Inc()
	}
	r.mu.Lock()
	delete(r.running, key)
	if err == nil {
		r.done[key] = true
	}
	run.err = err
	r.mu.Unlock()
	close(run.done)
}

// close cancels the runs and waits for them.
func (r *settleRunner) close() {
	r.cancel()
	r.wg.Wait()
}

// StartSettle starts settling both chains of incarnation inc of star (and
// its earlier incarnations) in the settle runner, joining a run already
// going, without waiting: a closing peer's nudge. It fails only once the
// runner is closed.
func (ls *Leadership) StartSettle(star string, inc uint64) error {
	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		if _, err := ls.runner.start(settleKey{star: star, class: class, inc: inc}, "nudge", ls.settleFn); err != nil {
			return err
		}
	}
	return nil
}
