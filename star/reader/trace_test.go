package reader

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/tracing"
	"github.com/starlog/starlog/shared/tracing/otlprecv"
)

// traceOf waits until the receiver holds every span named in want (a
// name may repeat: that many) of the trace with root span root, and
// returns the trace's spans.
func traceOf(t *testing.T, tr *tracing.Tracing, rcv *otlprecv.Receiver, root trace.Span, want ...string) []*tracepb.Span {
	t.Helper()
	id := root.SpanContext().TraceID().String()
	var got []*tracepb.Span
	err := poll.Wait(5*time.Second, func() error {
		if err := tr.Flush(t.Context()); err != nil {
			return err
		}
		got = got[:0]
		names := map[string]int{}
		for _, s := range rcv.Spans() {
			if hex.EncodeToString(s.TraceId) == id {
				got = append(got, s)
				names[s.Name]++
			}
		}
		need := map[string]int{}
		for _, n := range want {
			need[n]++
		}
		for n, k := range need {
			if names[n] < k {
				return fmt.Errorf("%d of %q, want %d", names[n], n, k)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("the read's trace: %v; spans: %s", err, spanTree(got))
	}
	return got
}

// spanTree is the spans as an indented tree with their attributes, the
// form the test logs (docs/deploy.md "Traces" quotes one).
func spanTree(spans []*tracepb.Span) string {
	var b strings.Builder
	byParent := map[string][]*tracepb.Span{}
	ids := map[string]bool{}
	for _, s := range spans {
		ids[string(s.SpanId)] = true
	}
	var roots []*tracepb.Span
	for _, s := range spans {
		if ids[string(s.ParentSpanId)] {
			byParent[string(s.ParentSpanId)] = append(byParent[string(s.ParentSpanId)], s)
		} else {
			roots = append(roots, s)
		}
	}
	var t0 uint64
	for _, r := range roots {
		if t0 == 0 || r.StartTimeUnixNano < t0 {
			t0 = r.StartTimeUnixNano
		}
	}
	var walk func(s *tracepb.Span, depth int)
	walk = func(s *tracepb.Span, depth int) {
		var attrs []string
		for _, a := range s.Attributes {
			v := a.Value.GetStringValue()
			if v == "" {
				v = fmt.Sprint(a.Value.GetIntValue())
			}
			switch a.Key {
			case "starlog.cache", "starlog.object", "starlog.bytes", "starlog.attempt", "starlog.records", "starlog.woken_by":
				attrs = append(attrs, strings.TrimPrefix(a.Key, "starlog.")+"="+v)
			}
		}
		ms := func(ns uint64) float64 { return float64(int64(ns-t0)) / 1e6 }
		fmt.Fprintf(&b, "\n%-*s%-*s %8.3f ms .. %8.3f ms  %s", 2*depth, "", 24-2*depth, s.Name,
			ms(s.StartTimeUnixNano), ms(s.EndTimeUnixNano), strings.Join(attrs, " "))
		kids := byParent[string(s.SpanId)]
		slices.SortFunc(kids, func(a, b *tracepb.Span) int { return int(int64(a.StartTimeUnixNano - b.StartTimeUnixNano)) })
		for _, k := range kids {
			walk(k, depth+1)
		}
	}
	for _, r := range roots {
		walk(r, 0)
	}
	return b.String()
}

func children(spans []*tracepb.Span, parent *tracepb.Span, name string) []*tracepb.Span {
	var out []*tracepb.Span
	for _, s := range spans {
		if string(s.ParentSpanId) == string(parent.SpanId) && (name == "" || s.Name == name) {
			out = append(out, s)
		}
	}
	return out
}

func intAttr(s *tracepb.Span, key string) (int64, bool) {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetIntValue(), true
		}
	}
	return 0, false
}

// A read of a settled stream under a request's span is a span tree (issue
// 32 item 3): the request's span, a read span, a fetch span per cached
// object part it needs (the footer, each chunk, each extent of a span
// ref), each saying whether the cache had it, and under each miss a span
// per object-store request with its bucket, the part's kind, the bytes and
// the attempt; read again, every fetch is a hit with no request under it.
func TestReadSpanTree(t *testing.T) {
	tr, rcv := otlprecv.Tracing(t, "starlog-test")
	f := newFixture(t)
	tail := catalogSpanTail(f)
	r := f.reader(Config{SettledChunkBytes: 300})

	ctx, root := tr.Tracer("test").Start(t.Context(), "GET records", trace.WithSpanKind(trace.SpanKindServer))
	res, err := r.Read(ctx, Stream{ID: "c1", Basin: testBasin}, AtSeq(0), Limits{}, tail)
	if err != nil {
		t.Fatal(err)
	}
	f.want("c1", res.Records, 0, 95)
	root.End()
	spans := traceOf(t, tr, rcv, root, "GET records", "read", "fetch footer", "fetch settled", "fetch extent")
	t.Logf("a cold read of a settled stream:%s", spanTree(spans))

	var rootPB *tracepb.Span
	for _, s := range spans {
		if s.Name == "GET records" {
			rootPB = s
		}
	}
	reads := children(spans, rootPB, "read")
	if len(reads) != 1 {
		t.Fatalf("%d read spans under the request's: %s", len(reads), spanTree(spans))
	}
	if n, _ := intAttr(reads[0], "starlog.records"); n != 95 {
		t.Errorf("the read span says %d records, want 95", n)
	}
	gets := map[string]int{} // object kind → object requests
	for _, fs := range children(spans, reads[0], "") {
		if !strings.HasPrefix(fs.Name, "fetch ") {
			t.Errorf("%q under the read span", fs.Name)
			continue
		}
		cache := otlprecv.SpanAttr(fs, "starlog.cache")
		reqs := children(spans, fs, "")
		switch {
		case cache == "miss" && len(reqs) == 0:
			t.Errorf("%q missed the cache with no object request under it: %s", fs.Name, spanTree(spans))
		case cache != "miss" && cache != "hit":
			t.Errorf("%q has cache %q", fs.Name, cache)
		}
		for _, g := range reqs {
			if g.Name == "fetch epoch" { // an extent's bucket set: a metastore read, cached
				continue
			}
			kind := otlprecv.SpanAttr(g, "starlog.object")
			gets[kind]++
			bucket := strings.TrimPrefix(strings.TrimPrefix(g.Name, "GET "), "HEAD ")
			wantBuckets := []string{settledBkt}
			if kind == kindExtent {
				wantBuckets = expressBuckets
			}
			if !slices.Contains(wantBuckets, bucket) {
				t.Errorf("%q (%s) from bucket %q, want one of %v", g.Name, kind, bucket, wantBuckets)
			}
			if n, ok := intAttr(g, "starlog.bytes"); kind != kindHead && (!ok || n <= 0) {
				t.Errorf("%q (%s) says %d bytes", g.Name, kind, n)
			}
			if _, ok := intAttr(g, "starlog.attempt"); !ok {
				t.Errorf("%q has no attempt", g.Name)
			}
			if otlprecv.SpanAttr(g, "starlog.key") == "" {
				t.Errorf("%q names no key", g.Name)
			}
		}
	}
	// The object: its footer, then several chunks; the span refs: two
	// slots' extents (three refs).
	if gets[kindFooter] < 1 || gets[kindSettled] < 2 || gets[kindExtent] < 2 {
		t.Errorf("object requests by kind %v, want a footer, chunks and extents: %s", gets, spanTree(spans))
	}
	if got := f.objs.total(); got != gets[kindFooter]+gets[kindSettled]+gets[kindExtent] {
		t.Errorf("%d GETs made, %v traced", got, gets)
	}

	// Warm: the same read hits the cache for every part.
	ctx, root2 := tr.Tracer("test").Start(t.Context(), "GET records")
	if _, err := r.Read(ctx, Stream{ID: "c1", Basin: testBasin}, AtSeq(0), Limits{}, tail); err != nil {
		t.Fatal(err)
	}
	root2.End()
	spans = traceOf(t, tr, rcv, root2, "GET records", "read", "fetch footer", "fetch settled", "fetch extent")
	for _, s := range spans {
		if strings.HasPrefix(s.Name, "fetch ") && otlprecv.SpanAttr(s, "starlog.cache") != "hit" {
			t.Errorf("warm read: %q cache %q", s.Name, otlprecv.SpanAttr(s, "starlog.cache"))
		}
		if strings.HasPrefix(s.Name, "GET ") && s.Name != "GET records" {
			t.Errorf("warm read made %q", s.Name)
		}
	}
}

// A bucket that fails a GET shows in the trace: the failed request with
// its error, then the next bucket's as attempt 1.
func TestReadSpanOfAFailedBucket(t *testing.T) {
	tr, rcv := otlprecv.Tracing(t, "starlog-test")
	f := newFixture(t)
	f.epoch(meta.Express, 2, expressBuckets...)
	a := f.flight(meta.Express, 2, expressBuckets, f.batch("e", 5))
	f.absorb(meta.Express, 2, a)
	boom := errors.New("injected: bucket down")
	f.objs.block = func(_ context.Context, bucket, _ string, _ int64) error {
		if bucket == expressBuckets[0] {
			return boom
		}
		return nil
	}
	r := f.reader(Config{})
	ctx, root := tr.Tracer("test").Start(t.Context(), "GET records")
	res, err := r.Read(ctx, Stream{ID: "e", Basin: testBasin}, AtSeq(0), Limits{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	f.want("e", res.Records, 0, 5)
	root.End()
	spans := traceOf(t, tr, rcv, root, "fetch extent", "GET "+expressBuckets[0], "GET "+expressBuckets[1])
	t.Logf("a read past a failing bucket:%s", spanTree(spans))
	for _, s := range spans {
		switch s.Name {
		case "GET " + expressBuckets[0]:
			if s.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR || !strings.Contains(s.Status.GetMessage(), "injected") {
				t.Errorf("the failed GET's status %v", s.Status)
			}
			if n, _ := intAttr(s, "starlog.attempt"); n != 0 {
				t.Errorf("the first GET is attempt %d", n)
			}
		case "GET " + expressBuckets[1]:
			if n, _ := intAttr(s, "starlog.attempt"); n != 1 {
				t.Errorf("the second bucket's GET is attempt %d, want 1", n)
			}
		}
	}
}

// Tracing off, the hooks cost nothing: a warm read allocates as much
// under a span that does not record (tracing off: the no-op provider's)
// as with no span at all, and a cold one's object requests allocate no
// more either.
func TestReadTracingOffAllocatesNothing(t *testing.T) {
	f := newFixture(t)
	tail := catalogSpanTail(f)
	r := f.reader(Config{SettledChunkBytes: 300})
	read := func(ctx context.Context) {
		if _, err := r.Read(ctx, Stream{ID: "c1", Basin: testBasin}, AtSeq(0), Limits{}, tail); err != nil {
			t.Fatal(err)
		}
	}
	plain := context.Background()
	off, sp := tracing.Off().Tracer("test").Start(plain, "GET records")
	defer sp.End()
	read(plain) // warm the caches
	a := testing.AllocsPerRun(50, func() { read(plain) })
	b := testing.AllocsPerRun(50, func() { read(off) })
	if b > a {
		t.Errorf("a warm read allocates %.0f times under a non-recording span, %.0f without a span", b, a)
	}
	// The hooks alone: no allocation when the span does not record.
	if n := testing.AllocsPerRun(100, func() {
		ctx, g := startRequest(off, "GET", "b", kindExtent, "k", 0, 10)
		g.end(ctx, 10, nil)
	}); n != 0 {
		t.Errorf("an object request's hook allocates %.0f times with tracing off", n)
	}
}
