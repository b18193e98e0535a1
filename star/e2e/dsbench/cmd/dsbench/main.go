// Command dsbench runs the Durable Streams benchmark (`make bench-ds`):
// `star dev` beside the protocol's reference server in file mode, the
// same rows interleaved run by run; it prints each run with the load
// average, the medians, the ratios, and each server's CPU per append.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/starlog/starlog/star/e2e/dsbench"
	"github.com/starlog/starlog/star/e2e/internal/benchproc"
	"github.com/starlog/starlog/star/e2e/peerbench"
)

func main() {
	starBin := flag.String("star", "bin/star", "the star binary")
	server := flag.String("server", "", "the @durable-streams/server package folder (its node_modules copy)")
	node := flag.String("node", "node", "the node binary")
	runs := flag.Int("runs", 5, "runs of every row on each server (medians are quoted)")
	dur := flag.Duration("duration", 5*time.Second, "length of one run")
	size := flag.Int("size", 1024, "append body bytes")
	work := flag.String("work", "build/bench-ds", "folder for both servers' data, logs and profiles (wiped first)")
	only := flag.String("workloads", "", "comma-separated row numbers (1-based) to run; empty: all")
	profile := flag.Bool("profile", true, "take a CPU profile of the star during each row's first run (in --work)")
	flag.Parse()
	if *server == "" {
		log.Fatal("--server: the @durable-streams/server folder is required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *starBin, *node, *server, *runs, *dur, *size, *work, *only, *profile); err != nil {
		log.Fatal(err)
	}
}

// refServer starts the reference server in file mode (an fdatasync per
// append) on a loopback port.
const refServer = `const { DurableStreamTestServer } = require(process.env.DS_SERVER);
const s = new DurableStreamTestServer({ host: "127.0.0.1", port: +process.env.DS_PORT, dataDir: process.env.DS_DATA });
s.start().then(() => console.log("listening on", s.baseUrl));
`

type side struct {
	name  string
	base  string // the protocol's root URL
	pid   int
	rates [][]float64 // by row
	cpu   [][]float64 // CPU seconds per append, by row
}

func run(ctx context.Context, starBin, nodeBin, server string, runs int, dur time.Duration, size int, work, only string, profile bool) error {
	if err := os.RemoveAll(work); err != nil {
		return err
	}
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	wls := dsbench.Workloads()
	wls, err := benchproc.Rows(wls, only)
	if err != nil {
		return err
	}

	refAddr, err := benchproc.FreeAddr()
	if err != nil {
		return err
	}
	script := filepath.Join(work, "ref-server.cjs")
	if err := os.WriteFile(script, []byte(refServer), 0o644); err != nil {
		return err
	}
	abs, err := filepath.Abs(server)
	if err != nil {
		return err
	}
	_, port, _ := strings.Cut(refAddr, ":")
	os.Setenv("DS_SERVER", abs)
	os.Setenv("DS_PORT", port)
	os.Setenv("DS_DATA", filepath.Join(work, "ref"))
	ref, err := benchproc.Start(work, "ref", nodeBin, script)
	if err != nil {
		return err
	}
	defer ref.Stop()
	if err := benchproc.WaitTCP(ctx, refAddr); err != nil {
		return fmt.Errorf("reference server: %w (log: %s)", err, ref.LogPath)
	}

	starProc, err := benchproc.StartDev(ctx, work, "star", starBin, filepath.Join(work, "star"), "--open", "--kafka-listen", "")
	if err != nil {
		return err
	}
	defer starProc.Stop()
	starAddr, adminAddr := starProc.Addr, starProc.AdminAddr

	sides := []*side{
		{name: "reference", base: "http://" + refAddr, pid: ref.Cmd.Process.Pid},
		{name: "star", base: "http://" + starAddr + "/ds", pid: starProc.Cmd.Process.Pid},
	}
	for _, s := range sides {
		s.rates, s.cpu = make([][]float64, len(wls)), make([][]float64, len(wls))
	}
	c := dsbench.Client()
	fmt.Printf("Durable Streams benchmark: %d runs × %v per row and server, %d B appends, interleaved\n", runs, dur, size)
	for r := range runs {
		for i, w := range wls {
			order := sides
			if r%2 == 1 {
				order = []*side{sides[1], sides[0]}
			}
			for _, s := range order {
				prefix := fmt.Sprintf("b-r%d-w%d-", r, i)
				profDone := make(chan error, 1)
				if profile && r == 0 && s.name == "star" {
					prof := filepath.Join(work, fmt.Sprintf("star-cpu-w%d.pprof", i+1))
					go func() {
						profDone <- benchproc.CPUProfile(ctx, adminAddr, 500*time.Millisecond, max(dur-time.Second, time.Second), prof)
					}()
				} else {
					profDone <- nil
				}
				cpu0 := cpuSeconds(s.pid)
				t0 := time.Now()
				v, err := dsbench.Run(ctx, c, s.base, prefix, w, size, dur)
				cpu := cpuSeconds(s.pid) - cpu0
				if perr := <-profDone; perr != nil {
					log.Printf("profile: %v", perr)
				}
				if err != nil {
					return fmt.Errorf("run %d, %s, %s: %w", r+1, w.Name, s.name, err)
				}
				n := v * time.Since(t0).Seconds()
				s.rates[i] = append(s.rates[i], v)
				s.cpu[i] = append(s.cpu[i], cpu/n)
				fmt.Printf("run %d  %-32s %-9s %8.0f appends/s  CPU %.3f ms/append  load %s\n", r+1, w.Name, s.name, v, 1e3*cpu/n, loadavg())
			}
		}
	}
	fmt.Println()
	fmt.Println("| workload | reference appends/s | star appends/s | star / reference | CPU ms/append (reference / star) |")
	fmt.Println("|---|---|---|---|---|")
	for i, w := range wls {
		rf, st := peerbench.Median(sides[0].rates[i]), peerbench.Median(sides[1].rates[i])
		fmt.Printf("| %s | %.0f | %.0f | %.2f× | %.2f / %.2f |\n", w.Name, rf, st, st/rf,
			1e3*peerbench.Median(sides[0].cpu[i]), 1e3*peerbench.Median(sides[1].cpu[i]))
	}
	return nil
}

// cpuSeconds is a process's user plus system CPU time so far.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th of the whole line.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / 100 // USER_HZ
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}
