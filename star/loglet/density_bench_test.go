package loglet_test

import (
	"context"
	"fmt"
	"os"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/fs"
	"github.com/starlog/starlog/shared/settle/chainsettle"
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
// star's defaults (flush 50 ms, 4 MiB flights, window 16, the default
// backlog and flight index cache, a write budget of 50/s) takes a fixed
// ingest of 1 KiB records (DENSITY_KIBPS, 4096 KiB/s) spread evenly over N
// streams for at least DENSITY_SECONDS (60), and on until three steady
// absorb passes have ended (the spacing ramps up from the free first pass;
// it is steady from the first pass, after the first, that carried every
// stream) and the backlog is back at half its peak (at most
// DENSITY_MAX_SECONDS, 1200), so the steady state spans two pass spacings
// and the takeover below meets a backlog near its usual size. It reports
// the metastore writes per second and per GiB (every write the metastore
// adapter received: refs, markers, shards, checkpoints; between the first
// steady pass end and the last, when there are three, and over the whole
// window as window-writes), the object requests per GiB of the
// write path (slot PUTs; settle and trim are not run), the ack p99, the
// passes run under backlog pressure, the backlog's peak in flights and
// MiB, the process's peak RSS (VmHWM: a row per process, as the make
// target runs them, else the peak of every row so far) and peak Go heap,
// and the takeover: once ingest stops the loglet is closed without
// absorbing (as a kill leaves it) and a successor settles its chain as a
// node's open gate does (chainsettle.ChainThrough: fence, walk, absorb, probe),
// timed, with the flights it walked and the metastore writes it made.
// Object store: a directory store with a 5 ms PUT (not mem: its objects
// would count in the RSS); metastore: SQLite or DynamoDB Local.
func BenchmarkDensity(b *testing.B) {
	for _, backend := range []string{"sqlite", "dynamo"} {
		for _, n := range []int{1, 100, 1000, 10000} {
			b.Run(fmt.Sprintf("meta=%s/streams=%d", backend, n), func(b *testing.B) { densityRun(b, backend, n) })
		}
	}
}

func densityRun(b *testing.B, backend string, n int) {
	secs := densityEnv("DENSITY_SECONDS", 60)
	maxSecs := max(densityEnv("DENSITY_MAX_SECONDS", 1200), secs)
	rate := densityEnv("DENSITY_KIBPS", 4096) // 1 KiB records per second
	budget := float64(densityEnv("DENSITY_BUDGET", 50))
	var ms meta.Store
	switch backend {
	case "sqlite":
		ms = testsvc.SQLite(b)
	default:
		ms = stores.Dynamo(b, &sharedDynamo)
	}
	inner, err := fs.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	if err := inner.CreateBucket("std"); err != nil {
		b.Fatal(err)
	}
	cfg := benchConfig(meta.Standard, []string{"std"}, 1)
	cfg.FlushInterval = 50 * time.Millisecond
	cfg.Window = 16
	cfg.TargetFlight = 4 << 20
	cfg.PoolBudget = 256 << 20
	cfg.BacklogFlights = densityEnv("DENSITY_BACKLOG_FLIGHTS", loglet.DefaultBacklogFlights)
	cfg.BacklogBytes = int64(densityEnv("DENSITY_BACKLOG_MIB", loglet.DefaultBacklogBytes>>20)) << 20
	cfg.IndexCacheBytes = int64(densityEnv("DENSITY_INDEX_CACHE_MIB", loglet.DefaultIndexCacheBytes>>20)) << 20
	cfg.Pacer = loglet.NewPacer(budget)
	reg := prometheus.NewRegistry()
	r := &benchRig{meta: mfaults.New(ms, 1), store: faults.Wrap(inner, faults.WithSeed(7)), cfg: cfg}
	r.store.SetLatency("std", faults.Constant(5*time.Millisecond))
	c := chain.New(cfg.Star, cfg.Class, cfg.Incarnation, r.meta, r.store)
	abs := &absorb.Absorber{Star: cfg.Star, Class: cfg.Class, Meta: r.meta, Rip: cfg.Ripening, UpdateEpoch: c.UpdateEpoch}
	l, err := loglet.Open(context.Background(), cfg, c, func(ctx context.Context) error { return chainsettle.Chain(ctx, c, abs) }, loglet.NewMetrics(reg), quietLog())
	if err != nil {
		b.Fatal(err)
	}
	closed := false
	b.Cleanup(func() {
		if !closed {
			l.Close()
		}
	})
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
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(maxSecs)*time.Second)
	defer cancel()
	var lmu sync.Mutex
	var lat []time.Duration
	var waiters sync.WaitGroup
	var records int64
	start := time.Now()
	t := time.NewTicker(tick)
	defer t.Stop()
	next, owed, peak, peakBytes := 0, 0.0, 0, int64(0)
	var peakHeap uint64
	heap := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	type passEnd struct {
		at      time.Time
		writes  int64
		records int64
	}
	var ends []passEnd
	// steady is the first pass end of the steady state: the spacing ramps
	// up (the free first pass carries a few streams, so it owes little, so
	// the next carries more …), and is steady from the end of the first
	// pass that carried every stream, at least the second.
	steady := -1
	lastPasses := histogramCount(reg, "starlog_absorb_pass_seconds")
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		if ctx.Err() != nil {
			break
		}
		flights, bytes := l.Backlog()
		peak, peakBytes = max(peak, flights), max(peakBytes, bytes)
		if metrics.Read(heap); heap[0].Value.Kind() == metrics.KindUint64 {
			peakHeap = max(peakHeap, heap[0].Value.Uint64())
		}
		if time.Since(start) >= time.Duration(secs)*time.Second && steady >= 0 && len(ends)-steady >= 3 &&
			2*flights >= peak && 2*time.Since(ends[len(ends)-1].at) >= ends[len(ends)-1].at.Sub(ends[len(ends)-2].at) {
			// Two steady spacings measured, and the backlog is back at half
			// its peak, half a spacing after the last pass (not a moment
			// after a pass, before its tokens came back).
			break
		}
		if p := histogramCount(reg, "starlog_absorb_pass_seconds"); p != lastPasses {
			// A pass ended: the steady-state rate is measured between pass
			// ends, so neither the free first pass nor a window cut inside
			// a spacing skews it.
			lastPasses = p
			e := passEnd{time.Now(), r.meta.Counts().Writes(), records}
			var prev int64
			if len(ends) > 0 {
				prev = ends[len(ends)-1].writes
			}
			if ends = append(ends, e); steady < 0 && len(ends) >= 2 && float64(e.writes-prev) >= 0.9*float64(n+2) {
				steady = len(ends) - 1
			}
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
	passes := histogramCount(reg, "starlog_absorb_pass_seconds")
	passSecs := histogramSum(reg, "starlog_absorb_pass_seconds")
	objs := r.store.Counters().Sub(objs0).Total().Requests
	takeover, walked, takeoverWrites := densityTakeover(b, l, c, r, cfg)
	closed = true
	gib := float64(records) * 1024 / (1 << 30)
	b.ReportMetric(float64(records)*1024/elapsed.Seconds()/(1<<20), "MiB/s")
	b.ReportMetric(float64(writes)/elapsed.Seconds(), "window-writes/s")
	if steady >= 0 && len(ends)-steady >= 3 {
		f, e := ends[steady], ends[len(ends)-1]
		b.ReportMetric(float64(len(ends)-steady), "steady-pass-ends")
		w, secs := float64(e.writes-f.writes), e.at.Sub(f.at).Seconds()
		b.ReportMetric(w/secs, "meta-writes/s")
		b.ReportMetric(w/(float64(e.records-f.records)*1024/(1<<30)), "meta-writes/GiB")
	} else {
		b.ReportMetric(float64(writes)/gib, "window-writes/GiB")
	}
	b.ReportMetric(float64(objs)/gib, "obj-reqs/GiB")
	b.ReportMetric(float64(quantile(lat, 0.99).Microseconds())/1000, "ack-p99-ms")
	b.ReportMetric(gaugeOrCounter(reg, "starlog_absorb_pressured_passes_total"), "pressured-passes")
	// The trade: pass spacing against the backlog it leaves (cut,
	// unabsorbed flights: a successor's walk; memory only up to the flight
	// index's cache bound and the index entries).
	b.ReportMetric(elapsed.Seconds()/max(passes, 1), "s/pass")
	b.ReportMetric(passSecs/max(passes, 1), "pass-s")
	b.ReportMetric(float64(peak), "backlog-peak-flights")
	b.ReportMetric(float64(peakBytes)/(1<<20), "backlog-peak-MiB")
	b.ReportMetric(float64(peakHeap)/(1<<20), "peak-heap-MiB")
	if hwm, ok := vmHWM(); ok {
		b.ReportMetric(float64(hwm)/(1<<20), "peak-rss-MiB")
	}
	b.ReportMetric(takeover.Seconds(), "takeover-s")
	b.ReportMetric(float64(walked), "takeover-flights")
	b.ReportMetric(float64(takeoverWrites), "takeover-writes")
}

// densityTakeover closes l without absorbing what it holds (a kill leaves
// the chain so: the fence finds the same slots) and times a successor
// settling the chain as a node's open gate does (Node.settleFn): a chain
// handle of another star's incarnation, a fresh absorber of the chain's
// star, chainsettle.ChainThrough up to the head it read. It returns the time,
// the flights the walk covered (the cut less the checkpoint) and the
// metastore writes it made.
func densityTakeover(b *testing.B, l *loglet.Loglet, c *chain.Chain, r *benchRig, cfg loglet.Config) (time.Duration, uint64, int64) {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	epoch := l.Epoch()
	l.Close()
	rec, _, err := c.Epoch(ctx, epoch)
	if err != nil {
		b.Fatal(err)
	}
	succ := chain.New(cfg.Star, cfg.Class, chain.Incarnation("successor", 1), r.meta, r.store)
	abs := &absorb.Absorber{Star: cfg.Star, Class: cfg.Class, Meta: r.meta, Rip: cfg.Ripening, UpdateEpoch: succ.UpdateEpoch}
	w0 := r.meta.Counts().Writes()
	start := time.Now()
	h, _, ok, err := succ.Head(ctx)
	if err != nil || !ok {
		b.Fatalf("successor: read the head: %v (found %v)", err, ok)
	}
	if err := chainsettle.ChainThrough(ctx, succ, abs, h.Epoch); err != nil {
		b.Fatalf("successor: settle the chain: %v", err)
	}
	took := time.Since(start)
	after, _, err := c.Epoch(ctx, epoch)
	if err != nil || after.Cut == nil {
		b.Fatalf("successor: epoch %d record after the settle: %+v (%v)", epoch, after, err)
	}
	return took, *after.Cut - rec.Checkpoint, r.meta.Counts().Writes() - w0
}

// vmHWM is the process's peak resident set (Linux), in bytes.
func vmHWM() (int64, bool) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, false
	}
	for line := range strings.Lines(string(b)) {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

func histogramSum(reg *prometheus.Registry, name string) float64 {
	mfs, _ := reg.Gather()
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetHistogram().GetSampleSum()
			}
		}
	}
	return v
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
