package kafka_test

import (
	"io"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/kafka"
)

// metric is the value of the series of name with labels in reg (a
// counter or gauge; a histogram's sample count), and whether it exists.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			case m.Histogram != nil:
				return float64(m.GetHistogram().GetSampleCount()), true
			}
		}
	}
	return 0, false
}

// A coordinator that accepts a forwarded group request and never
// answers: the forwarding star gives up at the request's deadline less
// its reserve and answers NOT_COORDINATOR itself (the client looks for
// the coordinator again), hangs up on the coordinator (its handler sees
// the request end: nothing left waiting), and counts the forward by API
// and outcome, its attempts, and its time; no forward stays in flight.
func TestGroupForwardToSilentCoordinator(t *testing.T) {
	ms := testsvc.SQLite(t)
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	var entered, left atomic.Int64
	silent := func(http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			entered.Add(1)
			defer left.Add(1)
			_, _ = io.Copy(io.Discard, r.Body) // read (so a hang-up is seen), never answered
			<-r.Context().Done()
		})
	}
	a := startStarWith(t, starOpts{meta: ms, objs: objs, id: "a", open: true, cluster: true})
	b := startStarWith(t, starOpts{meta: ms, objs: objs, id: "b", open: true, cluster: true, peer: silent})
	const timeout = 2 * time.Second
	a.k.SetRequestTimeout(timeout)

	// b coordinates the group: its first request landed there.
	committedOffsets(t, b.admin(), "quiet", "none", 1)
	if nl := a.n.LeaderOf(ctxT(t), kafka.DefaultBasin, "quiet/#group"); nl == nil || nl.Leader.Star != "b" {
		t.Fatalf("star a sees the coordinator of quiet as %v, want b", nl)
	}

	hb := kmsg.NewPtrHeartbeatRequest()
	hb.Group, hb.MemberID, hb.Generation = "quiet", "m", 1
	start := time.Now()
	// To broker 0, star a (every star is broker 0), once: kgo's own
	// request path would retry a NOT_COORDINATOR.
	raw, err := a.admin().Broker(0).Request(ctxT(t), hb)
	resp, _ := raw.(*kmsg.HeartbeatResponse)
	took := time.Since(start)
	if err != nil || resp == nil {
		t.Fatalf("Heartbeat through a: %v %v", err, raw)
	}
	if resp.ErrorCode != kerr.NotCoordinator.Code {
		t.Fatalf("Heartbeat through a to a silent coordinator: code %d (%v), want NOT_COORDINATOR", resp.ErrorCode, kerr.ErrorForCode(resp.ErrorCode))
	}
	if took > timeout+time.Second {
		t.Fatalf("answered after %v, past the request's %v bound", took, timeout)
	}
	if entered.Load() == 0 {
		t.Fatal("the coordinator never got the forwarded request")
	}
	poll.Until(t, 5*time.Second, "every forwarded request to end at the coordinator (the forwarder hung up)", func() bool {
		return left.Load() == entered.Load()
	})

	reg := a.n.Registry()
	hbl := map[string]string{"api": "Heartbeat"}
	if v, _ := metric(t, reg, "starlog_kafka_group_forwards_total", map[string]string{"api": "Heartbeat", "outcome": "expired"}); v != 1 {
		t.Errorf("starlog_kafka_group_forwards_total{api=Heartbeat,outcome=expired} = %v, want 1", v)
	}
	if v, _ := metric(t, reg, "starlog_kafka_group_forward_attempts_total", map[string]string{"api": "Heartbeat", "result": "error"}); v < 1 {
		t.Errorf("starlog_kafka_group_forward_attempts_total{api=Heartbeat,result=error} = %v, want at least 1", v)
	}
	if v, _ := metric(t, reg, "starlog_kafka_group_forward_seconds", hbl); v != 1 {
		t.Errorf("starlog_kafka_group_forward_seconds{api=Heartbeat} has %v samples, want 1", v)
	}
	if v, ok := metric(t, reg, "starlog_kafka_group_forwards_in_flight", nil); !ok || v != 0 {
		t.Errorf("starlog_kafka_group_forwards_in_flight = %v (present %v), want 0", v, ok)
	}
}
