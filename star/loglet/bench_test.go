package loglet_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/fs"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/settle/chainsettle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/streams"
)

type benchRig struct {
	meta   *mfaults.Store
	store  *faults.Store
	loglet *loglet.Loglet
	cfg    loglet.Config
}

func newRig(b *testing.B, inner objstore.Store, cfg loglet.Config) *benchRig {
	b.Helper()
	r := &benchRig{meta: mfaults.New(testsvc.SQLite(b), 1), store: faults.Wrap(inner, faults.WithSeed(7)), cfg: cfg}
	c := chain.New(cfg.Star, cfg.Class, cfg.Incarnation, r.meta, r.store)
	abs := &absorb.Absorber{Star: cfg.Star, Class: cfg.Class, Meta: r.meta, Rip: cfg.Ripening, UpdateEpoch: c.UpdateEpoch}
	l, err := loglet.Open(context.Background(), cfg, c, func(ctx context.Context) error { return chainsettle.Chain(ctx, c, abs) }, nil, quietLog())
	if err != nil {
		b.Fatal(err)
	}
	r.loglet = l
	b.Cleanup(l.Close)
	return r
}

func benchConfig(class meta.Class, buckets []string, w int) loglet.Config {
	c := loglet.Config{
		Star: "bench", Incarnation: chain.Incarnation("bench", 1), Class: class,
		Buckets: buckets, W: w,
		Ripening: absorb.Ripening{Trigger: 8 << 20, Linger: time.Minute, AgeCap: 15 * time.Minute},
	}
	return c
}

func (r *benchRig) streams(b *testing.B, n int) []*streams.Stream {
	ss := make([]*streams.Stream, n)
	for i := range ss {
		s, err := streams.Open(context.Background(), r.meta, r.loglet, fmt.Sprintf("s%02d", i), r.cfg.Class, facade.Config{})
		if err != nil {
			b.Fatal(err)
		}
		ss[i] = s
	}
	return ss
}

func payload(n, size int) facade.Request {
	body := make([]byte, size)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	req := facade.Request{Records: make([]facade.Input, n)}
	for i := range req.Records {
		req.Records[i] = facade.Input{Body: body}
	}
	return req
}

// drive runs batches appends spread over the streams, each stream keeping
// up to depth batches in flight, and returns each batch's ack latency.
func drive(b *testing.B, ss []*streams.Stream, batches, depth int, req facade.Request) []time.Duration {
	ctx := context.Background()
	var next atomic.Int64
	lat := make([][]time.Duration, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() {
			type pending struct {
				t  *streams.Ticket
				at time.Time
			}
			var q []pending
			wait := func() {
				p := q[0]
				q = q[1:]
				if _, err := p.t.Wait(ctx); err != nil {
					b.Error(err)
				}
				lat[i] = append(lat[i], time.Since(p.at))
			}
			for next.Add(1) <= int64(batches) {
				if len(q) == depth {
					wait()
				}
				at := time.Now()
				t, err := s.Submit(ctx, req)
				if err != nil {
					b.Error(err)
					return
				}
				q = append(q, pending{t, at})
			}
			for len(q) > 0 {
				wait()
			}
		})
	}
	wg.Wait()
	return slices.Concat(lat...)
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

