// Package auditor runs the auditor's jobs inside one process, for
// `star dev`: plan and the janitor on a ticker, and the jobs they find
// (settle, trim, chain-settle) from an in-memory queue with a bounded pool
// of workers, each job retried with backoff a bounded number of times. It
// is the same job code the Lambda functions run (shared/auditjob); only
// the triggers and the queue differ.
package auditor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// Options shape a Runner. Zero fields take the defaults.
type Options struct {
	// Interval is the plan and janitor period (required, > 0).
	Interval time.Duration
	// Workers run jobs at once (default 2: a dev machine serves too).
	Workers int
	// MaxAttempts bounds the runs of one failing job before it is dropped
	// (default 5); the next plan finds it again if it is still due, as a
	// dead-letter queue would hold it for a person.
	MaxAttempts int
	// RetryBase is the first retry's delay, doubled per attempt up to
	// RetryMax (defaults 1 s and 1 min), with ±20% jitter.
	RetryBase, RetryMax time.Duration
	// Registerer takes the runner's metrics (nil: none). The job metrics
	// of shared/settle are the Stores' own.
	Registerer prometheus.Registerer
	// Tracer traces each plan, janitor pass and job (nil: none).
	Tracer trace.TracerProvider
}

// Runner is the in-process auditor.
type Runner struct {
	st     *settle.Stores
	o      Options
	log    *slog.Logger
	m      *metrics
	tracer trace.Tracer // nil: tracing off

	// doJob runs one job (auditjob.Do; tests substitute it).
	doJob func(context.Context, *settle.Stores, auditjob.Job) error

	mu      sync.Mutex
	ready   []item
	pending map[string]bool // queued, waiting to retry, or running
	wake    chan struct{}
}

type item struct {
	job     auditjob.Job
	attempt int // runs so far
}

// New checks the stores and options.
func New(st *settle.Stores, o Options) (*Runner, error) {
	switch {
	case st == nil || st.Meta == nil || st.Objects == nil || st.Streams == nil || st.SettledBucket == "":
		return nil, errors.New("auditor: Stores needs Meta, Objects, Streams and SettledBucket")
	case o.Interval <= 0:
		return nil, fmt.Errorf("auditor: interval %v must be positive", o.Interval)
	}
	if err := st.Config.WithDefaults().Validate(); err != nil {
		return nil, fmt.Errorf("auditor: %w", err)
	}
	if o.Workers <= 0 {
		o.Workers = 2
	}
	if o.MaxAttempts <= 0 {
		o.MaxAttempts = 5
	}
	if o.RetryBase <= 0 {
		o.RetryBase = time.Second
	}
	if o.RetryMax < o.RetryBase {
		o.RetryMax = max(time.Minute, o.RetryBase)
	}
	log := st.Logger
	if log == nil {
		log = slog.Default()
	}
	r := &Runner{st: st, o: o, log: log.With("component", "auditor"), m: newMetrics(o.Registerer),
		doJob: auditjob.Do, pending: map[string]bool{}, wake: make(chan struct{}, 1)}
	if o.Tracer != nil {
		r.tracer = o.Tracer.Tracer("github.com/starlog/starlog/star/auditor")
	}
	return r, nil
}

// Run runs the auditor on st every interval until ctx ends.
func Run(ctx context.Context, st *settle.Stores, interval time.Duration) error {
	r, err := New(st, Options{Interval: interval})
	if err != nil {
		return err
	}
	return r.Run(ctx)
}

// Run ticks at once and then every interval, and works the queue, until
// ctx ends; it returns when every worker has stopped (a job interrupted by
// the end is simply run again by a later process: every job converges).
func (r *Runner) Run(ctx context.Context) error {
	r.log.Info("auditor running", "interval", r.o.Interval, "workers", r.o.Workers)
	var wg sync.WaitGroup
	for range r.o.Workers {
		wg.Go(func() { r.work(ctx) })
	}
	t := time.NewTicker(r.o.Interval)
	defer t.Stop()
	for {
		if err := r.Tick(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("auditor tick failed; the next one retries", "err", err)
		}
		select {
		case <-ctx.Done():
			wg.Wait()
			r.log.Info("auditor stopped")
			return nil
		case <-t.C:
		}
	}
}

