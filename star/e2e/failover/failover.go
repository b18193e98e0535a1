// Package failover measures failover time (issue 6): from `kill -9` of a
// stream's leader to the first acknowledged append through its successor,
// with the leader's backlog of released-but-unabsorbed flights at a chosen
// size when it dies.
//
// Two `star serve` processes, a and b, share one SQLite metastore and one
// directory object store. Each kill uses a fresh stream that a leads (its
// first append goes through a). To leave a backlog of B flights, a runs
// with --s3-chain-backlog-flights B and tiny flights (1 KiB target,
// 1 ms flush interval), its metastore is slowed through its dev fault
// control (--dev-fault-listen: the absorb writes refs to the metastore, so
// released flights pile up unabsorbed), and producers append through a
// until a's backlog reaches B (publishing stalls at the budget, or the
// starlog_backlog_flights gauge reads about B). Then a is
// killed with SIGKILL and a client appends through b in a retry loop until
// b acknowledges one: b must wait until a's last heartbeat is --dead-after
// old, take the lease, and run the open gate's settle of a's chain (fence,
// walk and absorb the backlog, garbage probe) before it serves. Then a
// restarts (a new incarnation) for the next kill.
//
// Each kill is split into the dead-after wait (from the kill until a's
// last registry heartbeat is --dead-after old, read from the metastore),
// b's gate settle (its starlog_leader_gate_settle_duration_seconds), and
// the rest (noticing, the lease CAS, the first flight). The backlog b
// actually settled is read from a's chain rows: the cut b's fence found
// minus a's absorb checkpoint at the kill.
//
// TestFailoverBench drives it (make failover-bench); the figures are in
// docs/bench.md.
package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/sqlite"
	"github.com/starlog/starlog/shared/sdk"
)

// Options configure a run. Zero values take the defaults.
type Options struct {
	// Binary is the star binary.
	Binary string
	// Dir holds the metastore file and the object directory.
	Dir string
	// Kills per backlog level.
	Kills int
	// Backlogs are the backlog levels in flights (0: no slowing, light
	// load). Default 0, 100, 1000.
	Backlogs []int
	// DeadAfter and Heartbeat are both stars' --dead-after and
	// --registry-heartbeat (default 2 s and 100 ms).
	DeadAfter, Heartbeat time.Duration
	// MetaLatency is added to every metastore call of the leader while
	// its backlog builds (default 300 ms). It must stay well below
	// DeadAfter/4: the leader's own heartbeats go through it, and a star
	// whose heartbeat is DeadAfter/2 old stops serving.
	MetaLatency time.Duration
	// BucketLatency is added to every request of both stars on the
	// Standard bucket (default none: the directory store answers in well
	// under a millisecond, S3 Standard in tens).
	BucketLatency time.Duration
	// Producers append concurrently through the leader while the backlog
	// builds (default 32), each batch one record of RecordBytes (default
	// 1000: with the 1 KiB flight target every batch is its own flight).
	Producers   int
	RecordBytes int
	// Fill bounds the wait for the backlog to reach its level (default
	// 90 s); the kill then happens at whatever backlog there is.
	Fill time.Duration
	// Logf reports progress (nil: none).
	Logf func(format string, args ...any)
}

