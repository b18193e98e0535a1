package loglet_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/streams"
)

// cutClass is one class at the star's defaults on the latency store.
type cutClass struct {
	name    string
	class   meta.Class
	buckets []string
	w       int
	put     faults.Latency
	putP50  time.Duration
	cc      node.ClassConfig
}

func cutClasses() []cutClass {
	d := node.Defaults()
	return []cutClass{
		{"standard", meta.Standard, []string{"std"}, 1, faults.LogNormal(40*time.Millisecond, 150*time.Millisecond), 40 * time.Millisecond, d.Standard},
		{"express", meta.Express, zones, 2, faults.LogNormal(5*time.Millisecond, 20*time.Millisecond), 5 * time.Millisecond, d.Express},
	}
}

func (c cutClass) rig(b *testing.B, fixed bool) *benchRig {
	inner, _ := mem.New(c.buckets...)
	cfg := benchConfig(c.class, c.buckets, c.w)
	cfg.FlushInterval, cfg.Window, cfg.TargetFlight = c.cc.FlushInterval, c.cc.ParallelUploads, c.cc.TargetFlightBytes
	cfg.PoolBudget, cfg.FlightDeadline = c.cc.MemoryBufferBytes, c.cc.FlightDeadline
	if fixed {
		loglet.WithFixedDelayCut(&cfg)
	}
	r := newRig(b, inner, cfg)
	for _, bk := range c.buckets {
		r.store.SetLatency(bk, c.put)
	}
	return r
}

// BenchmarkCutPolicy sets the adaptive cut beside the fixed-delay one, both
// at the star's default flush settings on the latency store (Standard K=1,
// PUT p50 40 / p99 150 ms; Express K=3/W=2, 5 / 20 ms):
//
//   - sparse: one append at a time with two flush intervals of idle between
//     them; the adaptive cut acks in about one PUT latency, the fixed delay
//     in an interval plus a PUT.
//   - load: 16 streams, open loop at 10 MiB/s of 10 × 1 KiB batches for
//     3 s; PUTs per second stay bounded by the interval either way.
func BenchmarkCutPolicy(b *testing.B) {
	for _, c := range cutClasses() {
		for _, fixed := range []bool{false, true} {
			policy := "adaptive"
			if fixed {
				policy = "fixed"
			}
			b.Run(c.name+"/sparse/"+policy, func(b *testing.B) {
				r := c.rig(b, fixed)
				s := r.streams(b, 1)[0]
				ctx := context.Background()
				n := max(b.N, 30)
				lat := make([]time.Duration, 0, n)
				b.ResetTimer()
				for range n {
					time.Sleep(2 * c.cc.FlushInterval)
					at := time.Now()
					if _, err := s.Append(ctx, payload(1, 1024)); err != nil {
						b.Fatal(err)
					}
					lat = append(lat, time.Since(at))
				}
				b.StopTimer()
				b.ReportMetric(ms(quantile(lat, 0.5)), "p50-ms")
				b.ReportMetric(ms(quantile(lat, 0.99)), "p99-ms")
				b.ReportMetric(ms(quantile(lat, 0.5)-c.putP50), "p50-over-put-ms")
			})
			b.Run(c.name+"/load/"+policy, func(b *testing.B) {
				r := c.rig(b, fixed)
				ss := r.streams(b, 16)
				req := payload(10, 1024)
				const rate, dur = 10 << 20, 3 * time.Second
				before := r.store.Counters()
				b.ResetTimer()
				start := time.Now()
				lat := driveRate(b, ss, rate, dur, req)
				secs := time.Since(start).Seconds()
				b.StopTimer()
				puts := r.store.Counters().Sub(before).Op(objstore.OpPut).Requests
				b.ReportMetric(ms(quantile(lat, 0.5)), "p50-ms")
				b.ReportMetric(ms(quantile(lat, 0.99)), "p99-ms")
				b.ReportMetric(float64(puts)/float64(len(c.buckets))/secs, "flights/s")
				b.ReportMetric(float64(len(lat))*10*1024/secs/(1<<20), "MiB/s")
			})
		}
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// driveRate submits req round-robin over the streams at bytesPerSec (of
// record bodies) for dur, open loop (a slow ack does not slow the
// submitter), and returns each batch's ack latency.
func driveRate(b testing.TB, ss []*streams.Stream, bytesPerSec int, dur time.Duration, req facade.Request) []time.Duration {
	lat, _ := driveRateLag(b, ss, bytesPerSec, dur, req)
	return lat
}

// driveRateLag is driveRate that also says how far the submitter fell
// behind its schedule by the last submission (a machine short of CPU).
func driveRateLag(b testing.TB, ss []*streams.Stream, bytesPerSec int, dur time.Duration, req facade.Request) (lat []time.Duration, lag time.Duration) {
	ctx := context.Background()
	var size int
	for _, r := range req.Records {
		size += len(r.Body)
	}
	every := time.Duration(float64(time.Second) * float64(size) / float64(bytesPerSec))
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; ; i++ {
		at := start.Add(time.Duration(i) * every)
		if at.Sub(start) >= dur {
			break
		}
		time.Sleep(time.Until(at))
		lag = max(lag, time.Since(at))
		t, err := ss[i%len(ss)].Submit(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		wg.Go(func() {
			if _, err := t.Wait(ctx); err != nil {
				b.Error(err)
			}
			d := time.Since(at)
			mu.Lock()
			lat = append(lat, d)
			mu.Unlock()
		})
	}
	wg.Wait()
	return lat, lag
}
