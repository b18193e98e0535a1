package kafka

import (
	"context"
	"reflect"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A span per Kafka request (issue 32 item 3, docs/kafka.md "Traces"), as
// the S2 and Durable Streams faces trace theirs: named "kafka <API>",
// with the API's key and version, its topic and partition counts and the
// first error code of its answer. A produce's appends run under it, so
// their steps (admit, sequence, pool wait, cut, each bucket's put,
// release: star/streams) are its children, and a request sent on to
// another star (an append at a partition's leader, a group request at its
// coordinator) carries its trace context there (forward.go): one trace
// across the stars. Kafka clients send no trace context, so a request's
// span starts a trace; off when Config.Tracer is nil.

// startSpan starts req's span under ctx. peer: the request came from
// another star (grouppeer.go), under that star's HTTP server span.
func (s *Server) startSpan(ctx context.Context, req kmsg.Request, peer bool) (context.Context, trace.Span) {
	if s.tracer == nil {
		return ctx, nil
	}
	kind := trace.SpanKindServer
	if peer {
		kind = trace.SpanKindInternal
	}
	return s.tracer.Start(ctx, "kafka "+kmsg.NameForKey(req.Key()), trace.WithSpanKind(kind))
}

// endSpan ends a request's span (nil: none) with what it did: its
// topics and partitions, the answer's first error code (an error status
// unless 0), or the error that closed the connection.
func (s *Server) endSpan(span trace.Span, req kmsg.Request, resp kmsg.Response, err error, peer bool) {
	if span == nil {
		return
	}
	if span.IsRecording() {
		topics, parts := requestCounts(req)
		code := int16(0)
		if resp != nil {
			code = firstErrorCode(reflect.ValueOf(resp))
		}
		span.SetAttributes(
			attribute.String("starlog.star", s.star.StarID()),
			attribute.String("kafka.api", kmsg.NameForKey(req.Key())),
			attribute.Int("kafka.api_key", int(req.Key())),
			attribute.Int("kafka.api_version", int(req.GetVersion())),
			attribute.Int("kafka.topics", topics),
			attribute.Int("kafka.partitions", parts),
			attribute.Int("kafka.error_code", int(code)),
			attribute.Bool("starlog.forwarded", peer),
		)
		switch {
		case err != nil:
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		case code != 0:
			msg := "error code " + kmsg.NameForKey(req.Key())
			if e := kerr.ErrorForCode(code); e != nil {
				msg = e.Error()
			}
			span.SetStatus(codes.Error, msg)
		}
	}
	span.End()
}

// requestCounts is how many topics a request names (its Topics field)
// and how many partitions in them (each topic's Partitions), 0 for what
// it does not have.
func requestCounts(req kmsg.Request) (topics, parts int) {
	v := reflect.ValueOf(req)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return 0, 0
	}
	ts := v.FieldByName("Topics")
	if ts.Kind() != reflect.Slice {
		return 0, 0
	}
	for i := range ts.Len() {
		t := ts.Index(i)
		if t.Kind() != reflect.Struct {
			continue
		}
		if ps := t.FieldByName("Partitions"); ps.Kind() == reflect.Slice {
			parts += ps.Len()
		}
	}
	return ts.Len(), parts
}

// firstErrorCode is the first non-zero ErrorCode field of a response,
// walked in order (the whole answer's, then its topics' and partitions').
func firstErrorCode(v reflect.Value) int16 {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return 0
		}
		return firstErrorCode(v.Elem())
	case reflect.Struct:
		if f := v.FieldByName("ErrorCode"); f.Kind() == reflect.Int16 && f.Int() != 0 {
			return int16(f.Int())
		}
		for i := range v.NumField() {
			if k := v.Field(i).Kind(); k == reflect.Slice || k == reflect.Struct || k == reflect.Pointer {
				if c := firstErrorCode(v.Field(i)); c != 0 {
					return c
				}
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return 0 // bytes: records, not structure
		}
		for i := range v.Len() {
			if c := firstErrorCode(v.Index(i)); c != 0 {
				return c
			}
		}
	}
	return 0
}