// BenchmarkThroughputFS: 16 streams, 1 KiB records, 100-record batches on
// the fs store (Standard, K=1), against the raw fs store writing the same
// bytes in objects of the same size with the same parallelism, side by side.
func BenchmarkThroughputFS(b *testing.B) {
	const streamsN, recs, size = 16, 100, 1024
	var flightBytes atomic.Int64
	var flights atomic.Int64
	b.Run("loglet", func(b *testing.B) {
		store, err := fs.New(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		store.CreateBucket("std")
		cfg := benchConfig(meta.Standard, []string{"std"}, 1)
		cfg.Window = 8
		r := newRig(b, store, cfg)
		ss := r.streams(b, streamsN)
		b.SetBytes(recs * size)
		b.ResetTimer()
		drive(b, ss, b.N, 32, payload(recs, size))
		b.StopTimer()
		c := r.store.Counters().Op(objstore.OpPut)
		flightBytes.Store(c.Bytes)
		flights.Store(c.Requests)
		b.ReportMetric(float64(c.Bytes)/float64(max(c.Requests, 1))/(1<<20), "MiB/flight")
	})
	b.Run("raw", func(b *testing.B) {
		store, err := fs.New(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		store.CreateBucket("std")
		objSize := int64(4 << 20)
		if n := flights.Load(); n > 0 {
			objSize = flightBytes.Load() / n
		}
		body := make([]byte, objSize)
		bk := store.Bucket("std")
		b.SetBytes(recs * size)
		// The same bytes as the loglet run: b.N batches of 100 KiB, in objects
		// of the loglet's mean flight size, 8 PUTs at a time.
		total := int64(b.N) * recs * size
		objs := int((total + objSize - 1) / objSize)
		var next atomic.Int64
		var wg sync.WaitGroup
		b.ResetTimer()
		for range 8 {
			wg.Go(func() {
				for i := next.Add(1); i <= int64(objs); i = next.Add(1) {
					if _, err := bk.PutIfAbsent(context.Background(), fmt.Sprintf("raw/%020d", i), body); err != nil {
						b.Error(err)
					}
				}
			})
		}
		wg.Wait()
	})
}

// BenchmarkExpressAckLatency: K=3/W=2 with per-bucket lognormal latency
// (p50 5 ms, p99 20 ms), healthy and with one bucket 200 ms slower side by
// side: 16 streams with one 10-record batch of 1 KiB records in flight each
// (closed), and open loop at 10 and 50 MiB/s for -acklat.dur (latency from
// each batch's scheduled send). load1 is the load average at the end.
func BenchmarkExpressAckLatency(b *testing.B) {
	for _, rate := range []int{0, 10, 50} {
		load := "closed"
		if rate > 0 {
			load = fmt.Sprintf("%dMiBps", rate)
		}
		for _, slow := range []bool{false, true} {
			name := "healthy"
			if slow {
				name = "one_zone_plus_200ms"
			}
			b.Run(load+"/"+name, func(b *testing.B) {
				inner, _ := mem.New(zones...)
				cfg := benchConfig(meta.Express, zones, 2)
				cfg.FlushInterval = 2 * time.Millisecond
				cfg.Window = 16
				cfg.TargetFlight = 1 << 20
				r := newRig(b, inner, cfg)
				for _, z := range zones {
					r.store.SetLatency(z, faults.LogNormal(5*time.Millisecond, 20*time.Millisecond))
				}
				if slow {
					r.store.SetSlow("az3", 200*time.Millisecond)
				}
				ss := r.streams(b, 16)
				req := payload(10, 1024)
				b.ResetTimer()
				start := time.Now()
				var lat []time.Duration
				if rate == 0 {
					lat = drive(b, ss, max(b.N, 400), 1, req)
				} else {
					lat = driveRate(b, ss, rate<<20, *ackLatDur, req)
				}
				secs := time.Since(start).Seconds()
				b.StopTimer()
				b.ReportMetric(ms(quantile(lat, 0.5)), "p50-ms")
				b.ReportMetric(ms(quantile(lat, 0.99)), "p99-ms")
				b.ReportMetric(float64(len(lat))*10*1024/secs/(1<<20), "MiB/s")
				b.ReportMetric(load1(), "load1")
			})
		}
	}
}

var ackLatDur = flag.Duration("acklat.dur", 3*time.Second, "BenchmarkExpressAckLatency: how long each open-loop rate runs")

// load1 is the one-minute load average (0 where /proc/loadavg is missing):
// the machine is shared, so every latency figure goes with it.
func load1() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return f
}

// BenchmarkStandardAckLatency: K=1 with per-PUT lognormal latency (p50
// 40 ms, p99 150 ms) and the Standard flush interval.
func BenchmarkStandardAckLatency(b *testing.B) {
	inner, _ := mem.New("std")
	cfg := benchConfig(meta.Standard, []string{"std"}, 1)
	cfg.FlushInterval = 50 * time.Millisecond
	cfg.Window = 16
	r := newRig(b, inner, cfg)
	r.store.SetLatency("std", faults.LogNormal(40*time.Millisecond, 150*time.Millisecond))
	ss := r.streams(b, 16)
	b.ResetTimer()
	lat := drive(b, ss, max(b.N, 400), 1, payload(10, 1024))
	b.StopTimer()
	b.ReportMetric(float64(quantile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(quantile(lat, 0.99).Microseconds())/1000, "p99-ms")
}

// BenchmarkMetastoreWritesPerSecond: the same 16 streams at two ingest
// rates (1 and 4 records of 4 KiB per batch): metastore writes per second
// must not grow with bytes.
func BenchmarkMetastoreWritesPerSecond(b *testing.B) {
	for _, recs := range []int{1, 4} {
		b.Run(fmt.Sprintf("records_per_batch=%d", recs), func(b *testing.B) {
			inner, _ := mem.New("std")
			cfg := benchConfig(meta.Standard, []string{"std"}, 1)
			cfg.FlushInterval = 20 * time.Millisecond
			r := newRig(b, inner, cfg)
			r.store.SetLatency("std", faults.Constant(5*time.Millisecond))
			ss := r.streams(b, 16)
			r.meta.ResetCounts()
			start := time.Now()
			b.ResetTimer()
			drive(b, ss, max(b.N, 2000), 4, payload(recs, 4096))
			b.StopTimer()
			// The last pass lands before the writes are counted.
			if err := r.loglet.AwaitAbsorbed(context.Background()); err != nil {
				b.Fatal(err)
			}
			secs := time.Since(start).Seconds()
			c := r.meta.Counts()
			b.ReportMetric(float64(c.Writes())/secs, "meta-writes/s")
			b.ReportMetric(float64(max(b.N, 2000)*recs*4096)/secs/(1<<20), "MiB/s")
		})
	}
}
