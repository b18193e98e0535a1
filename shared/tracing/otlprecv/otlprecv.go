// Package otlprecv is an OTLP/HTTP trace receiver for tests: the spans a
// process exports, as a collector would get them.
package otlprecv

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/tracing"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
)

// Receiver is an OTLP/HTTP trace receiver on loopback (protobuf on
// /v1/traces, as the OpenTelemetry SDK's http/protobuf exporter sends):
// it keeps every span exported to it.
type Receiver struct {
	// URL is the receiver's endpoint, for OTEL_EXPORTER_OTLP_ENDPOINT.
	URL string

	mu    sync.Mutex
	spans []*tracepb.Span
}

// StartReceiver starts a receiver, closed when the test ends.
func Start(t testing.TB) *Receiver {
	t.Helper()
	o := &Receiver{}
	srv := httptest.NewServer(http.HandlerFunc(o.serve))
	t.Cleanup(srv.Close)
	o.URL = srv.URL
	return o
}

func (o *Receiver) serve(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(r.Body)
	var req coltracepb.ExportTraceServiceRequest
	if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
		http.Error(w, "bad export", http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	for _, rs := range req.ResourceSpans {
		for _, ss := range rs.ScopeSpans {
			o.spans = append(o.spans, ss.Spans...)
		}
	}
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-protobuf")
	b, _ := proto.Marshal(&coltracepb.ExportTraceServiceResponse{})
	w.Write(b)
}

// Spans are the spans received so far.
func (o *Receiver) Spans() []*tracepb.Span {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]*tracepb.Span(nil), o.spans...)
}

// SpanAttr is a span's string attribute key ("" if absent).
func SpanAttr(s *tracepb.Span, key string) string {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetStringValue()
		}
	}
	return ""
}

// Tracing turns tracing on for the test through the standard OTEL_*
// environment (OTLP/HTTP to a receiver started for it, every span
// sampled) and returns the star's tracing and the receiver; the tracing
// shuts down with the test.
func Tracing(t *testing.T, service string) (*tracing.Tracing, *Receiver) {
	t.Helper()
	rcv := Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	t.Setenv("OTEL_TRACES_SAMPLER", "parentbased_always_on")
	tr, err := tracing.FromEnv(t.Context(), service)
	if err != nil || !tr.On {
		t.Fatalf("tracing from the environment: on %v, %v", tr != nil && tr.On, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = tr.Shutdown(ctx)
	})
	return tr, rcv
}
