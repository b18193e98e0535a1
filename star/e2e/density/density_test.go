package density

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/shared/testsvc"
)

// Knobs (environment, so `make bench-density-star` can set them):
// DENSITY_STAR=1 runs the bench at all; DENSITY_STAR_STREAMS the N of the
// rows (default "1 1000 10000"); DENSITY_STAR_SECONDS the measured window
// (default 120) after DENSITY_STAR_WARMUP (default 60) of paced ingest;
// DENSITY_STAR_MIBPS the ingest (default 2); DENSITY_STAR_FLAGS extra
// `star dev` flags, for diagnosis only (the figures are of the defaults).
func knob(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

const (
	recordBytes      = 1024
	recordsPerAppend = 16 // 128 appends/s at 2 MiB/s: a stream of 10,000 gets one every 78 s
	workers          = 32
	basin            = "starlog-dev"
	takeoverBound    = 5 * time.Minute
)

// row is one N's figures over the measured window.
type row struct {
	n                 int
	primeSecs         float64
	windowSecs        float64
	mibps             float64
	gib               float64
	writes            map[string]float64 // by "writer/row"
	auditorObjects    map[string]float64 // by "bucket/op"
	starObjects       float64
	reclaimed         float64
	slices            []float64 // writes/s of each slice of the window
	peakRSS           float64
	takeover          time.Duration
	takeoverBacklogMB float64
}

func (r row) total() float64 {
	t := 0.0
	for _, v := range r.writes {
		t += v
	}
	return t
}

func (r row) byWriter() map[string]float64 {
	out := map[string]float64{}
	for k, v := range r.writes {
		w, _, _ := strings.Cut(k, "/")
		out[w] += v
	}
	return out
}

// TestDensityOfTheWholeStar runs `star dev` on its defaults and appends
// DENSITY_STAR_MIBPS of 1 KiB records spread evenly over N streams,
// counting the star's and the auditor's metastore writes from /metrics
// (starlog_meta_writes_total by writer and row kind), the auditor's object
// requests, peak RSS, and a kill -9 takeover.
func TestDensityOfTheWholeStar(t *testing.T) {
	if os.Getenv("DENSITY_STAR") == "" {
		t.Skip("set DENSITY_STAR=1 (make bench-density-star)")
	}
	var ns []int
	for _, f := range strings.Fields(knob("DENSITY_STAR_STREAMS", "1 1000 10000")) {
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			t.Fatalf("DENSITY_STAR_STREAMS: %q", f)
		}
		ns = append(ns, n)
	}
	secs, _ := strconv.Atoi(knob("DENSITY_STAR_SECONDS", "120"))
	warm, _ := strconv.Atoi(knob("DENSITY_STAR_WARMUP", "60"))
	mibps, _ := strconv.ParseFloat(knob("DENSITY_STAR_MIBPS", "2"), 64)

	bin := filepath.Join(t.TempDir(), "star")
	if out, err := exec.Command("go", "build", "-C", testsvc.RepoRoot(t), "-o", bin, "./star").CombinedOutput(); err != nil {
		t.Fatalf("build star: %v\n%s", err, out)
	}
	var rows []row
	for _, n := range ns {
		t.Logf("N=%d: load average before %s", n, loadavg())
		r := runRow(t, bin, n, time.Duration(warm)*time.Second, time.Duration(secs)*time.Second, mibps)
		t.Logf("N=%d: load average after %s", n, loadavg())
		report(t, r)
		rows = append(rows, r)
	}
	table(t, rows)
}

