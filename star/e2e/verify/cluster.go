package verify

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// StarSpec says how to run one star process.
type StarSpec struct {
	// Binary is the star binary.
	Binary string
	// Args are the arguments, e.g. dev --data DIR --listen ADDR …; the
	// listen address must be fixed so a restart serves the same endpoint.
	Args []string
	// Env is added to the process's environment.
	Env []string
	// Endpoint is the base URL clients use (http://ADDR).
	Endpoint string
	// ReadyTimeout bounds a start (default 60 s).
	ReadyTimeout time.Duration
	// Health makes a start wait until GET Endpoint/health answers 200
	// (`star serve` prints no banner) instead of for the dev banner.
	Health bool
	// ID is the star id (--star-id), "" when the star picks it.
	ID string
	// FaultControl is the base URL of the star's dev fault control
	// (--dev-fault-listen), "" when it has none.
	FaultControl string
	// LogFile, when set, receives everything every incarnation prints
	// (appended; kept as evidence when a check fails).
	LogFile string
}

// Star is one star process that can be killed and restarted; each start is
// a new incarnation on the same data.
type Star struct {
	spec StarSpec

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	out  *tailBuffer
	// starts counts the incarnations started.
	starts int
	log    *os.File
	// outAt is where the running process's output starts in out.
	outAt int64
	// zombie watches the running process's output for ZombieExit.
	zombie *watchWriter
}

// SaidZombie reports whether the current (or last) process printed
// ZombieExit: it exits because its incarnation was presumed dead or
// deposed.
func (s *Star) SaidZombie() bool {
	s.mu.Lock()
	w := s.zombie
	s.mu.Unlock()
	return w != nil && w.seen.Load()
}

// OutputOfProcess is what the current (or last) process printed, as much
// of it as is kept.
func (s *Star) OutputOfProcess() string {
	s.mu.Lock()
	at := s.outAt
	s.mu.Unlock()
	return s.out.Since(at)
}

// NewStar returns a stopped star.
func NewStar(spec StarSpec) *Star {
	if spec.ReadyTimeout <= 0 {
		spec.ReadyTimeout = 60 * time.Second
	}
	return &Star{spec: spec, out: &tailBuffer{max: 64 << 10}}
}

// Endpoint is the star's base URL.
func (s *Star) Endpoint() string { return s.spec.Endpoint }

// ID is the star's id ("" when the spec did not fix one).
func (s *Star) ID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.spec.ID
}

// FaultControl is the base URL of the star's dev fault control, "" if none.
func (s *Star) FaultControl() string { return s.spec.FaultControl }

// LogFile is where the star's output is kept ("" if only in memory).
func (s *Star) LogFile() string { return s.spec.LogFile }

// Starts is how many times the star was started.
func (s *Star) Starts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.starts
}

// Output is the tail of what the star's processes printed.
func (s *Star) Output() string { return s.out.String() }

var bannerRE = regexp.MustCompile(`serving the S2 API on (http://\S+)`)

// Start runs the star and waits until it prints that it serves (after it
// settled what an earlier incarnation left open).
func (s *Star) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.cmd != nil {
		s.mu.Unlock()
		return errors.New("star already running")
	}
	if s.spec.LogFile != "" && s.log == nil {
		f, err := os.OpenFile(s.spec.LogFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("star log: %w", err)
		}
		s.log = f
	}
	zombie := &watchWriter{marker: []byte(ZombieExit)}
	s.zombie = zombie
	var sink io.Writer = &teeWriter{s.out, zombie}
	if s.log != nil {
		sink = &teeWriter{sink, s.log}
		fmt.Fprintf(s.log, "=== %s: start %d: %s %s\n", time.Now().Format(time.RFC3339Nano), s.starts+1, s.spec.Binary, strings.Join(s.spec.Args, " "))
	}
	cmd := exec.Command(s.spec.Binary, s.spec.Args...)
	cmd.Env = append(os.Environ(), s.spec.Env...)
	cmd.Stderr = sink
	// Its own process group, so a signal to the test does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("star stdout: %w", err)
	}
	s.outAt = s.out.Total()
	if err := cmd.Start(); err != nil {
		s.mu.Unlock()
		return fmt.Errorf("start star: %w", err)
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	s.starts++
	s.mu.Unlock()

	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stdout)
		signalled := s.spec.Health // then pollHealth signals
		for sc.Scan() {
			line := sc.Text()
			sink.Write([]byte(line + "\n"))
			if !signalled && bannerRE.MatchString(line) {
				signalled = true
				close(ready)
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
		// Wait only after stdout is drained (exec's rule for StdoutPipe).
		_ = cmd.Wait()
		close(done)
	}()
	if s.spec.Health {
		go pollHealth(s.spec.Endpoint, ready, done)
	}
	timer := time.NewTimer(s.spec.ReadyTimeout)
	defer timer.Stop()
	select {
	case <-ready:
		return nil
	case <-done:
		s.reap(cmd)
		return fmt.Errorf("star exited before serving: %s", s.out.Last(2000))
	case <-timer.C:
		s.Kill()
		return fmt.Errorf("star not serving after %v: %s", s.spec.ReadyTimeout, s.out.Last(2000))
	case <-ctx.Done():
		s.Kill()
		return ctx.Err()
	}
}

