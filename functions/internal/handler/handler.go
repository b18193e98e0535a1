// Package handler holds the auditor functions' Lambda handlers: thin
// adapters from an EventBridge schedule or an SQS batch to shared/auditjob.
// Each functions/<job>/main.go builds a Runtime once at cold start and
// hands one of these to lambda.Start; tests call them directly.
package handler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"go.opentelemetry.io/otel/trace"

	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/auditjob/awsenv"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/tracing"
)

// Job names, as the CDK stack names the functions and their folders.
const (
	JobPlan        = "plan"
	JobJanitor     = "janitor"
	JobSettle      = string(settle.KindSettle)
	JobTrim        = string(settle.KindTrim)
	JobChainSettle = string(auditjob.KindChainSettle)
)

// sendsTo are the queues each scheduled job enqueues to.
var sendsTo = map[string][]string{
	JobPlan:    {JobSettle, JobTrim},
	JobJanitor: {JobChainSettle},
}

// Runtime is what every invocation of one function shares.
type Runtime struct {
	Stores *settle.Stores
	// Sender enqueues the jobs plan and janitor find (nil for the queue
	// functions).
	Sender auditjob.Sender
	Logger *slog.Logger
	// Now is the planning clock (nil: time.Now).
	Now func() time.Time
	// Publish runs after each plan, to publish gauges (nil: nothing).
	Publish func(context.Context) error
	// Reserve is kept free of a queue batch's deadline so the handler
	// can still report which records failed (default 5 s).
	Reserve time.Duration
	// Tracing, when on, traces each plan, janitor pass and job and is
	// flushed before each invocation returns (nil: off).
	Tracing *tracing.Tracing
}

// tracer is the runtime's tracer, nil when tracing is off.
func (rt *Runtime) tracer() trace.Tracer {
	if rt.Tracing == nil || !rt.Tracing.On {
		return nil
	}
	return rt.Tracing.Tracer("github.com/starlog/starlog/functions")
}

// flush exports the invocation's spans before it returns (the runtime may
// freeze the process after), within a second.
func (rt *Runtime) flush(ctx context.Context) {
	if rt.Tracing == nil || !rt.Tracing.On {
		return
	}
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	if err := rt.Tracing.Flush(fctx); err != nil {
		rt.log().Warn("tracing: spans not exported", "err", err)
	}
}

// Load builds job's Runtime from the process environment: the stores,
// the queues it sends to (each URL required), and the EMF publisher of
// the settle gauges (plan, when STARLOG_METRICS_NAMESPACE is set).
func Load(ctx context.Context, job string) (*Runtime, error) {
	env, err := awsenv.Parse(os.LookupEnv)
	if err != nil {
		return nil, err
	}
	log, err := awsenv.Logger(env)
	if err != nil {
		return nil, err
	}
	log = log.With("job", job)
	for _, q := range sendsTo[job] {
		if env.QueueURLs[q] == "" {
			return nil, fmt.Errorf("handler: %s sends %s jobs: %s is not set", job, q, awsenv.QueueURLEnv(q))
		}
	}
	art, err := awsenv.Open(ctx, env, log)
	if err != nil {
		return nil, err
	}
	tr, err := tracing.FromEnv(ctx, "starlog-"+job)
	if err != nil {
		return nil, err
	}
	rt := &Runtime{Stores: art.Stores, Logger: log, Tracing: tr}
	if art.Queues != nil {
		rt.Sender = art.Queues
	}
	if job == JobPlan && env.MetricsNamespace != "" {
		emf := EMF{Namespace: env.MetricsNamespace, Cluster: env.Cluster, Out: os.Stdout, Gatherer: art.Registry}
		rt.Publish = func(context.Context) error { return emf.Publish(time.Now()) }
	}
	return rt, nil
}

func (rt *Runtime) log() *slog.Logger {
	if rt.Logger != nil {
		return rt.Logger
	}
	return slog.Default()
}

func (rt *Runtime) now() time.Time {
	if rt.Now != nil {
		return rt.Now()
	}
	return time.Now()
}

// Plan handles the plan schedule: every due settle and trim-check job is
// sent to its queue. Errors fail the invocation (the alarm counts them);
// the next run plans again from the stores.
func Plan(rt *Runtime) func(context.Context, events.EventBridgeEvent) error {
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		if rt.Sender == nil {
			return errors.New("handler: plan has no queues to send to")
		}
		defer rt.flush(ctx)
		t0 := time.Now()
		jobs, err := auditjob.PlanTraced(ctx, rt.tracer(), rt.Stores, rt.now())
		if err != nil {
			return fmt.Errorf("plan: %w", err)
		}
		if err := rt.Sender.Send(ctx, jobs); err != nil {
			return fmt.Errorf("plan: enqueue %d jobs: %w", len(jobs), err)
		}
		rt.log().Info("planned", "event", ev.ID, "settle", count(jobs, settle.KindSettle), "trim", count(jobs, settle.KindTrim), "took", time.Since(t0))
		if rt.Publish != nil {
			if err := rt.Publish(ctx); err != nil {
				rt.log().Warn("publish settle gauges", "err", err)
			}
		}
		return nil
	}
}

