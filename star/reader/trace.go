package reader

import (
	"context"
	"errors"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/starlog/starlog/shared/objstore"
)

// A read under a recording span (a request's, when tracing is on and the
// request sampled) is traced as a tree: a "read" span per Read, under it a
// "fetch <kind>" span per cached part it needs (an epoch's bucket set, a
// settled object's footer or chunk, a span ref's extent) saying whether
// the cache had it, and under a miss a span per object-store request with
// its bucket, the part's kind, the bytes and the attempt (0 the first; a
// higher one a hedge or the next bucket after a failure). A cursor's wait
// for a tail is a "tail wait" span. Under a span that does not record,
// each hook is one context lookup and allocates nothing.

const tracerName = "github.com/starlog/starlog/star/reader"

// recording is ctx's span when it records, else nil.
func recording(ctx context.Context) trace.Span {
	if sp := trace.SpanFromContext(ctx); sp.IsRecording() {
		return sp
	}
	return nil
}

// child starts a span under parent (recording) with only the span carried
// from ctx, not the rest of its values.
func child(ctx context.Context, parent trace.Span, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	return parent.TracerProvider().Tracer(tracerName).Start(ctx, name, trace.WithAttributes(attrs...))
}

func endErr(sp trace.Span, err error) {
	if err != nil {
		sp.RecordError(err)
		sp.SetStatus(codes.Error, err.Error())
	}
	sp.End()
}

// startRead starts a Read's span when ctx's span records.
func startRead(ctx context.Context, stream Stream, start Start) (context.Context, trace.Span) {
	parent := recording(ctx)
	if parent == nil {
		return ctx, nil
	}
	return child(ctx, parent, "read", attribute.String("starlog.stream", stream.ID), attribute.String("starlog.start", start.String()))
}

// endRead ends a Read's span (nil: not traced) with what it returned.
func endRead(sp trace.Span, res Result, err error) {
	if sp == nil {
		return
	}
	if err == nil {
		sp.SetAttributes(attribute.Int("starlog.records", len(res.Records)), attribute.Int("starlog.bytes", res.Bytes),
			attribute.String("starlog.stop", res.Stop.String()))
	}
	endErr(sp, err)
}

// Fetch outcomes: the cache held the part, this caller loaded it, or it
// joined another caller's load of the same part.
const (
	fetchHit int32 = iota + 1
	fetchMiss
	fetchJoined
)

// fetchTrace is one traced fetch: its span and the attempts of its
// object requests so far.
type fetchTrace struct {
	span     trace.Span
	outcome  atomic.Int32
	attempts atomic.Int32
}

type fetchKey struct{}

// startFetch starts a fetch's span when ctx's span records (nil
// otherwise); ctx then carries it, so the load's object requests are its
// children and number their attempts.
func startFetch(ctx context.Context, kind, key string) (context.Context, *fetchTrace) {
	parent := recording(ctx)
	if parent == nil {
		return ctx, nil
	}
	ft := &fetchTrace{}
	ctx, ft.span = child(ctx, parent, "fetch "+kind, attribute.String("starlog.key", key))
	return context.WithValue(ctx, fetchKey{}, ft), ft
}

// set records an outcome (ft nil: not traced).
func (ft *fetchTrace) set(o int32) {
	if ft != nil {
		ft.outcome.Store(o)
	}
}

func (ft *fetchTrace) end(err error) {
	if ft == nil {
		return
	}
	cache := "hit"
	switch ft.outcome.Load() {
	case fetchMiss:
		cache = "miss"
	case fetchJoined:
		cache = "joined"
	}
	ft.span.SetAttributes(attribute.String("starlog.cache", cache), attribute.Int("starlog.attempts", int(ft.attempts.Load())))
	endErr(ft.span, err)
}

// reqSpan is one object-store request's span (zero: not traced).
type reqSpan struct {
	span trace.Span
}

// startRequest starts the span of an object-store request (op GET or
// HEAD) of a part of kind, when ctx's span records.
func startRequest(ctx context.Context, op, bucket, kind, key string, off, length int64) (context.Context, reqSpan) {
	parent := recording(ctx)
	if parent == nil {
		return ctx, reqSpan{}
	}
	attempt := 0
	if ft, ok := ctx.Value(fetchKey{}).(*fetchTrace); ok {
		attempt = int(ft.attempts.Add(1)) - 1
	}
	ctx, sp := child(ctx, parent, op+" "+bucket, attribute.String("starlog.object", kind), attribute.String("starlog.key", key),
		attribute.Int64("starlog.offset", off), attribute.Int64("starlog.length", length), attribute.Int("starlog.attempt", attempt))
	return ctx, reqSpan{span: sp}
}

// end ends the request's span with the bytes it returned and its error.
// A missing key (a straggling copy, or trimmed) and an attempt ended by
// ctx (another bucket answered first, or the read ended) are answers, not
// errors: each is named by its own attribute.
func (r reqSpan) end(ctx context.Context, n int, err error) {
	if r.span == nil {
		return
	}
	r.span.SetAttributes(attribute.Int("starlog.bytes", n))
	switch {
	case err == nil:
	case errors.Is(err, objstore.ErrNotFound):
		r.span.SetAttributes(attribute.Bool("starlog.not_found", true))
		err = nil
	case ctx.Err() != nil && !errors.Is(context.Cause(ctx), errAttemptTimeout):
		r.span.SetAttributes(attribute.Bool("starlog.canceled", true))
		err = nil
	}
	endErr(r.span, err)
}

// startTailWait starts the span of a cursor's wait for records at the
// tail, when ctx's span records; endTailWait ends it saying what woke it.
func startTailWait(ctx context.Context) trace.Span {
	parent := recording(ctx)
	if parent == nil {
		return nil
	}
	_, sp := child(ctx, parent, "tail wait")
	return sp
}

func endTailWait(sp trace.Span, wokenBy string) {
	if sp == nil {
		return
	}
	sp.SetAttributes(attribute.String("starlog.woken_by", wokenBy))
	sp.End()
}