func (o *Options) defaults() {
	if len(o.Backlogs) == 0 {
		o.Backlogs = []int{0, 100, 1000}
	}
	if o.Kills <= 0 {
		o.Kills = 1
	}
	if o.DeadAfter <= 0 {
		o.DeadAfter = 2 * time.Second
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = 100 * time.Millisecond
	}
	if o.MetaLatency <= 0 {
		o.MetaLatency = 300 * time.Millisecond
	}
	if o.Producers <= 0 {
		o.Producers = 32
	}
	if o.RecordBytes <= 0 {
		o.RecordBytes = 1000
	}
	if o.Fill <= 0 {
		o.Fill = 90 * time.Second
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
}

// Sample is one kill.
type Sample struct {
	Level, Kill int
	// Gauge is the leader's starlog_backlog_flights last read before the
	// kill (set as each absorb pass starts, so it lags); Walked is the
	// backlog the successor settled: its fence's cut minus the leader's
	// absorb checkpoint at the kill, the exact backlog at the kill.
	Gauge  float64
	Walked int64
	// Fill is how long the backlog took to build.
	Fill time.Duration
	// Total is kill → first acknowledged append through the successor.
	Total time.Duration
	// DeadWait is kill → the leader's last heartbeat + dead-after (the
	// earliest a peer may presume it dead); Settle is the successor's
	// open-gate settle.
	DeadWait, Settle time.Duration
	// Attempts the probe made through the successor.
	Attempts int
}

// bench is one run's state.
type bench struct {
	o    Options
	a, b *star
	ms   meta.Store
}

const basin = "failover-bench"

var discardLogger = slog.New(slog.DiscardHandler)

// Run starts the two stars, runs Kills kills at every backlog level and
// returns the samples in order.
func Run(ctx context.Context, o Options) ([]Sample, error) {
	o.defaults()
	if o.Binary == "" || o.Dir == "" {
		return nil, errors.New("failover: Binary and Dir are required")
	}
	objects := filepath.Join(o.Dir, "objects")
	if err := os.MkdirAll(objects, 0o755); err != nil {
		return nil, err
	}
	common := []string{
		"--sqlite", filepath.Join(o.Dir, "meta.db"), "--fs-root", objects,
		"--registry-heartbeat", o.Heartbeat.String(), "--dead-after", o.DeadAfter.String(),
		"--s3-flush-interval", "1ms", "--s3-target-flight-kib", "1",
		"--shutdown-timeout", "5s", "--log-level", "warn",
	}
	bn := &bench{o: o}
	for _, id := range []string{"a", "b"} {
		listen, err := freeAddr()
		if err != nil {
			return nil, err
		}
		faults, err := freeAddr()
		if err != nil {
			return nil, err
		}
		s := &star{id: id, bin: o.Binary, common: common, listen: listen, faults: faults}
		if id == "a" {
			bn.a = s
		} else {
			bn.b = s
		}
	}
	defer bn.b.stop(10 * time.Second)
	defer bn.a.stop(10 * time.Second)
	if err := bn.start(ctx, bn.a, levelFlags(o.Backlogs[0])...); err != nil {
		return nil, err
	}
	if err := bn.start(ctx, bn.b); err != nil {
		return nil, err
	}
	ms, err := sqlite.Open(ctx, filepath.Join(o.Dir, "meta.db"))
	if err != nil {
		return nil, fmt.Errorf("failover: open the shared metastore: %w", err)
	}
	defer ms.Close()
	bn.ms = ms
	ca := bn.client(bn.a, 30*time.Second)
	if _, err := ca.CreateBasin(ctx, basin, &api.BasinConfig{CreateStreamOnAppend: true}); err != nil {
		return nil, fmt.Errorf("failover: create basin: %w", err)
	}

	var out []Sample
	for li, level := range o.Backlogs {
		for k := range o.Kills {
			s, err := bn.kill(ctx, level, k)
			if err != nil {
				return out, fmt.Errorf("failover: backlog %d, kill %d: %w\n--- a:\n%s\n--- b:\n%s", level, k, err, bn.a.out.last(3000), bn.b.out.last(3000))
			}
			out = append(out, s)
			o.Logf("backlog %4d kill %2d: gauge %4.0f walked %4d (built in %v); first ack through b %v after the kill: dead-after wait %v, settle %v, rest %v (%d attempts)",
				level, k, s.Gauge, s.Walked, s.Fill.Round(time.Millisecond), s.Total.Round(time.Millisecond),
				s.DeadWait.Round(time.Millisecond), s.Settle.Round(time.Millisecond),
				(s.Total - s.DeadWait - s.Settle).Round(time.Millisecond), s.Attempts)
			next := level
			if k == o.Kills-1 {
				if li+1 == len(o.Backlogs) {
					break // the last kill
				}
				next = o.Backlogs[li+1]
			}
			if err := bn.start(ctx, bn.a, levelFlags(next)...); err != nil {
				return out, err
			}
		}
	}
	return out, nil
}

// start starts s and sets its Standard bucket's latency.
func (bn *bench) start(ctx context.Context, s *star, flags ...string) error {
	if err := s.start(ctx, flags...); err != nil {
		return err
	}
	if bn.o.BucketLatency <= 0 {
		return nil
	}
	return s.setFaults(ctx, fmt.Sprintf(`{"buckets":{"standard":{"latency_ms":%d}}}`, bn.o.BucketLatency.Milliseconds()))
}

// levelFlags are the leader's flags for a backlog level: its budget is the
// level, so the backlog stops growing there.
func levelFlags(level int) []string {
	if level <= 0 {
		return nil
	}
	return []string{"--s3-chain-backlog-flights", strconv.Itoa(level)}
}

// client is an SDK client of s that never retries by itself.
func (bn *bench) client(s *star, timeout time.Duration) *sdk.Client {
	c, err := sdk.New(sdk.Config{
		AccountEndpoint: s.url(),
		Token:           adminToken,
		RequestTimeout:  timeout,
		Retry:           sdk.RetryPolicy{MaxAttempts: 1},
		Logger:          discardLogger,
	})
	if err != nil {
		panic(err) // the config is fixed and valid
	}
	return c
}

func record(body []byte) *api.AppendInput {
	return &api.AppendInput{Records: []api.Record{{Body: body}}}
}

// kill runs one kill at a backlog level on a fresh stream.
func (bn *bench) kill(ctx context.Context, level, k int) (Sample, error) {
	o := bn.o
	s := Sample{Level: level, Kill: k}
	name := fmt.Sprintf("b%d-k%d-%d", level, k, time.Now().UnixNano())
	ca := bn.client(bn.a, 60*time.Second).Basin(basin).Stream(name)
	cb := bn.client(bn.b, 5*time.Second).Basin(basin).Stream(name)

	// a leads the stream: it sees it first.
	if err := retry(ctx, 30*time.Second, func(ctx context.Context) error {
		_, err := ca.Append(ctx, record([]byte("first")))
		return err
	}); err != nil {
		return s, fmt.Errorf("first append through a: %w", err)
	}

	pctx, stopProducers := context.WithCancel(ctx)
	defer stopProducers()
	var wg sync.WaitGroup
	var acked atomic.Int64
	body := []byte(strings.Repeat("x", o.RecordBytes))
	producer := func(pause time.Duration) {
		defer wg.Done()
		for pctx.Err() == nil {
			if _, err := ca.Append(pctx, record(body)); err == nil {
				acked.Add(1)
			} else {
				sleep(pctx, 10*time.Millisecond)
			}
			sleep(pctx, pause)
		}
	}
	const (
		gaugeName  = `starlog_backlog_flights{class="standard"}`
		stallsName = `starlog_backlog_stalls_total{class="standard"}`
	)
	// The gauge is set as each absorb pass starts, so at a full budget it
	// reads the level minus the flights the last pass absorbed; the stall
	// counter says when publishing blocked at the budget.
	backlog := func() (gauge, stalls float64, err error) {
		m, err := bn.a.metrics(ctx, gaugeName, stallsName)
		return m[gaugeName], m[stallsName], err
	}
	start := time.Now()
	if level == 0 {
		// Light load: one producer, an append every 20 ms, for a second.
		wg.Add(1)
		go producer(20 * time.Millisecond)
		sleep(ctx, time.Second)
	} else {
		if err := bn.a.setFaults(ctx, fmt.Sprintf(`{"meta":{"latency_ms":%d}}`, o.MetaLatency.Milliseconds())); err != nil {
			return s, err
		}
		wg.Add(o.Producers)
		for range o.Producers {
			go producer(0)
		}
		_, stalls0, err := backlog()
		if err != nil {
			return s, err
		}
		for deadline := time.Now().Add(o.Fill); ; {
			g, stalls, err := backlog()
			if err != nil {
				return s, err
			}
			s.Gauge = g
			// At the budget (a new stall) the backlog stays full until the
			// running pass, slowed by the metastore, returns tokens.
			if stalls > stalls0 || g >= 0.9*float64(level) {
				break
			}
			if time.Now().After(deadline) {
				o.Logf("backlog %d kill %d: the backlog reached only %.0f flights in %v (%d appends acked); killing anyway", level, k, g, o.Fill, acked.Load())
				break
			}
			sleep(ctx, 25*time.Millisecond)
		}
	}
	s.Fill = time.Since(start)
	settleBefore, err := bn.b.metrics(ctx, "starlog_leader_gate_settle_duration_seconds_sum", "starlog_leader_gate_settle_duration_seconds_count")
	if err != nil {
		return s, err
	}

	killed := bn.a.kill()
	stopProducers()
	ckpt, epoch, err := bn.checkpoint(ctx)
	if err != nil {
		return s, err
	}
	reg, _, ok, err := leader.ReadRegistration(ctx, bn.ms, "a")
	if err != nil || !ok {
		return s, fmt.Errorf("read a's registration: ok %v, %v", ok, err)
	}
	s.DeadWait = max(0, time.UnixMilli(reg.Heartbeat).Add(o.DeadAfter).Sub(killed))

	// The probe: append through b until b acknowledges one.
	var acked1 time.Time
	for {
		s.Attempts++
		_, err := cb.Append(ctx, record([]byte("probe")))
		if err == nil {
			acked1 = time.Now()
			break
		}
		if ctx.Err() != nil {
			return s, ctx.Err()
		}
		if time.Since(killed) > 2*time.Minute {
			return s, fmt.Errorf("b acknowledged nothing within 2 minutes of the kill: %w", err)
		}
		sleep(ctx, 5*time.Millisecond)
	}
	s.Total = acked1.Sub(killed)
	wg.Wait()

	settleAfter, err := bn.b.metrics(ctx, "starlog_leader_gate_settle_duration_seconds_sum", "starlog_leader_gate_settle_duration_seconds_count")
	if err != nil {
		return s, err
	}
	if n := settleAfter["starlog_leader_gate_settle_duration_seconds_count"] - settleBefore["starlog_leader_gate_settle_duration_seconds_count"]; n >= 1 {
		sum := settleAfter["starlog_leader_gate_settle_duration_seconds_sum"] - settleBefore["starlog_leader_gate_settle_duration_seconds_sum"]
		s.Settle = time.Duration(sum * float64(time.Second))
	}
	if rec, err := bn.epoch(ctx, epoch); err == nil && rec.Cut != nil && *rec.Cut >= ckpt {
		s.Walked = int64(*rec.Cut - ckpt)
	} else {
		s.Walked = -1
	}
	return s, nil
}

// checkpoint reads a's Standard chain head epoch and its absorb checkpoint.
func (bn *bench) checkpoint(ctx context.Context) (ckpt, epoch uint64, err error) {
	k := meta.HeadKey("a", meta.Standard)
	it, err := bn.ms.Get(ctx, k.PK, k.SK)
	if err != nil {
		return 0, 0, fmt.Errorf("read a's chain head: %w", err)
	}
	var h meta.Head
	if err := meta.Decode(it.Val, &h); err != nil {
		return 0, 0, err
	}
	rec, err := bn.epoch(ctx, h.Epoch)
	if err != nil {
		return 0, 0, err
	}
	return rec.Checkpoint, h.Epoch, nil
}

func (bn *bench) epoch(ctx context.Context, epoch uint64) (meta.Epoch, error) {
	k := meta.EpochKey("a", meta.Standard, epoch)
	it, err := bn.ms.Get(ctx, k.PK, k.SK)
	if err != nil {
		return meta.Epoch{}, fmt.Errorf("read a's epoch %d: %w", epoch, err)
	}
	var rec meta.Epoch
	err = meta.Decode(it.Val, &rec)
	return rec, err
}

// retry calls fn until it succeeds or d passes.
func retry(ctx context.Context, d time.Duration, fn func(context.Context) error) error {
	deadline := time.Now().Add(d)
	for {
		err := fn(ctx)
		if err == nil || ctx.Err() != nil || time.Now().After(deadline) {
			return err
		}
		sleep(ctx, 20*time.Millisecond)
	}
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Summary is one backlog level's figures.
type Summary struct {
	Level, Kills                   int
	GaugeP50, WalkedP50, WalkedMax float64
	P50, P99, Max                  time.Duration
	DeadWaitP50, SettleP50         time.Duration
	SettleP99                      time.Duration
	// Takeover is the failover time less the dead-after wait: from when a
	// peer may presume the leader dead to the first ack.
	TakeoverP50, TakeoverP99 time.Duration
	// SettleShare is the settle's share of the summed failover times.
	SettleShare float64
}

// Summarize groups samples by level, in the order levels first appear.
func Summarize(samples []Sample) []Summary {
	var levels []int
	by := map[int][]Sample{}
	for _, s := range samples {
		if _, ok := by[s.Level]; !ok {
			levels = append(levels, s.Level)
		}
		by[s.Level] = append(by[s.Level], s)
	}
	var out []Summary
	for _, l := range levels {
		ss := by[l]
		pick := func(f func(Sample) float64) []float64 {
			v := make([]float64, len(ss))
			for i, s := range ss {
				v[i] = f(s)
			}
			slices.Sort(v)
			return v
		}
		dur := func(v []float64, q float64) time.Duration { return time.Duration(quantile(v, q)) }
		total := pick(func(s Sample) float64 { return float64(s.Total) })
		settle := pick(func(s Sample) float64 { return float64(s.Settle) })
		walked := pick(func(s Sample) float64 { return float64(s.Walked) })
		takeover := pick(func(s Sample) float64 { return float64(s.Total - s.DeadWait) })
		var sumTotal, sumSettle float64
		for _, s := range ss {
			sumTotal += float64(s.Total)
			sumSettle += float64(s.Settle)
		}
		out = append(out, Summary{
			Level: l, Kills: len(ss),
			GaugeP50:  quantile(pick(func(s Sample) float64 { return s.Gauge }), 0.5),
			WalkedP50: quantile(walked, 0.5), WalkedMax: walked[len(walked)-1],
			P50: dur(total, 0.5), P99: dur(total, 0.99), Max: time.Duration(total[len(total)-1]),
			DeadWaitP50: dur(pick(func(s Sample) float64 { return float64(s.DeadWait) }), 0.5),
			SettleP50:   dur(settle, 0.5), SettleP99: dur(settle, 0.99),
			TakeoverP50: dur(takeover, 0.5), TakeoverP99: dur(takeover, 0.99),
			SettleShare: sumSettle / max(sumTotal, 1),
		})
	}
	return out
}

// quantile is the nearest-rank quantile of sorted v (with 20 samples the
// p99 is the maximum).
func quantile(v []float64, q float64) float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(v)))) - 1
	return v[min(max(i, 0), len(v)-1)]
}

// WriteTable prints the summaries as a Markdown table.
func WriteTable(w io.Writer, sums []Summary) {
	ms := func(d time.Duration) string {
		return strconv.FormatInt(d.Round(time.Millisecond).Milliseconds(), 10) + " ms"
	}
	fmt.Fprintln(w, "| backlog (budget) | backlog at the kill, p50 / max | kills | p50 | p99 | max | dead-after wait p50 | presumed dead → ack p50 / p99 | settle p50 / p99 | settle share |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, s := range sums {
		level := strconv.Itoa(s.Level)
		if s.Level == 0 {
			level = "0 (light load, no slowing)"
		}
		fmt.Fprintf(w, "| %s | %.0f / %.0f | %d | %s | %s | %s | %s | %s / %s | %s / %s | %.0f%% |\n",
			level, s.WalkedP50, s.WalkedMax, s.Kills, ms(s.P50), ms(s.P99), ms(s.Max),
			ms(s.DeadWaitP50), ms(s.TakeoverP50), ms(s.TakeoverP99),
			ms(s.SettleP50), ms(s.SettleP99), 100*s.SettleShare)
	}
}
