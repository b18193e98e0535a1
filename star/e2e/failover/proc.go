package failover

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/starlog/starlog/star/auth"
)

// star is one `star serve` process on fixed addresses, so a restart (a new
// incarnation) serves the same endpoint and the same fault control.
type star struct {
	id     string
	bin    string
	common []string // flags of every start
	listen string   // host:port of the API
	faults string   // host:port of the dev fault control

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  *tail
}

func (s *star) url() string      { return "http://" + s.listen }
func (s *star) faultURL() string { return "http://" + s.faults + "/faults" }

// start runs the star with extra flags and waits until /health answers.
func (s *star) start(ctx context.Context, extra ...string) error {
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return fmt.Errorf("star %s already running", s.id)
	}
	args := append([]string{"serve",
		"--star-id", s.id, "--listen", s.listen, "--address", s.listen,
		"--dev-fault-listen", s.faults,
	}, s.common...)
	args = append(args, extra...)
	cmd := exec.Command(s.bin, args...)
	// No leadership balancer (a flag some builds have; the environment
	// fallback is ignored by a build without it): its handoffs would move
	// streams between the stars during the measurement.
	cmd.Env = append(append(os.Environ(), credentialEnv()...), "STARLOG_BALANCE_EVERY=0")
	if s.out == nil {
		s.out = &tail{max: 256 << 10}
	}
	cmd.Stdout, cmd.Stderr = s.out, s.out
	// Its own process group: a ^C of the benchmark does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("start star %s: %w", s.id, err)
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	go func() {
		_ = cmd.Wait()
		close(done)
	}()

	hc := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(90 * time.Second)
	for {
		if res, err := hc.Get(s.url() + "/health"); err == nil {
			io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			s.reap(cmd)
			return fmt.Errorf("star %s exited before serving:\n%s", s.id, s.out.last(4000))
		case <-ctx.Done():
			s.kill()
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("star %s not healthy after 90 s:\n%s", s.id, s.out.last(4000))
		}
	}
}

func (s *star) reap(cmd *exec.Cmd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == cmd {
		s.cmd, s.done = nil, nil
	}
}

// kill sends SIGKILL and returns once the process is gone, with the time
// the signal was sent.
func (s *star) kill() time.Time { return s.signal(syscall.SIGKILL, 0) }

// stop sends SIGTERM and kills after grace.
func (s *star) stop(grace time.Duration) { s.signal(syscall.SIGTERM, grace) }

func (s *star) signal(sig syscall.Signal, grace time.Duration) time.Time {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return time.Now()
	}
	at := time.Now()
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		_ = cmd.Process.Kill()
	}
	if sig == syscall.SIGKILL {
		<-done
	} else {
		select {
		case <-done:
		case <-time.After(grace):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	s.reap(cmd)
	return at
}

// metrics reads the star's /metrics and sums, for each filter, the samples
// it matches: a filter is a metric name, optionally with label pairs
// (name{k="v",…}) that a sample must all carry (in any order, among
// others).
func (s *star) metrics(ctx context.Context, filters ...string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url()+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics of %s: %s", s.id, res.Status)
	}
	type filter struct {
		name  string
		pairs []string
	}
	fs := make([]filter, len(filters))
	for i, f := range filters {
		name, labels, _ := strings.Cut(f, "{")
		fs[i].name = name
		for _, p := range strings.Split(strings.TrimSuffix(labels, "}"), ",") {
			if p != "" {
				fs[i].pairs = append(fs[i].pairs, p)
			}
		}
	}
	out := make(map[string]float64, len(filters))
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 {
			continue
		}
		series := line[:sp]
		name, labels, _ := strings.Cut(series, "{")
		for i, f := range fs {
			if name != f.name {
				continue
			}
			ok := true
			for _, p := range f.pairs {
				ok = ok && strings.Contains(labels, p)
			}
			if !ok {
				continue
			}
			v, err := strconv.ParseFloat(line[sp+1:], 64)
			if err != nil {
				return nil, fmt.Errorf("metric line %q: %w", line, err)
			}
			out[filters[i]] += v
		}
	}
	return out, sc.Err()
}

// setFaults sends body to the star's fault control (PUT, or DELETE when
// body is empty).
func (s *star) setFaults(ctx context.Context, body string) error {
	method := http.MethodPut
	if body == "" {
		method = http.MethodDelete
	}
	req, err := http.NewRequestWithContext(ctx, method, s.faultURL(), strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(auth.HeaderInternal, internalCredential())
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("%s fault control of %s: %w", method, s.id, err)
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s fault control of %s %s: %s: %s", method, s.id, body, res.Status, out)
	}
	return nil
}

// freeAddr reserves a loopback port and frees it for a star to take.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// tail keeps the last max bytes written to it.
type tail struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tail) last(n int) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.b.String()
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