// Janitor handles the janitor schedule: it marks stale stars dead and
// queues chain-settle jobs for the chains of stars that are gone and for
// halted epochs below a live star's mint head (see auditjob.Janitor).
func Janitor(rt *Runtime) func(context.Context, events.EventBridgeEvent) error {
	return func(ctx context.Context, ev events.EventBridgeEvent) error {
		if rt.Sender == nil {
			return errors.New("handler: janitor has no queue to send to")
		}
		defer rt.flush(ctx)
		rep, err := auditjob.JanitorTraced(ctx, rt.tracer(), rt.Stores)
		if err != nil && len(rep.Jobs) == 0 {
			return fmt.Errorf("janitor: %w", err)
		}
		// A failed reclaim pass still sends the jobs it found.
		if serr := rt.Sender.Send(ctx, rep.Jobs); serr != nil {
			return errors.Join(err, fmt.Errorf("janitor: enqueue %d jobs: %w", len(rep.Jobs), serr))
		}
		rt.log().Info("janitor pass", "event", ev.ID, "chains", rep.Chains, "chain_settle", len(rep.Jobs), "deferred", rep.Deferred,
			"marked_dead", rep.MarkedDead, "gone", rep.Gone, "trimmed_rows", rep.Retention.Rows, "deleted_streams_done", rep.Deleted.Done, "reclaimed", rep.Reclaim.Deleted, "reclaimed_bytes", rep.Reclaim.Bytes,
			"reclaim_pending", rep.Reclaim.Pending)
		if err != nil {
			return fmt.Errorf("janitor: %w", err)
		}
		return nil
	}
}

func count(jobs []auditjob.Job, k settle.Kind) int {
	n := 0
	for _, j := range jobs {
		if j.Kind == k {
			n++
		}
	}
	return n
}

// Queue handles an SQS batch of kind's jobs: each record's body is one
// job, run in turn; the response names every record that failed, so SQS
// redelivers only those and, after the queue's maxReceiveCount, moves them
// to its dead-letter queue. A body that does not parse, or names another
// kind, is a failure like any other: it ends in the dead-letter queue
// where it can be looked at. The handler itself never fails, so one bad
// record never fails its batch.
func Queue(rt *Runtime, kind settle.Kind) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(ctx context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		defer rt.flush(ctx)
		resp := events.SQSEventResponse{BatchItemFailures: []events.SQSBatchItemFailure{}}
		jctx, cancel := rt.jobContext(ctx)
		defer cancel()
		for _, rec := range ev.Records {
			log := rt.log().With("message", rec.MessageId, "receive_count", rec.Attributes["ApproximateReceiveCount"])
			if err := jctx.Err(); err != nil {
				log.Warn("no time left for the record: it is retried", "err", err)
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
				continue
			}
			t0 := time.Now()
			j, err := rt.one(jctx, kind, []byte(rec.Body))
			if err != nil {
				if j.Kind != "" {
					log = log.With("job", j.String())
				}
				log.Error("job failed", "err", err, "took", time.Since(t0))
				resp.BatchItemFailures = append(resp.BatchItemFailures, events.SQSBatchItemFailure{ItemIdentifier: rec.MessageId})
				continue
			}
			log.Info("job done", "job", j.String(), "took", time.Since(t0))
		}
		return resp, nil
	}
}

// jobContext leaves Reserve of the invocation's deadline for reporting.
func (rt *Runtime) jobContext(ctx context.Context) (context.Context, context.CancelFunc) {
	dl, ok := ctx.Deadline()
	if !ok {
		return context.WithCancel(ctx)
	}
	reserve := rt.Reserve
	if reserve <= 0 {
		reserve = 5 * time.Second
	}
	return context.WithDeadline(ctx, dl.Add(-reserve))
}

// one parses and runs one record's job; a panic is that record's failure.
func (rt *Runtime) one(ctx context.Context, kind settle.Kind, body []byte) (j auditjob.Job, err error) {
	j, err = auditjob.Parse(body)
	if err != nil {
		return auditjob.Job{}, fmt.Errorf("malformed job %.200q: %w", body, err)
	}
	if j.Kind != kind {
		return j, fmt.Errorf("a %s job on the %s queue", j.Kind, kind)
	}
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v\n%s", p, debug.Stack())
		}
	}()
	return j, auditjob.DoTraced(ctx, rt.tracer(), rt.Stores, j)
}
