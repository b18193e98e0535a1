// Package tracing sets up OpenTelemetry traces from the standard
// environment variables (OTEL_EXPORTER_OTLP_ENDPOINT,
// OTEL_EXPORTER_OTLP_PROTOCOL, OTEL_TRACES_SAMPLER, OTEL_SERVICE_NAME and
// the rest of the OpenTelemetry SDK's own): off, and free, when none asks
// for an exporter. It hands the provider to its callers instead of
// setting OpenTelemetry's global one, so a process (or a test) may run
// several stars, each with its own.
package tracing

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// Tracing is a process's trace provider and what ends it.
type Tracing struct {
	trace.TracerProvider
	// On says traces are exported (otherwise the provider is a no-op).
	On       bool
	shutdown func(context.Context) error
	flush    func(context.Context) error
}

// Off is tracing turned off: a no-op provider.
func Off() *Tracing {
	none := func(context.Context) error { return nil }
	return &Tracing{TracerProvider: noop.NewTracerProvider(), shutdown: none, flush: none}
}

// Flush exports the spans ended so far (bounded by ctx): what a Lambda
// function does before its invocation returns, since the runtime may
// freeze the process until the next one.
func (t *Tracing) Flush(ctx context.Context) error { return t.flush(ctx) }

// Shutdown flushes the spans not yet exported and stops the exporter
// (bounded by ctx).
func (t *Tracing) Shutdown(ctx context.Context) error { return t.shutdown(ctx) }

// Propagator is the W3C trace context (traceparent, tracestate): how a
// span's context crosses between stars and from clients.
func Propagator() propagation.TextMapPropagator { return propagation.TraceContext{} }

// FromEnv reads the environment: traces are exported over OTLP when
// OTEL_TRACES_EXPORTER is "otlp", or when it is unset and an OTLP endpoint
// is (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT);
// "none", OTEL_SDK_DISABLED=true or no endpoint turns them off. The
// protocol is OTEL_EXPORTER_OTLP_TRACES_PROTOCOL or
// OTEL_EXPORTER_OTLP_PROTOCOL: http/protobuf (the default) or grpc. The
// sampler (OTEL_TRACES_SAMPLER, default parentbased_always_on) and the
// exporter's endpoint, headers and timeout are read by the SDK itself;
// service is the service name unless OTEL_SERVICE_NAME sets one.
func FromEnv(ctx context.Context, service string) (*Tracing, error) {
	if strings.EqualFold(os.Getenv("OTEL_SDK_DISABLED"), "true") {
		return Off(), nil
	}
	switch exp := os.Getenv("OTEL_TRACES_EXPORTER"); exp {
	case "none":
		return Off(), nil
	case "":
		if os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") == "" && os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") == "" {
			return Off(), nil
		}
	case "otlp":
	default:
		return nil, fmt.Errorf("tracing: OTEL_TRACES_EXPORTER=%q: only otlp and none are supported", exp)
	}
	proto := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL")
	if proto == "" {
		proto = os.Getenv("OTEL_EXPORTER_OTLP_PROTOCOL")
	}
	var exporter sdktrace.SpanExporter
	var err error
	switch proto {
	case "", "http/protobuf":
		exporter, err = otlptracehttp.New(ctx)
	case "grpc":
		exporter, err = otlptracegrpc.New(ctx)
	default:
		return nil, fmt.Errorf("tracing: OTLP protocol %q: only http/protobuf and grpc are supported", proto)
	}
	if err != nil {
		return nil, fmt.Errorf("tracing: OTLP exporter: %w", err)
	}
	// Later options win: OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES
	// override the default name.
	res, err := resource.New(ctx, resource.WithAttributes(semconv.ServiceName(service)), resource.WithTelemetrySDK(), resource.WithFromEnv())
	if err != nil && !errors.Is(err, resource.ErrPartialResource) {
		return nil, fmt.Errorf("tracing: resource: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter), sdktrace.WithResource(res))
	return &Tracing{TracerProvider: tp, On: true, shutdown: tp.Shutdown, flush: tp.ForceFlush}, nil
}