// Tick plans once and runs the janitor once, queueing what they find
// (jobs already queued, waiting or running are not queued twice).
func (r *Runner) Tick(ctx context.Context) error {
	now := time.Now()
	if r.st.Now != nil {
		now = r.st.Now()
	}
	var errs []error
	jobs, err := auditjob.PlanTraced(meta.WithWriter(ctx, meta.WriterPlan), r.tracer, r.st, now)
	if err != nil {
		errs = append(errs, fmt.Errorf("plan: %w", err))
	}
	rep, err := auditjob.JanitorTraced(meta.WithWriter(ctx, meta.WriterJanitor), r.tracer, r.st)
	if err != nil {
		errs = append(errs, fmt.Errorf("janitor: %w", err))
	}
	jobs = append(jobs, rep.Jobs...)
	added := r.enqueue(jobs)
	err = errors.Join(errs...)
	r.m.tick(err)
	if added > 0 || rep.Deferred > 0 {
		r.log.Debug("auditor tick", "found", len(jobs), "queued", added, "deferred", rep.Deferred)
	}
	if len(rep.MarkedDead) > 0 {
		r.log.Info("janitor: marked stars dead", "stars", rep.MarkedDead)
	}
	return err
}

// Pending is how many jobs are queued, waiting to retry, or running.
func (r *Runner) Pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.pending)
}

func (r *Runner) enqueue(jobs []auditjob.Job) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, j := range jobs {
		if r.pending[j.Key()] {
			continue
		}
		r.pending[j.Key()] = true
		r.ready = append(r.ready, item{job: j})
		n++
	}
	r.m.pending.Set(float64(len(r.pending)))
	if n > 0 {
		r.signal()
	}
	return n
}

// signal wakes a worker; callers hold mu.
func (r *Runner) signal() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// next takes the oldest ready job, waiting until there is one or ctx ends.
func (r *Runner) next(ctx context.Context) (item, bool) {
	for {
		r.mu.Lock()
		if len(r.ready) > 0 {
			it := r.ready[0]
			r.ready = r.ready[1:]
			if len(r.ready) > 0 {
				r.signal() // more for another worker
			}
			r.mu.Unlock()
			return it, true
		}
		r.mu.Unlock()
		select {
		case <-ctx.Done():
			return item{}, false
		case <-r.wake:
		}
	}
}

func (r *Runner) work(ctx context.Context) {
	for {
		it, ok := r.next(ctx)
		if !ok {
			return
		}
		r.run(ctx, it)
	}
}

// run runs one job and settles its fate: done, retried later, or dropped.
func (r *Runner) run(ctx context.Context, it item) {
	kind := string(it.job.Kind)
	t0 := time.Now()
	err := r.do(ctx, it.job)
	r.m.seconds.WithLabelValues(kind).Observe(time.Since(t0).Seconds())
	it.attempt++
	log := r.log.With("job", it.job.String(), "attempt", it.attempt)
	switch {
	case err == nil:
		log.Debug("job done", "took", time.Since(t0))
		r.m.jobs.WithLabelValues(kind, "done").Inc()
		r.finish(it.job)
	case ctx.Err() != nil:
		r.finish(it.job) // stopping: a later run re-plans it
	case it.attempt >= r.o.MaxAttempts:
		log.Error("job failed for the last time; dropped until a plan finds it again", "err", err)
		r.m.jobs.WithLabelValues(kind, "dropped").Inc()
		r.finish(it.job)
	default:
		d := r.backoff(it.attempt)
		log.Warn("job failed; retrying", "err", err, "in", d)
		r.m.jobs.WithLabelValues(kind, "retried").Inc()
		time.AfterFunc(d, func() {
			if ctx.Err() != nil {
				r.finish(it.job)
				return
			}
			r.mu.Lock()
			r.ready = append(r.ready, it)
			r.signal()
			r.mu.Unlock()
		})
	}
}

// do runs a job; a panic is its failure, not the process's.
func (r *Runner) do(ctx context.Context, j auditjob.Job) (err error) {
	ctx, end := auditjob.StartSpan(ctx, r.tracer, string(j.Kind), j.Attributes()...)
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
		end(err)
	}()
	return r.doJob(meta.WithWriter(ctx, string(j.Kind)), r.st, j)
}

func (r *Runner) finish(j auditjob.Job) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.pending, j.Key())
	r.m.pending.Set(float64(len(r.pending)))
}

// backoff is the delay before retry n (n ≥ 1): RetryBase doubled per
// attempt, capped at RetryMax, ±20% jitter so failing jobs spread out.
func (r *Runner) backoff(n int) time.Duration {
	d := r.o.RetryBase
	for i := 1; i < n && d < r.o.RetryMax; i++ {
		d *= 2
	}
	d = min(d, r.o.RetryMax)
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}
