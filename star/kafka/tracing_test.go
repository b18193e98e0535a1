package kafka_test

import (
	"context"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"

	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/tracing"
	"github.com/starlog/starlog/shared/tracing/otlprecv"
	"github.com/starlog/starlog/star/kafka"
	"github.com/starlog/starlog/star/server"
)

func withTracer(tr *tracing.Tracing) func(*kafka.Config) {
	return func(c *kafka.Config) { c.Tracer = tr }
}

// awaitSpans flushes until ok holds of the spans received.
func awaitSpans(t *testing.T, tr *tracing.Tracing, rcv *otlprecv.Receiver, what string, ok func([]*tracepb.Span) error) []*tracepb.Span {
	t.Helper()
	flusher := tr.TracerProvider.(interface{ ForceFlush(context.Context) error })
	var spans []*tracepb.Span
	err := poll.Wait(10*time.Second, func() error {
		if err := flusher.ForceFlush(t.Context()); err != nil {
			return err
		}
		spans = rcv.Spans()
		return ok(spans)
	})
	if err != nil {
		var names []string
		for _, s := range spans {
			names = append(names, fmt.Sprintf("%s@%s %x", s.Name, otlprecv.SpanAttr(s, "starlog.star"), s.TraceId))
		}
		t.Fatalf("%s: %v; spans: %v", what, err, names)
	}
	return spans
}

func intAttr(s *tracepb.Span, key string) (int64, bool) {
	for _, a := range s.Attributes {
		if a.Key == key {
			return a.Value.GetIntValue(), true
		}
	}
	return 0, false
}

// A span per Kafka request: a produce's names its API, key and version,
// its topic and partition counts and its error code, and the append's
// steps (admit, sequence, pool wait, cut, each bucket's put, release) are
// its children; a produce refused for an unknown partition carries the
// code and an error status.
func TestProduceSpanTree(t *testing.T) {
	tr, rcv := otlprecv.Tracing(t, "starlog-kafka-test")
	s := startStarOn(t, true, testsvc.SQLite(t), withTracer(tr))
	c := s.admin(kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RecordRetries(0))
	createTopic(t, c, "traced", 2)
	if err := c.ProduceSync(ctxT(t), &kgo.Record{Topic: "traced", Partition: 1, Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatalf("produce: %v", err)
	}
	// An unknown partition, sent raw: kgo would not send it.
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = "traced"
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = 7, kafka.EncodeTestBatch([]byte("x"))
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	if _, err := c.Broker(0).Request(ctxT(t), req); err != nil {
		t.Fatalf("raw produce: %v", err)
	}

	steps := []string{"admit", "sequence", "pool wait", "cut", "put express-a", "put express-b", "put express-c", "release"}
	var ok, refused *tracepb.Span
	var children map[string]*tracepb.Span
	awaitSpans(t, tr, rcv, "a produce's span with its steps, and a refused one", func(spans []*tracepb.Span) error {
		ok, refused, children = nil, nil, map[string]*tracepb.Span{}
		for _, sp := range spans {
			if sp.Name != "kafka Produce" {
				continue
			}
			if code, _ := intAttr(sp, "kafka.error_code"); code != 0 {
				refused = sp
			} else {
				ok = sp
			}
		}
		if ok == nil || refused == nil {
			return fmt.Errorf("produce spans: ok %v, refused %v", ok != nil, refused != nil)
		}
		for _, sp := range spans {
			if string(sp.ParentSpanId) == string(ok.SpanId) {
				children[sp.Name] = sp
			}
		}
		for _, name := range steps {
			if children[name] == nil {
				return fmt.Errorf("no %q under the produce's span", name)
			}
		}
		return nil
	})
	if ok.Kind != tracepb.Span_SPAN_KIND_SERVER || otlprecv.SpanAttr(ok, "kafka.api") != "Produce" || otlprecv.SpanAttr(ok, "starlog.star") != "kafka-star" {
		t.Errorf("produce span: kind %v, attributes %v", ok.Kind, ok.Attributes)
	}
	for key, want := range map[string]int64{"kafka.api_key": 0, "kafka.topics": 1, "kafka.partitions": 1} {
		if got, found := intAttr(ok, key); !found || got != want {
			t.Errorf("produce span's %s = %d (present %v), want %d", key, got, found, want)
		}
	}
	if v, _ := intAttr(ok, "kafka.api_version"); v < 3 {
		t.Errorf("produce span's version %d", v)
	}
	if ok.Status.GetCode() == tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("the acknowledged produce's span has an error status: %v", ok.Status)
	}
	for _, name := range steps {
		c := children[name]
		if c.StartTimeUnixNano < ok.StartTimeUnixNano || c.EndTimeUnixNano < c.StartTimeUnixNano {
			t.Errorf("%q runs %d..%d, the produce %d..%d", name, c.StartTimeUnixNano, c.EndTimeUnixNano, ok.StartTimeUnixNano, ok.EndTimeUnixNano)
		}
	}
	if code, _ := intAttr(refused, "kafka.error_code"); code != int64(kerr.UnknownTopicOrPartition.Code) || refused.Status.GetCode() != tracepb.Status_STATUS_CODE_ERROR {
		t.Errorf("refused produce's span: code %d, status %v; want UNKNOWN_TOPIC_OR_PARTITION and an error", code, refused.Status)
	}
}

