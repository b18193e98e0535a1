// Command peerbench runs the peer benchmark (`make bench-peer`): NATS
// JetStream with fsync on every message beside `star dev`, the same
// workloads interleaved run by run; it prints the table of medians and
// ratios and the peak RSS of both servers, and writes the chart.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/star/e2e/internal/benchproc"
	"github.com/starlog/starlog/star/e2e/peerbench"
)

func main() {
	natsBin := flag.String("nats-server", "nats-server", "the nats-server binary")
	starBin := flag.String("star", "bin/star", "the star binary")
	runs := flag.Int("runs", 9, "runs of every workload (medians are quoted)")
	dur := flag.Duration("duration", 5*time.Second, "length of one run of one workload on one system")
	recordSize := flag.Int("record-size", 1024, "message (record body) size in bytes")
	work := flag.String("work", "build/bench-peer", "folder for both servers' data, logs and profiles (wiped first)")
	png := flag.String("png", "docs/bench-peer.png", "chart to write (empty: none)")
	readMsgs := flag.Int("read-messages", 1000000, "messages of the read row's stream (written once on each system, then read from the start every run); 0: no read row")
	only := flag.String("workloads", "", "comma-separated row numbers (1-based; the read row is the last) to run; empty: all")
	profile := flag.Bool("profile", true, "take a CPU profile of star dev during each workload's first run (in --work)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *natsBin, *starBin, *runs, *dur, *recordSize, *readMsgs, *work, *png, *only, *profile); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context, natsBin, starBin string, runs int, dur time.Duration, recordSize, readMsgs int, work, png, only string, profile bool) error {
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	wls := peerbench.Workloads()
	if readMsgs > 0 {
		wls = append(wls, peerbench.ReadWorkload(readMsgs))
	}
	wls, err := benchproc.Rows(wls, only)
	if err != nil {
		return err
	}

	natsAddr, err := benchproc.FreeAddr()
	if err != nil {
		return err
	}
	conf := filepath.Join(work, "nats.conf")
	if err := os.WriteFile(conf, []byte(peerbench.NATSConfig(natsAddr, filepath.Join(work, "nats"))), 0o644); err != nil {
		return err
	}
	natsProc, err := benchproc.Start(work, "nats", natsBin, "-c", conf)
	if err != nil {
		return err
	}
	defer natsProc.Stop()
	if err := benchproc.WaitTCP(ctx, natsAddr); err != nil {
		return fmt.Errorf("nats-server: %w (log: %s)", err, natsProc.LogPath)
	}

	data := filepath.Join(work, "star")
	// S2's per-connection limit of 200 batches/s a stream is a policy, not
	// a cost: JetStream has none, so neither side is throttled.
	starProc, err := benchproc.StartDev(ctx, work, "star", starBin, data, "--append-stream-batches-per-sec", "0")
	if err != nil {
		return err
	}
	defer starProc.Stop()
	starAddr, adminAddr := starProc.Addr, starProc.AdminAddr
	tok, err := os.ReadFile(filepath.Join(data, "dev-token"))
	if err != nil {
		return err
	}
	token := strings.TrimSpace(string(tok))
	cl, err := sdk.New(sdk.Config{AccountEndpoint: "http://" + starAddr, Token: token})
	if err != nil {
		return err
	}
	basin := cl.Basin("starlog-dev")
	starEnv := append(os.Environ(), "S2_ACCOUNT_ENDPOINT=http://"+starAddr, "S2_BASIN=starlog-dev", "S2_ACCESS_TOKEN="+token)

	fmt.Printf("peer benchmark: %d runs × %v per workload and system, %d B messages, interleaved\n", runs, dur, recordSize)
	rows := make([]peerbench.Row, len(wls))
	for i, w := range wls {
		rows[i].Workload = w
		if w.Shape == "read" {
			if err := fillRead(ctx, "nats://"+natsAddr, basin, w.Messages, recordSize); err != nil {
				return err
			}
		}
	}
	for r := range runs {
		for i, w := range wls {
			prefix := fmt.Sprintf("pb-r%d-w%d-", r, i)
			// Alternate which system goes first, so neither always gets
			// the quieter second.
			order := []string{"nats", "star"}
			if r%2 == 1 {
				order = []string{"star", "nats"}
			}
			for _, sys := range order {
				var v float64
				var err error
				switch {
				case w.Shape == "read" && sys == "nats":
					v, err = peerbench.ReadNATS(ctx, "nats://"+natsAddr, readStream, w.Messages)
					rows[i].NATS = append(rows[i].NATS, v)
				case w.Shape == "read":
					v, err = peerbench.ReadStar(ctx, basin.Stream(readStream), w.Messages)
					rows[i].Star = append(rows[i].Star, v)
				case sys == "nats":
					v, err = peerbench.RunNATS(ctx, "nats://"+natsAddr, strings.ReplaceAll(prefix, "-", "_"), w, recordSize, dur)
					rows[i].NATS = append(rows[i].NATS, v)
				default:
					var prof string
					if profile && r == 0 {
						prof = filepath.Join(work, fmt.Sprintf("star-cpu-w%d.pprof", i+1))
					}
					v, err = runStar(ctx, starBin, starEnv, w, recordSize, dur, prefix, adminAddr, prof)
					rows[i].Star = append(rows[i].Star, v)
					deleteStreams(ctx, basin, prefix, w.Producers)
				}
				if err != nil {
					return fmt.Errorf("run %d, %s, %s: %w", r+1, w.Name, sys, err)
				}
				if w.Shape == "read" {
					fmt.Printf("run %d  %-30s %-5s %10.0f msg/s (%.1f MiB/s of bodies)\n", r+1, w.Name, sys, v, v*float64(recordSize)/(1<<20))
				} else {
					fmt.Printf("run %d  %-30s %-5s %10.0f msg/s\n", r+1, w.Name, sys, v)
				}
			}
		}
	}
	fmt.Println()
	peerbench.WriteTable(os.Stdout, rows)
	fmt.Printf("\npeak RSS: nats-server %s, star dev %s\n", peakRSS(natsProc.Cmd.Process.Pid), peakRSS(starProc.Cmd.Process.Pid))
	if png != "" {
		title := fmt.Sprintf("star dev vs NATS JetStream (fsync always): %d B messages, medians of %d runs", recordSize, runs)
		if err := peerbench.WriteChart(png, title, rows); err != nil {
			return err
		}
		fmt.Println("chart:", png)
	}
	return nil
}

// readStream names the read row's stream on both systems.
const readStream = "pb_read"

// fillRead writes the read row's stream on both systems (star first: it
// is the quicker) and reports how long each took.
func fillRead(ctx context.Context, natsURL string, basin *sdk.Basin, n, recordSize int) error {
	t0 := time.Now()
	if err := peerbench.FillStar(ctx, basin, readStream, n, recordSize); err != nil {
		return fmt.Errorf("fill the read row's star stream: %w", err)
	}
	ts := time.Since(t0)
	t0 = time.Now()
	if err := peerbench.FillNATS(ctx, natsURL, readStream, n, recordSize); err != nil {
		return fmt.Errorf("fill the read row's JetStream stream: %w", err)
	}
	tn := time.Since(t0)
	fmt.Printf("read row: wrote %d messages once on each system (not a row): JetStream %.1fs (%.0f msg/s, %d async publishes pending), star %.1fs (%.0f msg/s, unary batches of %d, %d in flight)\n",
		n, tn.Seconds(), float64(n)/tn.Seconds(), peerbench.FillNATSPending, ts.Seconds(), float64(n)/ts.Seconds(), api.MaxBatchRecords, peerbench.FillStarBatches)
	return nil
}

// runStar runs one `star bench` of w and returns its acked records per
// second; with prof set it takes a CPU profile of the star meanwhile.
func runStar(ctx context.Context, starBin string, env []string, w peerbench.Workload, recordSize int, dur time.Duration, prefix, adminAddr, prof string) (float64, error) {
	args := append(w.StarArgs(recordSize), "--duration", dur.String(), "--stream-prefix", prefix)
	cmd := exec.CommandContext(ctx, starBin, args...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	profDone := make(chan error, 1)
	if prof != "" {
		go func() {
			profDone <- benchproc.CPUProfile(ctx, adminAddr, 500*time.Millisecond, max(dur-time.Second, time.Second), prof)
		}()
	} else {
		profDone <- nil
	}
	err := cmd.Run()
	if perr := <-profDone; perr != nil {
		log.Printf("profile %s: %v", prof, perr)
	}
	if err != nil {
		return 0, fmt.Errorf("star %s: %w: %s", strings.Join(args, " "), err, stderr.String())
	}
	var res struct {
		Append struct {
			RecordsPerSec float64 `json:"records_per_s"`
		} `json:"append"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		return 0, fmt.Errorf("star bench output: %w: %q", err, stdout.String())
	}
	return res.Append.RecordsPerSec, nil
}

// deleteStreams drops a run's streams so the data folder does not grow
// with every run (the dev auditor reclaims their objects).
func deleteStreams(ctx context.Context, b *sdk.Basin, prefix string, n int) {
	for i := range n {
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := b.DeleteStream(dctx, fmt.Sprintf("%s%d", prefix, i)); err != nil {
			log.Printf("delete stream %s%d: %v", prefix, i, err)
		}
		cancel()
	}
}

// peakRSS is a process's high-water resident set (VmHWM).
func peakRSS(pid int) string {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			if err != nil {
				return strings.TrimSpace(v)
			}
			return fmt.Sprintf("%.0f MiB", kb/1024)
		}
	}
	return "unknown"
}
