package verify

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sync"
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
	cmd := exec.Command(s.spec.Binary, s.spec.Args...)
	cmd.Env = append(os.Environ(), s.spec.Env...)
	cmd.Stderr = s.out
	// Its own process group, so a signal to the test does not reach it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		s.mu.Unlock()
		return fmt.Errorf("star stdout: %w", err)
	}
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
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			s.out.Write([]byte(line + "\n"))
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

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
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
