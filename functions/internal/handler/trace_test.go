package handler_test

import (
	"context"
	"slices"
	"testing"

	"github.com/aws/aws-lambda-go/events"

	"github.com/starlog/starlog/functions/internal/handler"
	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/tracing"
	"github.com/starlog/starlog/shared/tracing/otlprecv"
)

// With the OpenTelemetry environment set on the function, each invocation
// traces its janitor pass, plan or jobs, and its spans are exported before
// it returns: a frozen Lambda would otherwise hold them until its next
// invocation, or lose them (issue 32 item 3: the auditor's jobs).
func TestInvocationsTracedAndFlushed(t *testing.T) {
	rcv := otlprecv.Start(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.URL)
	t.Setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
	tr, err := tracing.FromEnv(t.Context(), "starlog-janitor")
	if err != nil || !tr.On {
		t.Fatalf("tracing from the environment: %v", err)
	}
	defer tr.Shutdown(context.Background())
	var sent captured
	rt := &handler.Runtime{Stores: memStores(t), Sender: &sent, Logger: quiet(), Tracing: tr}
	ev := events.EventBridgeEvent{ID: "e1", DetailType: "Scheduled Event", Source: "aws.events"}
	if err := handler.Janitor(rt)(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	if err := handler.Plan(rt)(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	ch := settle.ChainRef{Star: "star1", Class: meta.Express}
	if _, err := handler.Queue(rt, auditjob.KindChainSettle)(context.Background(),
		events.SQSEvent{Records: []events.SQSMessage{record("m1", string(auditjob.ChainSettle(ch, 1).Marshal()))}}); err != nil {
		t.Fatal(err)
	}
	// No flush here: the handlers must have exported their spans.
	var names []string
	var job string
	for _, s := range rcv.Spans() {
		names = append(names, s.Name)
		if s.Name == "auditor chain-settle" {
			job = otlprecv.SpanAttr(s, "starlog.chain")
		}
	}
	for _, want := range []string{"auditor janitor", "auditor plan", "auditor chain-settle"} {
		if !slices.Contains(names, want) {
			t.Errorf("spans exported by the time the invocations returned: %v; missing %q", names, want)
		}
	}
	if job != "star1/express" {
		t.Errorf("the job's span names chain %q, want star1/express", job)
	}
}
