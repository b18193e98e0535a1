package node_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/star/node"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
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
	poll.UntilErr(t, within, "streams led", func() error {
		if got := metric(t, n, "starlog_leader_streams_led"); got != want {
			return fmt.Errorf("%v, want %v", got, want)
		}
		return nil
	})
}

// Issue 13 item 10: a star releases the lease of a stream nobody used for
// Config.IdleRelease, through the handoff's release path, so the streams
// it leads idle are bounded by use; an open cursor or appender keeps its
// stream, and the next request re-acquires a released one where its tail
// was.
//
// Every stream is held by a cursor from just after its first append until
// the idle clock is meant to start, so the count of streams led before is
// exact however long the set-up takes: a loaded machine's set-up outlasted
// the idle period, some streams went before the count was read ("streams
// led: not within 0s: 16, want 20"). The appends are spaced so the set-up
// always outlasts it here.
func TestIdleStreamsAreReleased(t *testing.T) {
	const idle = time.Second
	ctx := context.Background()
	cfg := testConfig()
	cfg.IdleRelease = idle
	n := open(t, newStores(t), cfg)
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "idle-basin", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	const streams = 20
	cursors := make([]*node.Cursor, streams)
	for i := range streams {
		s := fmt.Sprint("s", i)
		if _, err := n.Append(ctx, "idle-basin", s, records("a", 3), nil); err != nil {
			t.Fatal(err)
		}
		c, err := n.OpenRead(ctx, "idle-basin", s, api.ReadRequest{From: api.FromSeqNum}, node.ReadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cursors[i] = c
		time.Sleep(idle / 15) // a set-up longer than the idle period
	}
	waitLed(t, n, streams, 0)
	// A stream released between its append and its cursor (a stall of
	// the whole period) was counted then: count from here.
	before := metric(t, n, "starlog_leader_idle_releases_total")
	for _, c := range cursors[1:] {
		c.Close()
	}
	// All but the stream with an open cursor go, within 1¼ periods (and
	// the machine's slack).
	waitLed(t, n, 1, 10*idle)
	if got := metric(t, n, "starlog_leader_idle_releases_total") - before; got != streams-1 {
		t.Fatalf("idle releases counted %v, want %d", got, streams-1)
	}
	time.Sleep(2 * idle)
	waitLed(t, n, 1, 0) // the cursor holds s0
	// Nothing is kept of a released stream: no slot, no cached row.
	if slots, rows := n.Kept(); slots != 1 || rows != 1 {
		t.Fatalf("after releasing %d streams the star keeps %d slots and %d rows, want 1 and 1", streams-1, slots, rows)
	}

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
	cursors[0].Close()
	waitLed(t, n, 0, 10*idle)
}

// Appends racing idle releases (a period of 30 ms, streams idle between
// bursts) are never sequenced twice: each acknowledged range is its own
// and reads back as sent, whichever lease acquisition sequenced it.
func TestIdleReleaseRacesAppends(t *testing.T) {
	ctx := context.Background()
	cfg := testConfig()
	cfg.IdleRelease = 30 * time.Millisecond
	n := open(t, newStores(t), cfg)
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "idle-basin", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	const writers, streams, appends = 4, 3, 40
	type acked struct {
		stream     string
		start, end uint64
		body       string
	}
	results := make([][]acked, writers)
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := range appends {
				s := fmt.Sprint("r", (w+i)%streams)
				body := fmt.Sprintf("w%d-%d", w, i)
				in := &api.AppendInput{Records: []api.Record{{Body: []byte(body)}}}
				for attempt := 0; ; attempt++ {
					ack, err := n.Append(ctx, "idle-basin", s, in, nil)
					if err == nil {
						results[w] = append(results[w], acked{s, ack.Start.SeqNum, ack.End.SeqNum, body})
						break
					}
					if e, ok := errors.AsType[*api.Error](err); !ok || e.Status != 503 || attempt > 50 {
						t.Errorf("append %s: %v", body, err)
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
				time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
			}
		})
	}
	wg.Wait()
	if got := metric(t, n, "starlog_leader_idle_releases_total"); got == 0 {
		t.Fatal("no idle release happened during the race")
	}
	t.Logf("%v idle releases during %d appends", metric(t, n, "starlog_leader_idle_releases_total"), writers*appends)
	read := map[string][]api.Record{}
	for i := range streams {
		s := fmt.Sprint("r", i)
		read[s] = readRetrying(t, n, "idle-basin", s)
	}
	for _, rs := range results {
		for _, a := range rs {
			recs := read[a.stream]
			if a.end != a.start+1 || a.start >= uint64(len(recs)) || string(recs[a.start].Body) != a.body {
				t.Fatalf("ack %+v does not read back (%d records)", a, len(recs))
			}
		}
	}
}

// readRetrying reads a whole stream, retrying the 503s of a release.
func readRetrying(t *testing.T, n *node.Node, basin, stream string) []api.Record {
	t.Helper()
	var out []api.Record
	poll.UntilErr(t, 10*time.Second, "read all of "+stream, func() error {
		b, err := n.Read(context.Background(), basin, stream, api.ReadRequest{From: api.FromSeqNum, Value: uint64(len(out)), Count: api.Uint64(1000), Bytes: api.Uint64(1 << 20)}, nil)
		e, _ := errors.AsType[*api.Error](err)
		switch {
		case err == nil:
			out = append(out, b.Records...)
			return errors.New("more to read")
		case e != nil && e.Status == 416:
			return nil
		case e != nil && e.Status == 503:
			return err // a release: retry
		}
		t.Fatalf("read from %d: %v", len(out), err)
		return nil
	})
	return out
}
