package streams

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/starlog/starlog/star/loglet"
)

// stepTracer is the Trace hook of a batch appended under ctx's span: each
// step on the way to its ack (admission, sequencing, then the loglet's pool
// wait, cut, each bucket's PUT and the release) becomes a child span of the
// append's, with the step's own start and end. It is nil, and costs
// nothing, when ctx's span is not recording (tracing off or not sampled).
func stepTracer(ctx context.Context) func(loglet.Step) {
	parent := trace.SpanFromContext(ctx)
	if !parent.IsRecording() {
		return nil
	}
	tr := parent.TracerProvider().Tracer("github.com/starlog/starlog/star/streams")
	// Only the span is kept: not the request's context and its values.
	pctx := trace.ContextWithSpan(context.Background(), parent)
	return func(st loglet.Step) {
		var attrs []attribute.KeyValue
		if st.Name != "admit" && st.Name != "sequence" && st.Name != "pool wait" { // the flight's steps
			attrs = append(attrs, attribute.Int64("starlog.slot", int64(st.Slot)))
		}
		_, sp := tr.Start(pctx, st.Name, trace.WithTimestamp(st.Start), trace.WithAttributes(attrs...))
		if st.Err != nil {
			sp.RecordError(st.Err)
			sp.SetStatus(codes.Error, st.Err.Error())
		}
		sp.End(trace.WithTimestamp(st.End))
	}
}

// traceStep tells hook (if any) about a step of the stream's own.
func traceStep(hook func(loglet.Step), name string, start, end time.Time) {
	if hook != nil {
		hook(loglet.Step{Name: name, Start: start, End: end})
	}
}
