package server

import (
	"net/http"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/starlog/starlog/shared/api"
)

// endSpan ends a request's server span with what a reader of the trace
// wants to find: the star, the route, the basin and stream, the status.
func (s *Server) endSpan(span trace.Span, r *http.Request, rt route, status int) {
	if span.IsRecording() {
		attrs := []attribute.KeyValue{
			attribute.String("starlog.star", s.n.StarID()),
			attribute.String("starlog.route", rt.kind.String()),
			attribute.Int("http.response.status_code", status),
			attribute.Bool("starlog.forwarded", r.Header.Get(HeaderForwardedBy) != ""),
		}
		if b := r.Header.Get(api.HeaderBasin); b != "" {
			attrs = append(attrs, attribute.String("starlog.basin", b))
		}
		if rt.name != "" {
			attrs = append(attrs, attribute.String("starlog.name", rt.name))
		}
		span.SetAttributes(attrs...)
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	span.End()
}

// endDurableSpan ends a Durable Streams request's server span: the star,
// the face, the stream's path, the status.
func (s *Server) endDurableSpan(span trace.Span, r *http.Request, status int) {
	if status == 0 {
		status = http.StatusOK
	}
	if span.IsRecording() {
		span.SetAttributes(
			attribute.String("starlog.star", s.n.StarID()),
			attribute.String("starlog.face", "durable-streams"),
			attribute.String("url.path", r.URL.Path),
			attribute.Int("http.response.status_code", status),
			attribute.Bool("starlog.forwarded", r.Header.Get(HeaderForwardedBy) != ""),
		)
		if status >= 500 {
			span.SetStatus(codes.Error, http.StatusText(status))
		}
	}
	span.End()
}