// pollHealth closes ready once GET url/health answers 200, and gives up
// when done closes (the process exited).
func pollHealth(url string, ready, done chan struct{}) {
	c := &http.Client{Timeout: time.Second}
	for {
		if res, err := c.Get(url + "/health"); err == nil {
			_, _ = io.Copy(io.Discard, res.Body)
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				close(ready)
				return
			}
		}
		select {
		case <-done:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Exited reports whether a started process exited without Kill or Stop
// (a crash, or an exit of its own).
func (s *Star) Exited() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// Forget drops a process that exited on its own, so Start can run a new
// incarnation.
func (s *Star) Forget() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	<-done
	s.reap(cmd)
}

// reap forgets cmd once it has exited.
func (s *Star) reap(cmd *exec.Cmd) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == cmd {
		s.cmd, s.done = nil, nil
	}
}

// Kill sends SIGKILL (kill -9) and waits for the process to be gone. A
// stopped star is left alone.
func (s *Star) Kill() error { return s.signal(syscall.SIGKILL, 0) }

// Stop sends SIGTERM and waits up to grace, then kills.
func (s *Star) Stop(grace time.Duration) error { return s.signal(syscall.SIGTERM, grace) }

func (s *Star) signal(sig syscall.Signal, grace time.Duration) error {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil {
		return nil
	}
	if err := cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("signal star pid %d: %w", cmd.Process.Pid, err)
	}
	if sig != syscall.SIGKILL {
		select {
		case <-done:
		case <-time.After(grace):
			_ = cmd.Process.Signal(syscall.SIGKILL)
			<-done
		}
	} else {
		<-done
	}
	s.reap(cmd)
	return nil
}

// Running reports whether a process is up.
func (s *Star) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cmd != nil
}

// teeWriter writes to both, ignoring the second's errors (a log file).
type teeWriter struct {
	a io.Writer
	b io.Writer
}

func (t *teeWriter) Write(p []byte) (int, error) {
	_, _ = t.b.Write(p)
	return t.a.Write(p)
}

// watchWriter notes whether marker was ever written through it (also
// across two writes).
type watchWriter struct {
	marker []byte
	seen   atomic.Bool
	mu     sync.Mutex
	carry  []byte
}

func (w *watchWriter) Write(p []byte) (int, error) {
	if w.seen.Load() {
		return len(p), nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	buf := append(w.carry, p...)
	if bytes.Contains(buf, w.marker) {
		w.seen.Store(true)
		w.carry = nil
		return len(p), nil
	}
	if k := len(w.marker) - 1; len(buf) > k {
		buf = buf[len(buf)-k:]
	}
	w.carry = append(w.carry[:0:0], buf...)
	return len(p), nil
}

// Close closes the log file, if any (after the last incarnation).
func (s *Star) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.log != nil {
		s.log.Close()
		s.log = nil
	}
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
	// total counts every byte ever written.
	total int64
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	t.total += int64(len(p))
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

// Total is how many bytes were ever written.
func (t *tailBuffer) Total() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.total
}

// Since returns what was written after the first off bytes (as much of it
// as is kept).
func (t *tailBuffer) Since(off int64) string {
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.b.Bytes()
	if kept := t.total - int64(len(b)); off > kept {
		b = b[off-kept:]
	}
	return string(b)
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.b.String()
}

// Last returns at most n trailing bytes.
func (t *tailBuffer) Last(n int) string {
	s := t.String()
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
