// Package density measures the whole `star dev` (the star and its
// in-process auditor, on their default flags) against the number of
// streams it is written to: metastore writes by writer and row kind,
// the auditor's object requests, peak RSS and a kill -9 takeover
// (issue 31 item 4; figures in docs/bench.md, "Density of the whole star").
package density

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/starlog/starlog/shared/poll"
)

// devStar is one `star dev` process on a data folder, restartable on the
// same addresses.
type devStar struct {
	bin, data        string
	listen, internal string
	logPath          string
	cmd              *exec.Cmd
	done             chan struct{}
	extra            []string
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start runs the star; it does not wait for /health (the takeover times
// from here).
func (s *devStar) start() error {
	args := append([]string{"dev", "--data", s.data, "--listen", s.listen, "--internal-listen", s.internal,
		"--kafka-listen", "127.0.0.1:0", "--shutdown-timeout", "5s"}, s.extra...)
	cmd := exec.Command(s.bin, args...)
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a ^C of the bench does not reach it
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start star dev: %w", err)
	}
	s.cmd, s.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(s.done) }()
	return nil
}

// waitHealthy waits for /health, bounded.
func (s *devStar) waitHealthy(within time.Duration) error {
	hc := &http.Client{Timeout: time.Second}
	return poll.Wait(within, func() error {
		select {
		case <-s.done:
			return fmt.Errorf("star dev exited (log %s)", s.logPath)
		default:
		}
		res, err := hc.Get("http://" + s.listen + "/health")
		if err != nil {
			return err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != 200 {
			return fmt.Errorf("health %d", res.StatusCode)
		}
		return nil
	})
}

// kill sends SIGKILL and waits for the exit.
func (s *devStar) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-s.done:
	case <-time.After(30 * time.Second):
	}
	s.cmd = nil
}

// stop asks for a clean exit, then kills what remains.
func (s *devStar) stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		s.cmd = nil
	case <-time.After(20 * time.Second):
		s.kill()
	}
}

func (s *devStar) token() (string, error) {
	b, err := os.ReadFile(filepath.Join(s.data, "dev-token"))
	return strings.TrimSpace(string(b)), err
}

// peakRSS is the process's high-water resident set (VmHWM) in MiB.
func (s *devStar) peakRSS() float64 {
	if s.cmd == nil {
		return 0
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", s.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb / 1024
		}
	}
	return 0
}

// scrape reads the counters of /metrics this bench needs: every sample
// whose name is in names, keyed by its name and labels as printed.
func (s *devStar) scrape(names ...string) (map[string]float64, error) {
	hc := &http.Client{Timeout: 10 * time.Second}
	res, err := hc.Get("http://" + s.internal + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		for _, n := range names {
			if strings.HasPrefix(line, n+"{") || strings.HasPrefix(line, n+" ") {
				i := strings.LastIndexByte(line, ' ')
				v, err := strconv.ParseFloat(line[i+1:], 64)
				if err == nil {
					out[line[:i]] = v
				}
			}
		}
	}
	return out, sc.Err()
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// errorCounts counts errors by message (cut to 200 bytes) for a report.
type errorCounts struct {
	mu sync.Mutex
	n  map[string]int
}

func (c *errorCounts) note(err error) {
	msg := err.Error()
	if len(msg) > 200 {
		msg = msg[:200]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int{}
	}
	c.n[msg]++
}

// top is the k most frequent messages with their counts.
func (c *errorCounts) top(k int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	msgs := make([]string, 0, len(c.n))
	for m := range c.n {
		msgs = append(msgs, m)
	}
	slices.SortFunc(msgs, func(a, b string) int { return c.n[b] - c.n[a] })
	var out []string
	for _, m := range msgs[:min(k, len(msgs))] {
		out = append(out, fmt.Sprintf("%d× %q", c.n[m], m))
	}
	return strings.Join(out, "; ")
}
