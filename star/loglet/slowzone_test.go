package loglet_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/settle/chainsettle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/streams"
)

// zoneCase is one Express chain (K=3, W=2) on the latency store, run in a
// synctest bubble: the injected latencies pass in fake time, so the acks
// measure the write path's waits alone, whatever the machine's load.
type zoneCase struct {
	put    faults.Latency
	third  string // "healthy", "slow" (+200 ms on az3) or "blocked" (az3 never answers)
	window int
}

// ackLatencies runs 16 streams with one 10 × 1 KiB batch in flight each
// until n batches acked, and returns each ack's latency in submission order
// of each stream, streams one after the other.
func (c zoneCase) ackLatencies(t *testing.T, n int) []time.Duration {
	var lat []time.Duration
	synctest.Test(t, func(t *testing.T) {
		inner, _ := mem.New(zones...)
		ms := mfaults.New(testsvc.SQLite(t), 1)
		store := faults.Wrap(inner, faults.WithSeed(7))
		cfg := loglet.Config{
			Star: "slowzone", Incarnation: chain.Incarnation("slowzone", 1), Class: meta.Express,
			Buckets: zones, W: 2, Window: c.window, FlushInterval: 2 * time.Millisecond, TargetFlight: 1 << 20,
			FlightDeadline: 10 * time.Second,
			Ripening:       absorb.Ripening{Trigger: 8 << 20, Linger: time.Minute, AgeCap: 15 * time.Minute},
		}
		ch := chain.New(cfg.Star, cfg.Class, cfg.Incarnation, ms, store)
		abs := &absorb.Absorber{Star: cfg.Star, Class: cfg.Class, Meta: ms, Rip: cfg.Ripening, UpdateEpoch: ch.UpdateEpoch}
		l, err := loglet.Open(context.Background(), cfg, ch, func(ctx context.Context) error { return chainsettle.Chain(ctx, ch, abs) }, nil, quietLog())
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		for _, z := range zones {
			store.SetLatency(z, c.put)
		}
		switch c.third {
		case "slow":
			store.SetSlow("az3", 200*time.Millisecond)
		case "blocked":
			store.SetDown("az3", faults.Down{Hang: true})
		}
		ss := make([]*streams.Stream, 16)
		for i := range ss {
			if ss[i], err = streams.Open(context.Background(), ms, l, fmt.Sprintf("s%02d", i), cfg.Class, facade.Config{}); err != nil {
				t.Fatal(err)
			}
		}
		lat = closedLoop(t, ss, n, payload(10, 1024))
		if e := l.Epoch(); e != 1 {
			t.Fatalf("epoch %d: one slow zone must not halt the epoch", e)
		}
	})
	return lat
}

// closedLoop appends n batches over the streams, one in flight per stream,
// and returns each ack's latency (stream by stream, in seq order).
func closedLoop(t testing.TB, ss []*streams.Stream, n int, req facade.Request) []time.Duration {
	per := make([][]time.Duration, len(ss))
	var mu sync.Mutex
	left := n
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() {
			for {
				mu.Lock()
				if left == 0 {
					mu.Unlock()
					return
				}
				left--
				mu.Unlock()
				at := time.Now()
				if _, err := s.Append(context.Background(), req); err != nil {
					t.Error(err)
					return
				}
				per[i] = append(per[i], time.Since(at))
			}
		})
	}
	wg.Wait()
	return slices.Concat(per...)
}

// A flight acknowledged at W=2 holds nothing its successors need while its
// third copy straggles: with every PUT taking the same time, the acks with
// az3 200 ms slow, or never answering, are the healthy acks to the
// nanosecond (a window slot, an ordered release or a buffer held until
// all K copies answered would show as later acks once the window of 4 is
// full of flights whose third copy is still out).
func TestOneSlowZoneHoldsNothing(t *testing.T) {
	const n = 400
	put := faults.Constant(5 * time.Millisecond)
	healthy := zoneCase{put: put, third: "healthy", window: 4}.ackLatencies(t, n)
	slices.Sort(healthy)
	for _, third := range []string{"slow", "blocked"} {
		got := zoneCase{put: put, third: third, window: 4}.ackLatencies(t, n)
		slices.Sort(got)
		if !slices.Equal(got, healthy) {
			t.Errorf("az3 %s: acks differ from the healthy run: %v\nhealthy: %v", third, got, healthy)
		}
	}
}

// With the modeled Express PUT (lognormal p50 5 / p99 20 ms, per bucket),
// an ack with az3 200 ms slow costs the slower of az1's and az2's copies
// (W=2 of the two left) where a healthy ack costs the second of three:
// that, plus the flush interval, is the floor the slow-zone p99 must stay
// at; a held resource would add the straggler's 200 ms to the tail.
func TestOneSlowZoneCostsTheFastPair(t *testing.T) {
	const n, interval = 2000, 2 * time.Millisecond
	put := faults.LogNormal(5*time.Millisecond, 20*time.Millisecond)
	healthy := zoneCase{put: put, third: "healthy", window: 16}.ackLatencies(t, n)
	slow := zoneCase{put: put, third: "slow", window: 16}.ackLatencies(t, n)
	second, pair := putOrderStats(put, 100_000)
	t.Logf("acks in fake time: healthy p50 %v p99 %v, az3 +200 ms p50 %v p99 %v (%.2f× healthy); one flight's commit: second of three p99 %v, slower of two p99 %v (%.2f×)",
		quantile(healthy, .5), quantile(healthy, .99), quantile(slow, .5), quantile(slow, .99),
		float64(quantile(slow, .99))/float64(quantile(healthy, .99)), second, pair, float64(pair)/float64(second))
	if bound := (pair + interval) * 11 / 10; quantile(slow, .99) > bound {
		t.Fatalf("az3 +200 ms: ack p99 %v above the slower fast copy's p99 plus the interval (%v, +10 %%)", quantile(slow, .99), bound)
	}
}

// putOrderStats samples l: the p99 of the second fastest of three draws
// (a healthy K=3/W=2 commit) and of the slower of two (the same with one
// bucket out of the race).
func putOrderStats(l faults.Latency, n int) (second, pair time.Duration) {
	r := rand.New(rand.NewPCG(1, 2))
	s3, s2 := make([]time.Duration, n), make([]time.Duration, n)
	for i := range n {
		a, b, c := l.Sample(r), l.Sample(r), l.Sample(r)
		s2[i] = max(a, b)
		s3[i] = max(min(a, b), min(max(a, b), c))
	}
	return quantile(s3, .99), quantile(s2, .99)
}