func runRow(t *testing.T, bin string, n int, warm, window time.Duration, mibps float64) row {
	dir := t.TempDir()
	listen, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	internal, err := freeAddr()
	if err != nil {
		t.Fatal(err)
	}
	logPath := filepath.Join(dir, "star.log")
	if d := os.Getenv("DENSITY_STAR_LOGS"); d != "" {
		// Kept after the row: the star's log outlives its temporary folder.
		logPath = filepath.Join(d, fmt.Sprintf("density-star-%d.log", n))
	}
	s := &devStar{bin: bin, data: filepath.Join(dir, "data"), listen: listen, internal: internal, logPath: logPath,
		extra: strings.Fields(os.Getenv("DENSITY_STAR_FLAGS"))}
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	defer s.stop()
	if err := s.waitHealthy(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	tok, err := s.token()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := sdk.New(sdk.Config{AccountEndpoint: "http://" + listen, Token: tok})
	if err != nil {
		t.Fatal(err)
	}
	b := cl.Basin(basin)
	// star dev creates its basin once it serves: wait for it.
	if err := poll.Wait(time.Minute, func() error {
		c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := cl.GetBasinConfig(c, basin)
		return err
	}); err != nil {
		t.Fatalf("N=%d: basin %s: %v", n, basin, err)
	}
	name := func(i int) string { return fmt.Sprintf("d%d-%05d", n, i) }
	body := make([]byte, recordBytes)
	for i := range body {
		body[i] = byte('a' + i%26)
	}
	batch := func(k int) *api.AppendInput {
		in := &api.AppendInput{Records: make([]api.Record, k)}
		for i := range in.Records {
			in.Records[i].Body = body
		}
		return in
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	// Prime: one record to each stream (it is created on append), as fast
	// as the star takes them, so the paced phase writes to N live streams.
	r := row{n: n, mibps: mibps}
	t0 := time.Now()
	next := atomic.Int64{}
	var wg sync.WaitGroup
	var primeErr atomic.Value
	for range workers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				actx, c := context.WithTimeout(ctx, time.Minute)
				_, err := b.Stream(name(i)).Append(actx, batch(1))
				c()
				if err != nil {
					primeErr.Store(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if err, ok := primeErr.Load().(error); ok {
		t.Fatalf("N=%d: prime: %v", n, err)
	}
	r.primeSecs = time.Since(t0).Seconds()
	t.Logf("N=%d: primed %d streams in %.1f s", n, n, r.primeSecs)

	// Paced: appends of recordsPerAppend records to the streams in turn,
	// at mibps; acked bytes counted for the per-GiB figures.
	var acked atomic.Int64
	var failed atomic.Int64
	var failures errorCounts
	work := make(chan int, 4096)
	perSec := mibps * (1 << 20) / (recordBytes * recordsPerAppend)
	dctx, stopDriver := context.WithCancel(ctx)
	var dwg sync.WaitGroup
	dwg.Go(func() {
		defer close(work)
		start := time.Now()
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		sent := 0
		for {
			select {
			case <-dctx.Done():
				return
			case <-tick.C:
			}
			due := int(time.Since(start).Seconds() * perSec)
			for ; sent < due; sent++ {
				select {
				case work <- sent % n:
				case <-dctx.Done():
					return
				}
			}
		}
	})
	for range workers {
		dwg.Go(func() {
			for i := range work {
				actx, c := context.WithTimeout(dctx, time.Minute)
				_, err := b.Stream(name(i)).Append(actx, batch(recordsPerAppend))
				c()
				if err != nil {
					if dctx.Err() == nil {
						failed.Add(1)
						failures.note(err)
					}
					continue
				}
				acked.Add(recordsPerAppend * recordBytes)
			}
		})
	}
	stopped := false
	stopIngest := func() {
		if !stopped {
			stopped = true
			stopDriver()
			dwg.Wait()
		}
	}
	defer stopIngest()

	sleep(ctx, warm)
	names := []string{"starlog_meta_writes_total", "auditor_starlog_objstore_requests_total", "starlog_objstore_requests_total", "starlog_settle_objects_reclaimed_total"}
	m0, err := s.scrape(names...)
	if err != nil {
		t.Fatal(err)
	}
	b0, w0 := acked.Load(), time.Now()
	const slices = 4
	prev, prevAt := m0, w0
	for range slices {
		sleep(ctx, window/slices)
		m, err := s.scrape(names...)
		if err != nil {
			t.Fatal(err)
		}
		r.slices = append(r.slices, (sum(m, "starlog_meta_writes_total")-sum(prev, "starlog_meta_writes_total"))/time.Since(prevAt).Seconds())
		prev, prevAt = m, time.Now()
	}
	m1 := prev
	r.windowSecs = time.Since(w0).Seconds()
	bytes := float64(acked.Load() - b0)
	r.gib = bytes / (1 << 30)
	r.mibps = bytes / (1 << 20) / r.windowSecs
	r.writes = map[string]float64{}
	r.auditorObjects = map[string]float64{}
	for k, v := range m1 {
		d := v - m0[k]
		switch {
		case strings.HasPrefix(k, "starlog_meta_writes_total{"):
			r.writes[label(k, "writer")+"/"+label(k, "row")] += d
		case strings.HasPrefix(k, "auditor_starlog_objstore_requests_total{"):
			r.auditorObjects[label(k, "bucket")+"/"+label(k, "op")] += d
		case strings.HasPrefix(k, "starlog_objstore_requests_total{"):
			r.starObjects += d
		case strings.HasPrefix(k, "starlog_settle_objects_reclaimed_total"):
			r.reclaimed += d
		}
	}
	if f := failed.Load(); f > 0 {
		t.Logf("N=%d: %d appends failed in the paced phase; by error: %s", n, f, failures.top(5))
	}
	r.peakRSS = s.peakRSS()

	// Takeover: kill -9 under ingest (the chain holds the flights not yet
	// absorbed), start again on the same data, time until an append to a
	// stream that had records in the backlog is acknowledged.
	target := name(int((acked.Load()/(recordsPerAppend*recordBytes))%int64(n)+int64(n)-1) % n)
	s.kill()
	stopIngest()
	if err := s.start(); err != nil {
		t.Fatal(err)
	}
	ts := time.Now()
	err = poll.Wait(takeoverBound, func() error {
		actx, c := context.WithTimeout(ctx, 5*time.Second)
		defer c()
		_, err := b.Stream(target).Append(actx, batch(1))
		return err
	})
	r.takeover = time.Since(ts)
	if err != nil {
		// Reported, not fatal: the row's other figures stand.
		t.Errorf("N=%d: no append acknowledged within %v of the restart: %v", n, takeoverBound, err)
		if b, err := os.ReadFile(s.logPath); err == nil { // the folder goes with the test
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("N=%d: the star's last log lines:\n%s", n, strings.Join(lines[max(0, len(lines)-40):], "\n"))
		}
		r.takeover = -1
	}
	return r
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func sum(m map[string]float64, name string) float64 {
	t := 0.0
	for k, v := range m {
		if strings.HasPrefix(k, name+"{") {
			t += v
		}
	}
	return t
}

// label reads one label's value from a sample's printed name.
func label(sample, name string) string {
	_, rest, ok := strings.Cut(sample, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

func report(t *testing.T, r row) {
	t.Logf("N=%d: window %.0f s, %.2f MiB/s, %.3f GiB; metastore %.1f writes/s, %.0f writes/GiB; slices (writes/s) %v; peak RSS %.0f MiB; takeover %v",
		r.n, r.windowSecs, r.mibps, r.gib, r.total()/r.windowSecs, r.total()/r.gib, round(r.slices), r.peakRSS, r.takeover.Round(time.Millisecond))
	keys := make([]string, 0, len(r.writes))
	for k, v := range r.writes {
		if v > 0 {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool { return r.writes[keys[i]] > r.writes[keys[j]] })
	for _, k := range keys {
		t.Logf("N=%d:   writes %-32s %8.0f  %7.2f/s  %9.0f/GiB", r.n, k, r.writes[k], r.writes[k]/r.windowSecs, r.writes[k]/r.gib)
	}
	okeys := make([]string, 0, len(r.auditorObjects))
	for k, v := range r.auditorObjects {
		if v > 0 {
			okeys = append(okeys, k)
		}
	}
	slices.Sort(okeys)
	for _, k := range okeys {
		t.Logf("N=%d:   auditor objects %-24s %8.0f  %9.0f/GiB", r.n, k, r.auditorObjects[k], r.auditorObjects[k]/r.gib)
	}
	t.Logf("N=%d:   star objects %.0f/GiB; reclaimed objects %.0f", r.n, r.starObjects/r.gib, r.reclaimed)
}

func round(xs []float64) []string {
	out := make([]string, len(xs))
	for i, x := range xs {
		out[i] = strconv.FormatFloat(x, 'f', 1, 64)
	}
	return out
}

// table prints the docs/bench.md table: per N, per writer, ratios to N=1.
func table(t *testing.T, rows []row) {
	writers := map[string]bool{}
	for _, r := range rows {
		for w, v := range r.byWriter() {
			if v > 0 {
				writers[w] = true
			}
		}
	}
	ws := make([]string, 0, len(writers))
	for w := range writers {
		ws = append(ws, w)
	}
	slices.Sort(ws)
	var one *row
	for i := range rows {
		if rows[i].n == 1 {
			one = &rows[i]
		}
	}
	var sb strings.Builder
	sb.WriteString("\n| N | window s | MiB/s | writes/s | writes/GiB | × N = 1 |")
	for _, w := range ws {
		sb.WriteString(" " + w + " /GiB |")
	}
	sb.WriteString(" auditor object requests/GiB | peak RSS MiB | takeover |\n|---:|---:|---:|---:|---:|---:|")
	for range ws {
		sb.WriteString("---:|")
	}
	sb.WriteString("---:|---:|---:|\n")
	for _, r := range rows {
		ratio := "–"
		if one != nil && one.total() > 0 {
			ratio = fmt.Sprintf("%.2f", (r.total()/r.gib)/(one.total()/one.gib))
		}
		fmt.Fprintf(&sb, "| %d | %.0f | %.2f | %.1f | %.0f | %s |", r.n, r.windowSecs, r.mibps, r.total()/r.windowSecs, r.total()/r.gib, ratio)
		bw := r.byWriter()
		for _, w := range ws {
			fmt.Fprintf(&sb, " %.0f |", bw[w]/r.gib)
		}
		ao := 0.0
		for _, v := range r.auditorObjects {
			ao += v
		}
		to := r.takeover.Round(10 * time.Millisecond).String()
		if r.takeover < 0 {
			to = "> " + takeoverBound.String()
		}
		fmt.Fprintf(&sb, " %.0f | %.0f | %s |\n", ao/r.gib, r.peakRSS, to)
	}
	t.Log(sb.String())
	if one == nil {
		t.Log("no N = 1 row: no ratios")
	}
	for _, r := range rows {
		if one != nil && r.n > 1 && one.total() > 0 {
			x := (r.total() / r.gib) / (one.total() / one.gib)
			if x > 3 || r.total()/r.windowSecs > 100 {
				t.Logf("N=%d misses the goal (≤ 3× N = 1 per GiB, ≤ 100 writes/s): %.2f×, %.1f writes/s", r.n, x, r.total()/r.windowSecs)
			}
		}
	}
}
