package loglet_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/stores"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/streams"
)

// densityEnv reads an integer knob of the density benchmark.
func densityEnv(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkDensity (make bench-density): one Standard loglet with the
// star's defaults (flush 50 ms, 4 MiB flights, window 16, a 1024-flight and
// 1 GiB backlog, a write budget of 50/s) takes a fixed ingest of 1 KiB
// records (DENSITY_KIBPS, 4096 KiB/s) spread evenly over N streams for
// DENSITY_SECONDS (60) and reports the metastore writes per second and per
// GiB (every write the metastore adapter received: refs, markers, shards,
// checkpoints; between the second and the last pass end, the steady state,
// when there are three, and over the whole window as window-writes), the object requests per GiB of the write
// path (slot PUTs; settle and trim are not run), the ack p99 and the
// passes run under backlog pressure. Object store: mem with a 5 ms PUT;
// metastore: SQLite or DynamoDB Local.
func BenchmarkDensity(b *testing.B) {
	for _, backend := range []string{"sqlite", "dynamo"} {
		for _, n := range []int{1, 100, 1000, 10000} {
			b.Run(fmt.Sprintf("meta=%s/streams=%d", backend, n), func(b *testing.B) { densityRun(b, backend, n) })
		}
	}
}

func densityRun(b *testing.B, backend string, n int) {
	secs := densityEnv("DENSITY_SECONDS", 60)
	rate := densityEnv("DENSITY_KIBPS", 4096) // 1 KiB records per second
	budget := float64(densityEnv("DENSITY_BUDGET", 50))
	var ms meta.Store
	switch backend {
	case "sqlite":
		ms = testsvc.SQLite(b)
	default:
		ms = stores.Dynamo(b, &sharedDynamo)
	}
	inner, _ := mem.New("std")
	cfg := benchConfig(meta.Standard, []string{"std"}, 1)
	cfg.FlushInterval = 50 * time.Millisecond
	cfg.Window = 16
	cfg.TargetFlight = 4 << 20
	cfg.PoolBudget = 256 << 20
	cfg.BacklogFlights = densityEnv("DENSITY_BACKLOG_FLIGHTS", 1024)
	cfg.BacklogBytes = int64(densityEnv("DENSITY_BACKLOG_MIB", 1024)) << 20
	cfg.Pacer = loglet.NewPacer(budget)
	reg := prometheus.NewRegistry()
	r := &benchRig{meta: mfaults.New(ms, 1), store: faults.Wrap(inner, faults.WithSeed(7)), cfg: cfg}
	r.store.SetLatency("std", faults.Constant(5*time.Millisecond))
	c := chain.New(cfg.Star, cfg.Class, cfg.Incarnation, r.meta, r.store)
	abs := &absorb.Absorber{Star: cfg.Star, Class: cfg.Class, Meta: r.meta, Rip: cfg.Ripening, UpdateEpoch: c.UpdateEpoch}
	l, err := loglet.Open(context.Background(), cfg, c, func(ctx context.Context) error { return settle.Chain(ctx, c, abs) }, loglet.NewMetrics(reg), quietLog())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(l.Close)
	r.loglet = l

	ss := make([]*streams.Stream, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	for i := range ss {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			s, err := streams.Open(context.Background(), r.meta, l, fmt.Sprintf("%032x", i), cfg.Class, facade.Config{})
			if err != nil {
				b.Error(err)
				return
			}
			ss[i] = s
		})
	}
	wg.Wait()
	if b.Failed() {
		return
	}
	body := make([]byte, 1024-8) // 1 KiB metered with its header
	r.meta.ResetCounts()
	objs0 := r.store.Counters()
	b.ResetTimer()

	// Every 50 ms, a tick's share of the rate in batches over the next
	// streams in turn, so each stream gets its 1/N of the records.
	const tick = 50 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
	defer cancel()
	var lmu sync.Mutex
	var lat []time.Duration
	var waiters sync.WaitGroup
	var records int64
	start := time.Now()
	t := time.NewTicker(tick)
	defer t.Stop()
	next, owed, peak := 0, 0.0, 0
	type passEnd struct {
		at      time.Time
		writes  int64
		records int64
	}
	var ends []passEnd
	lastPasses := histogramCount(reg, "starlog_absorb_pass_seconds")
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
		peak = max(peak, l.Index().Len())
		if p := histogramCount(reg, "starlog_absorb_pass_seconds"); p != lastPasses {
			// A pass ended: the steady-state rate is measured between pass
			// ends, so neither the free first pass nor a window cut inside
			// a spacing skews it.
			lastPasses = p
			ends = append(ends, passEnd{time.Now(), r.meta.Counts().Writes(), records})
		}
		owed += float64(rate) * tick.Seconds()
		recs := int(owed)
		owed -= float64(recs)
		k := min(n, recs)
		for j := range k {
			cnt := recs / k
			if j < recs%k {
				cnt++
			}
			req := facade.Request{Records: make([]facade.Input, cnt)}
			for x := range req.Records {
				req.Records[x] = facade.Input{Body: body}
			}
			s := ss[next]
			next = (next + 1) % n
			at := time.Now()
			tk, err := s.Submit(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			records += int64(cnt)
			waiters.Go(func() {
				if _, err := tk.Wait(context.Background()); err != nil {
					b.Error(err)
				}
				lmu.Lock()
				lat = append(lat, time.Since(at))
				lmu.Unlock()
			})
		}
	}
	waiters.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	writes := r.meta.Counts().Writes()
	objs := r.store.Counters().Sub(objs0).Total().Requests
	gib := float64(records) * 1024 / (1 << 30)
	b.ReportMetric(float64(records)*1024/elapsed.Seconds()/(1<<20), "MiB/s")
	b.ReportMetric(float64(writes)/elapsed.Seconds(), "window-writes/s")
	if len(ends) >= 3 {
		// From the second pass end to the last (the first pass is not
		// paced: it owes nothing).
		f, e := ends[1], ends[len(ends)-1]
		w, secs := float64(e.writes-f.writes), e.at.Sub(f.at).Seconds()
		b.ReportMetric(w/secs, "meta-writes/s")
		b.ReportMetric(w/(float64(e.records-f.records)*1024/(1<<30)), "meta-writes/GiB")
	} else {
		b.ReportMetric(float64(writes)/gib, "window-writes/GiB")
	}
	b.ReportMetric(float64(objs)/gib, "obj-reqs/GiB")
	b.ReportMetric(float64(quantile(lat, 0.99).Microseconds())/1000, "ack-p99-ms")
	b.ReportMetric(gaugeOrCounter(reg, "starlog_absorb_pressured_passes_total"), "pressured-passes")
	// The trade: pass spacing against the backlog it leaves (released,
	// unabsorbed flights: the flight index's memory and a successor's walk).
	passes := histogramCount(reg, "starlog_absorb_pass_seconds")
	b.ReportMetric(elapsed.Seconds()/max(passes, 1), "s/pass")
	b.ReportMetric(float64(peak), "backlog-peak-flights")
}

func gaugeOrCounter(reg *prometheus.Registry, name string) float64 {
	mfs, _ := reg.Gather()
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return v
}

func histogramCount(reg *prometheus.Registry, name string) float64 {
	mfs, _ := reg.Gather()
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return v
}
