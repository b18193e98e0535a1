package auditjob

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/starlog/starlog/shared/settle"
)

// The auditor's spans (docs/deploy.md, "Traces"): one per plan, janitor
// pass and job, named "auditor <what>", in both runtimes (the Lambda
// functions and `star dev`'s in-process runner), so the two trace alike.

// StartSpan starts a span named "auditor "+what under ctx; end records
// err (if any) and ends it. A nil tracer traces nothing and costs nothing.
func StartSpan(ctx context.Context, tr trace.Tracer, what string, attrs ...attribute.KeyValue) (context.Context, func(error)) {
	if tr == nil {
		return ctx, func(error) {}
	}
	ctx, span := tr.Start(ctx, "auditor "+what, trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}
}

// Attributes describe a job on its span.
func (j Job) Attributes() []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		attribute.String("starlog.job.kind", string(j.Kind)),
		attribute.String("starlog.chain", j.Chain.String()),
		attribute.Int64("starlog.epoch", int64(j.Epoch)),
	}
	if j.Kind == settle.KindSettle {
		attrs = append(attrs, attribute.Int64("starlog.era.from", int64(j.From)), attribute.Int64("starlog.era.end", int64(j.End)))
	}
	if j.Owner != "" {
		attrs = append(attrs, attribute.String("starlog.owner", j.Owner))
	}
	return attrs
}

// DoTraced is Do inside the job's span.
func DoTraced(ctx context.Context, tr trace.Tracer, st *settle.Stores, j Job) error {
	ctx, end := StartSpan(ctx, tr, string(j.Kind), j.Attributes()...)
	err := Do(ctx, st, j)
	end(err)
	return err
}

// PlanTraced is Plan inside an "auditor plan" span that counts the jobs
// found.
func PlanTraced(ctx context.Context, tr trace.Tracer, st *settle.Stores, now time.Time) ([]Job, error) {
	ctx, end := StartSpan(ctx, tr, "plan")
	jobs, err := Plan(ctx, st, now)
	if tr != nil {
		trace.SpanFromContext(ctx).SetAttributes(attribute.Int("starlog.jobs", len(jobs)))
	}
	end(err)
	return jobs, err
}

// JanitorTraced is Janitor inside an "auditor janitor" span that counts
// the chains looked at, the jobs found and the stars marked dead.
func JanitorTraced(ctx context.Context, tr trace.Tracer, st *settle.Stores) (JanitorReport, error) {
	ctx, end := StartSpan(ctx, tr, "janitor")
	rep, err := Janitor(ctx, st)
	if tr != nil {
		trace.SpanFromContext(ctx).SetAttributes(attribute.Int("starlog.chains", rep.Chains),
			attribute.Int("starlog.jobs", len(rep.Jobs)), attribute.Int("starlog.stars_marked_dead", len(rep.MarkedDead)))
	}
	end(err)
	return rep, err
}