// A group request forwarded from one star to its coordinator is one
// trace: the forwarding star's request span, the coordinator's HTTP server
// span of the forward its child, and the coordinator's span of the group
// request under that. So is a produce to a partition another star leads:
// the leader's S2 server span of the append is a child of the produce's.
func TestForwardedGroupRequestIsOneTrace(t *testing.T) {
	tr, rcv := otlprecv.Tracing(t, "starlog-kafka-test")
	ms := testsvc.SQLite(t)
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string) *star {
		return startStarWith(t, starOpts{meta: ms, objs: objs, id: id, open: true, cluster: true,
			server: func(o *server.Options) { o.Tracer = tr }, kafka: []func(*kafka.Config){withTracer(tr)}})
	}
	a, b := mk("a"), mk("b")
	committedOffsets(t, b.admin(), "traced-group", "none", 1) // b coordinates the group

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "traced-group", "m", 1
	if _, err := a.admin().Broker(0).Request(ctxT(t), hb); err != nil {
		t.Fatalf("Heartbeat through a: %v", err)
	}
	var atA, httpB, atB *tracepb.Span
	awaitSpans(t, tr, rcv, "the heartbeat's trace across a and b", func(spans []*tracepb.Span) error {
		atA, httpB, atB = nil, nil, nil
		for _, sp := range spans {
			if sp.Name == "kafka Heartbeat" && otlprecv.SpanAttr(sp, "starlog.star") == "a" {
				atA = sp
			}
		}
		if atA == nil {
			return fmt.Errorf("no Heartbeat span from a")
		}
		for _, sp := range spans {
			if string(sp.TraceId) != string(atA.TraceId) || otlprecv.SpanAttr(sp, "starlog.star") != "b" {
				continue
			}
			switch {
			case sp.Name == "kafka Heartbeat":
				atB = sp
			case sp.Kind == tracepb.Span_SPAN_KIND_SERVER:
				httpB = sp
			}
		}
		if httpB == nil || atB == nil {
			return fmt.Errorf("in a's trace %s: b's server span %v, b's Heartbeat span %v", hex.EncodeToString(atA.TraceId), httpB != nil, atB != nil)
		}
		return nil
	})
	if string(httpB.ParentSpanId) != string(atA.SpanId) {
		t.Errorf("b's server span %q has parent %x, want a's Heartbeat span %x", httpB.Name, httpB.ParentSpanId, atA.SpanId)
	}
	if string(atB.ParentSpanId) != string(httpB.SpanId) {
		t.Errorf("b's Heartbeat span has parent %x, want b's server span %x", atB.ParentSpanId, httpB.SpanId)
	}
	if otlprecv.SpanAttr(atB, "kafka.api") != "Heartbeat" || atB.Kind != tracepb.Span_SPAN_KIND_INTERNAL {
		t.Errorf("b's Heartbeat span: kind %v, attributes %v", atB.Kind, atB.Attributes)
	}
	if code, _ := intAttr(atA, "kafka.error_code"); code != int64(kerr.UnknownMemberID.Code) {
		t.Errorf("a's Heartbeat span's code %d, want b's answer, UNKNOWN_MEMBER_ID", code)
	}

	// b leads the partition (its first produce landed there); a's produce
	// is appended at b.
	createTopic(t, b.admin(), "fwd", 1)
	for _, st := range []*star{b, a} {
		if err := st.admin().ProduceSync(ctxT(t), &kgo.Record{Topic: "fwd", Value: []byte("v")}).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
	}
	var prodA, appendB *tracepb.Span
	awaitSpans(t, tr, rcv, "a's produce and b's append in one trace", func(spans []*tracepb.Span) error {
		prodA, appendB = nil, nil
		for _, sp := range spans {
			if sp.Name == "kafka Produce" && otlprecv.SpanAttr(sp, "starlog.star") == "a" {
				prodA = sp
			}
		}
		if prodA == nil {
			return fmt.Errorf("no Produce span from a")
		}
		for _, sp := range spans {
			if string(sp.TraceId) == string(prodA.TraceId) && sp.Name == "POST records" && otlprecv.SpanAttr(sp, "starlog.star") == "b" {
				appendB = sp
			}
		}
		if appendB == nil {
			return fmt.Errorf("no POST records span from b in a's produce's trace")
		}
		return nil
	})
	if string(appendB.ParentSpanId) != string(prodA.SpanId) {
		t.Errorf("b's append span has parent %x, want a's Produce span %x", appendB.ParentSpanId, prodA.SpanId)
	}
}
