package server_test

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	commonpb "go.opentelemetry.io/proto/otlp/common/v1"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/tracing"
	"github.com/starlog/starlog/shared/tracing/otlprecv"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/server"
)

// clientTrace and clientSpan are a client's traceparent (W3C's example).
const (
	clientTrace = "4bf92f3577b34da6a3ce929d0e0e4736"
	clientSpan  = "00f067aa0ba902b7"
	traceparent = "00-" + clientTrace + "-" + clientSpan + "-01"
)

// forwardedSpans waits until the client's trace holds a span named name
// from star a (the leader) and one from star b (the forwarding star), then
// shuts tracing down; it fails the test naming every span seen otherwise.
func forwardedSpans(t *testing.T, tr *tracing.Tracing, rcv *otlprecv.Receiver, name string) (atA, atB *tracepb.Span) {
	t.Helper()
	// A star's span ends when its handler returns, which may be just
	// after the client has the whole response: flush until both are in.
	flusher := tr.TracerProvider.(interface{ ForceFlush(context.Context) error })
	find := func() bool {
		if err := flusher.ForceFlush(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, s := range rcv.Spans() {
			if hex.EncodeToString(s.TraceId) != clientTrace || s.Name != name {
				continue
			}
			switch otlprecv.SpanAttr(s, "starlog.star") {
			case "a":
				atA = s
			case "b":
				atB = s
			}
		}
		return atA != nil && atB != nil
	}
	_ = poll.Wait(5*time.Second, func() error { // the checks below say what is missing
		if !find() {
			return errors.New("spans missing")
		}
		return nil
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := tr.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if atA == nil || atB == nil {
		names := []string{}
		for _, s := range rcv.Spans() {
			names = append(names, s.Name+"@"+otlprecv.SpanAttr(s, "starlog.star")+" "+hex.EncodeToString(s.TraceId))
		}
		t.Fatalf("the client's trace has the forwarding star's %q span %v and the leader's %v; spans: %v", name, atB != nil, atA != nil, names)
	}
	if got := hex.EncodeToString(atB.ParentSpanId); got != clientSpan {
		t.Errorf("the forwarding star's span has parent %s, want the client's %s", got, clientSpan)
	}
	if string(atA.ParentSpanId) != string(atB.SpanId) {
		t.Errorf("the leader's span has parent %x, want the forwarding star's span %x", atA.ParentSpanId, atB.SpanId)
	}
	if atB.Kind != tracepb.Span_SPAN_KIND_SERVER || atA.Kind != tracepb.Span_SPAN_KIND_SERVER {
		t.Errorf("span kinds %v and %v, want server", atB.Kind, atA.Kind)
	}
	return atA, atB
}

// Tracing, configured by the standard OTEL_* environment: an append
// forwarded from one star to its stream's leader is one trace, the
// leader's server span a child of the forwarding star's (W3C traceparent
// on the internal path), and a client's own traceparent is the parent of
// both (issue 32 item 3).
func TestForwardedAppendIsOneTrace(t *testing.T) {
	tr, rcv := otlprecv.Tracing(t, "starlog-test")
	objs, ms := memObjects(t), testsvc.SQLite(t)
	opts := server.Options{Tracer: tr, Auth: auth.Open()}
	a := starServing(t, "a", ms, objs, nil, opts)
	b := starServing(t, "b", ms, objs, nil, opts)
	a.setupBasin("trace-basin")
	want(t, a.appendJSON("trace-basin", "s", textRecords("a", 1)), 200, "") // a leads s
	want(t, b.appendJSON("trace-basin", "s", textRecords("b", 2), "traceparent", traceparent), 200, "")
	atA, _ := forwardedSpans(t, tr, rcv, "POST records")
	if otlprecv.SpanAttr(atA, "starlog.name") != "s" || otlprecv.SpanAttr(atA, "starlog.basin") != "trace-basin" {
		t.Errorf("leader's attributes %v", atA.Attributes)
	}
}

// The Durable Streams face is traced the same way: an append through the
// star that does not lead the stream is one trace across both stars.
func TestForwardedDurableAppendIsOneTrace(t *testing.T) {
	tr, rcv := otlprecv.Tracing(t, "starlog-test")
	objs, ms := memObjects(t), testsvc.SQLite(t)
	opts := server.Options{Tracer: tr, Auth: auth.Open(), Durable: &durable.Config{}}
	a := starServing(t, "a", ms, objs, nil, opts)
	b := starServing(t, "b", ms, objs, nil, opts)
	want(t, a.ds("PUT", "room", "hello", "Content-Type", "text/plain"), 201, "") // a leads room
	want(t, b.ds("POST", "room", "more", "Content-Type", "text/plain", "traceparent", traceparent), 204, "")
	atA, atB := forwardedSpans(t, tr, rcv, "durable-streams POST")
	for _, sp := range []*tracepb.Span{atA, atB} {
		if otlprecv.SpanAttr(sp, "starlog.face") != "durable-streams" || otlprecv.SpanAttr(sp, "url.path") != "/ds/room" {
			t.Errorf("span attributes %v", sp.Attributes)
		}
	}
}

// Without the environment asking for it, tracing is off: no exporter, a
// no-op provider.
func TestTracingOffByDefault(t *testing.T) {
	for _, k := range []string{"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_TRACES_EXPORTER", "OTEL_SDK_DISABLED"} {
		t.Setenv(k, "")
	}
	tr, err := tracing.FromEnv(t.Context(), "x")
	if err != nil || tr.On {
		t.Fatalf("on %v, %v", tr.On, err)
	}
	t.Setenv("OTEL_TRACES_EXPORTER", "zipkin")
	if _, err := tracing.FromEnv(t.Context(), "x"); err == nil {
		t.Fatal("an unsupported exporter was accepted")
	}
}

// One append is one span tree: the request's server span with a child per
// step on the way to its ack, each with its own times: admission, the
// sequencing, the wait in the pool, the cut, each bucket's PUT (all three
// of an Express flight's, the straggler's too, which may end after the
// ack) and the release (issue 32 item 3).
func TestAppendSpanTree(t *testing.T) {
	tr, rcv := otlprecv.Tracing(t, "starlog-test")
	e := starServing(t, "a", testsvc.SQLite(t), memObjects(t), nil, server.Options{Tracer: tr, Auth: auth.Open()})
	e.setupBasin("tree-basin")
	want(t, e.stream("tree-basin", "PUT", "streams/x", []byte(`{"storage_class":"express"}`)), 201, "")
	want(t, e.appendJSON("tree-basin", "x", textRecords("a", 2), "traceparent", traceparent), 200, "")

	flusher := tr.TracerProvider.(interface{ ForceFlush(context.Context) error })
	steps := []string{"admit", "sequence", "pool wait", "cut", "put express-a", "put express-b", "put express-c", "release"}
	var root *tracepb.Span
	children := map[string]*tracepb.Span{}
	err := poll.Wait(5*time.Second, func() error {
		if err := flusher.ForceFlush(t.Context()); err != nil {
			return err
		}
		for _, s := range rcv.Spans() {
			if hex.EncodeToString(s.TraceId) != clientTrace {
				continue
			}
			if s.Name == "POST records" {
				root = s
			} else {
				children[s.Name] = s
			}
		}
		for _, name := range steps {
			if root == nil || children[name] == nil {
				return fmt.Errorf("missing %q", name)
			}
		}
		return nil
	})
	if err != nil {
		var got []string
		for name := range children {
			got = append(got, name)
		}
		t.Fatalf("the append's trace: root %v, children %v: %v", root != nil, got, err)
	}
	// The tree as the receiver got it, times from the request's start (the
	// sample in docs/deploy.md "Traces" is this log).
	ms := func(ns uint64) string { return fmt.Sprintf("%7.3f ms", float64(int64(ns-root.StartTimeUnixNano))/1e6) }
	t.Logf("%-14s %s .. %s", root.Name, ms(root.StartTimeUnixNano), ms(root.EndTimeUnixNano))
	for _, name := range steps {
		c := children[name]
		t.Logf("  %-14s %s .. %s", name, ms(c.StartTimeUnixNano), ms(c.EndTimeUnixNano))
	}
	for _, name := range steps {
		c := children[name]
		if string(c.ParentSpanId) != string(root.SpanId) {
			t.Errorf("%q is not a child of the request's span", name)
		}
		if c.StartTimeUnixNano < root.StartTimeUnixNano || c.EndTimeUnixNano < c.StartTimeUnixNano {
			t.Errorf("%q runs %d..%d, the request %d..%d", name, c.StartTimeUnixNano, c.EndTimeUnixNano, root.StartTimeUnixNano, root.EndTimeUnixNano)
		}
	}
	// The steps follow each other: admitted, sequenced, cut, then the
	// release ends no later than the request.
	order := []string{"admit", "sequence", "pool wait", "cut", "release"}
	for i := 1; i < len(order); i++ {
		if a, b := children[order[i-1]], children[order[i]]; b.StartTimeUnixNano < a.EndTimeUnixNano {
			t.Errorf("%q starts before %q ends", order[i], order[i-1])
		}
	}
	if r := children["release"]; r.EndTimeUnixNano > root.EndTimeUnixNano {
		t.Errorf("the release ends after the request")
	}
	for _, name := range steps[3:] { // the flight's steps name its slot
		if !slices.ContainsFunc(children[name].Attributes, func(a *commonpb.KeyValue) bool { return a.Key == "starlog.slot" }) {
			t.Errorf("%q has no slot: %v", name, children[name].Attributes)
		}
	}
}

// traceSpans waits until trace id holds a span of every name in want and
// returns its spans by name (the last of each).
func traceSpans(t *testing.T, tr *tracing.Tracing, rcv *otlprecv.Receiver, id string, want ...string) map[string]*tracepb.Span {
	t.Helper()
	flusher := tr.TracerProvider.(interface{ ForceFlush(context.Context) error })
	got := map[string]*tracepb.Span{}
	err := poll.Wait(5*time.Second, func() error {
		if err := flusher.ForceFlush(t.Context()); err != nil {
			return err
		}
		for _, s := range rcv.Spans() {
			if hex.EncodeToString(s.TraceId) == id {
				got[s.Name] = s
			}
		}
		for _, n := range want {
			if got[n] == nil {
				return fmt.Errorf("missing %q", n)
			}
		}
		return nil
	})
	if err != nil {
		var names []string
		for n := range got {
			names = append(names, n)
		}
		t.Fatalf("trace %s: %v; spans %v", id, err, names)
	}
	return got
}

// Reads are traced on every face (issue 32 item 3): a unary read's request
// span has the reader's read span as its child, a read that waits at the
// tail a tail wait span, an S2S read session a read span per batch, and a
// Durable Streams read the same; the read spans of records only in the
// tail window have no object requests under them (star/reader's
// TestReadSpanTree has those of a settled stream).
func TestReadRequestsAreTraced(t *testing.T) {
	tr, rcv := otlprecv.Tracing(t, "starlog-test")
	opts := server.Options{Tracer: tr, Auth: auth.Open(), Durable: &durable.Config{}}
	e := starServing(t, "a", testsvc.SQLite(t), memObjects(t), nil, opts)
	e.setupBasin("read-basin")
	want(t, e.appendJSON("read-basin", "r", textRecords("a", 3)), 200, "")
	tp := func(i int) (string, string) {
		id := fmt.Sprintf("%032x", 0xabc000+i)
		return id, "00-" + id + "-" + clientSpan + "-01"
	}
	childOf := func(sp map[string]*tracepb.Span, child, parent string) {
		t.Helper()
		if string(sp[child].ParentSpanId) != string(sp[parent].SpanId) {
			t.Errorf("%q is not a child of %q", child, parent)
		}
	}

	id, h := tp(1)
	b, r := e.readJSON("read-basin", "r", "seq_num=0", "traceparent", h)
	if b == nil || len(b.Records) != 3 {
		t.Fatalf("unary read: %s", r)
	}
	sp := traceSpans(t, tr, rcv, id, "GET records", "read")
	childOf(sp, "read", "GET records")
	if n := spanInt(sp["read"], "starlog.records"); n != 3 {
		t.Errorf("the read span says %d records", n)
	}

	id, h = tp(2)
	if b, r := e.readJSON("read-basin", "r", "seq_num=3&wait=1", "traceparent", h); b == nil || len(b.Records) != 0 {
		t.Fatalf("read at the tail: %s", r)
	}
	sp = traceSpans(t, tr, rcv, id, "GET records", "tail wait")
	childOf(sp, "tail wait", "GET records")
	if w := otlprecv.SpanAttr(sp["tail wait"], "starlog.woken_by"); w != "idle" {
		t.Errorf("the tail wait was ended by %q, want idle (wait=1 and no append)", w)
	}

	id, h = tp(3)
	req, _ := http.NewRequestWithContext(t.Context(), "GET", e.base+"/v1/streams/r/records?seq_num=0&count=3", nil)
	req.Header.Set("s2-basin", "read-basin")
	req.Header.Set("Content-Type", "s2s/proto")
	req.Header.Set("traceparent", h)
	res, err := e.h2.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || len(body) == 0 {
		t.Fatalf("read session: %s", res.Status)
	}
	sp = traceSpans(t, tr, rcv, id, "GET records", "read")
	childOf(sp, "read", "GET records")

	want(t, e.ds("PUT", "room", "hello", "Content-Type", "text/plain"), 201, "")
	id, h = tp(4)
	want(t, e.ds("GET", "room?offset=-1", "", "traceparent", h), 200, "")
	sp = traceSpans(t, tr, rcv, id, "durable-streams GET", "read")
	childOf(sp, "read", "durable-streams GET")
}

func spanInt(s *tracepb.Span, key string) int64 {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetIntValue()
		}
	}
	return -1
}
