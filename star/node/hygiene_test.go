package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/starlog/starlog/star/node"

	"github.com/starlog/starlog/shared/api"
)

// metric sums a metric's values in n's registry.
func metric(t *testing.T, n *node.Node, name string) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

// waitLed waits until n leads want streams.
func waitLed(t *testing.T, n *node.Node, want float64, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for metric(t, n, "starlog_leader_streams_led") != want {
		if time.Now().After(deadline) {
			t.Fatalf("streams led: %v after %v, want %v", metric(t, n, "starlog_leader_streams_led"), within, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Issue 13 item 10: a star releases the lease of a stream nobody used for
// Config.IdleRelease, through the handoff's release path, so the streams
// it leads idle are bounded by use; an open cursor or appender keeps its
// stream, and the next request re-acquires a released one where its tail
// was.
func TestIdleStreamsAreReleased(t *testing.T) {
	const idle = 300 * time.Millisecond
	ctx := context.Background()
	cfg := testConfig()
	cfg.IdleRelease = idle
	n := open(t, newStores(t), cfg)
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "idle-basin", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	const streams = 20
	for i := range streams {
		if _, err := n.Append(ctx, "idle-basin", fmt.Sprint("s", i), records("a", 3), nil); err != nil {
			t.Fatal(err)
		}
	}
	c, err := n.OpenRead(ctx, "idle-basin", "s0", api.ReadRequest{From: api.FromSeqNum}, node.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waitLed(t, n, streams, 0)
	// All but the stream with an open cursor go, within 1¼ periods (and
	// the machine's slack).
	waitLed(t, n, 1, 10*idle)
	if got := metric(t, n, "starlog_leader_idle_releases_total"); got != streams-1 {
		t.Fatalf("idle releases counted %v, want %d", got, streams-1)
	}
	time.Sleep(3 * idle)
	waitLed(t, n, 1, 0) // the cursor holds s0

	// A released stream is re-acquired by its next request, at its tail.
	ack, err := n.Append(ctx, "idle-basin", "s1", records("idle-basin", 1), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Start.SeqNum != 3 {
		t.Fatalf("append after an idle release started at %d, want 3", ack.Start.SeqNum)
	}
	if got := readAll(t, n, "idle-basin", "s1"); len(got) != 4 {
		t.Fatalf("read %d records after an idle release, want 4", len(got))
	}
	c.Close()
	waitLed(t, n, 0, 10*idle)
}
