// Package testsvc starts the real protocol servers the conformance suites run
// against (versitygw for S3, DynamoDB Local for DynamoDB) on 127.0.0.1.
// The binaries are installed by `make tools` into project-local folders; a
// server that is missing or does not start fails the test, never skips it.
package testsvc

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ToolsDir is the folder `make tools` installs binaries under
// ($STARLOG_TOOLS, else <repo>/.tools).
func ToolsDir(tb testing.TB) string {
	tb.Helper()
	if d := os.Getenv("STARLOG_TOOLS"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(tb), ".tools")
}

// NodeToolsDir is the node_modules folder of the pinned npm test tools
// ($STARLOG_NODE_TOOLS, else <repo>/.ci/tools/node_modules).
func NodeToolsDir(tb testing.TB) string {
	tb.Helper()
	if d := os.Getenv("STARLOG_NODE_TOOLS"); d != "" {
		return d
	}
	return filepath.Join(RepoRoot(tb), ".ci", "tools", "node_modules")
}

// RepoRoot walks up from the working directory to the folder holding go.mod
// of module github.com/starlog/starlog.
func RepoRoot(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatalf("testsvc: getwd: %v", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/starlog/starlog\n")) {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatalf("testsvc: no starlog go.mod above the working directory")
		}
		dir = parent
	}
}

// RequireFile fails the test with an install hint when path is missing.
func RequireFile(tb testing.TB, path, what string) {
	tb.Helper()
	if _, err := os.Stat(path); err != nil {
		tb.Fatalf("testsvc: %s not installed at %s (run `make tools`): %v", what, path, err)
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(tb testing.TB) int {
	tb.Helper()
	return FreePorts(tb, 1)
}

// Ports are drawn below Linux's ephemeral range (32768–60999 by default),
// where the kernel picks the source ports of outgoing connections and the
// ports of listens on :0: a port picked there and freed until its server
// binds it may meanwhile be some connection's source port (a clean-clone
// run's `star dev --stars 3` failed with "bind: address already in use"
// that way). Only another test's draw from this range can take one.
const freePortLo, freePortHi = 20000, 32768

// FreePorts returns the first of n consecutive TCP ports on 127.0.0.1
// that were all free a moment ago (for `star dev --stars n`, which listens
// on consecutive ports).
func FreePorts(tb testing.TB, n int) int {
	tb.Helper()
	for range 256 {
		base := freePortLo + rand.IntN(freePortHi-freePortLo-n)
		var ls []net.Listener
		ok := true
		for i := range n {
			l, err := net.Listen("tcp", Addr(base+i))
			if err != nil {
				ok = false
				break
			}
			ls = append(ls, l)
		}
		for _, l := range ls {
			l.Close()
		}
		if ok {
			return base
		}
	}
	tb.Fatalf("testsvc: no %d consecutive free ports in [%d, %d)", n, freePortLo, freePortHi)
	return 0
}

// Process is a server started for a test.
type Process struct {
	Name string
	cmd  *exec.Cmd
	out  *syncBuffer
	done chan struct{}
	err  error
}

// Start runs cmd in its own process group, capturing its output, and stops
// it (SIGTERM, then SIGKILL) when the test ends.
func Start(tb testing.TB, name string, cmd *exec.Cmd) *Process {
	tb.Helper()
	p := &Process{Name: name, cmd: cmd, out: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stdout = p.out
	cmd.Stderr = p.out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		tb.Fatalf("testsvc: start %s: %v", name, err)
	}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	tb.Cleanup(p.Stop)
	return p
}

// Stop ends the process group; it is safe to call twice.
func (p *Process) Stop() {
	select {
	case <-p.done:
		return
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// Output is what the process printed so far.
func (p *Process) Output() string { return p.out.String() }

// WaitTCP waits until addr accepts connections, the process exits, or the
// timeout passes; the last two fail the test with the process's output.
func (p *Process) WaitTCP(tb testing.TB, addr string, timeout time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		select {
		case <-p.done:
			tb.Fatalf("testsvc: %s exited before listening on %s: %v\n%s", p.Name, addr, p.err, p.Output())
		case <-ctx.Done():
			tb.Fatalf("testsvc: %s not listening on %s after %v\n%s", p.Name, addr, timeout, p.Output())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.b.Len() > 1<<20 { // keep the tail bounded
		s.b.Reset()
	}
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Addr formats 127.0.0.1:port.
func Addr(port int) string { return fmt.Sprintf("127.0.0.1:%d", port) }
