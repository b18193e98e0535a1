// Package benchproc runs the processes a benchmark command compares
// (star dev, nats-server): each with its output in a log file, stopped with
// SIGTERM and a bounded wait, on a free loopback port, waited for until it
// serves.
package benchproc

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Proc is a started process whose output goes to LogPath.
type Proc struct {
	Cmd     *exec.Cmd
	LogPath string
	log     *os.File
}

// Start runs bin with args, its stdout and stderr in work/<name>.log.
func Start(work, name, bin string, args ...string) (*Proc, error) {
	lp := filepath.Join(work, name+".log")
	lf, err := os.Create(lp)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	return &Proc{Cmd: cmd, LogPath: lp, log: lf}, nil
}

// Stop sends SIGTERM and waits up to 30 s before a kill.
func (p *Proc) Stop() {
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.Cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = p.Cmd.Process.Kill()
		<-done
	}
	p.log.Close()
}

// FreeAddr is a loopback address with a port free at the time of asking.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// readyWithin is how long a process may take to serve.
const readyWithin = 60 * time.Second

// WaitHealth waits until GET url answers 200, within a minute.
func WaitHealth(ctx context.Context, url string) error {
	c := &http.Client{Timeout: time.Second}
	return waitUntil(ctx, func() error {
		res, err := c.Get(url)
		if err != nil {
			return err
		}
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return fmt.Errorf("%s", res.Status)
		}
		return nil
	}, url+" not healthy")
}

// WaitTCP waits until addr accepts a connection, within a minute.
func WaitTCP(ctx context.Context, addr string) error {
	return waitUntil(ctx, func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}, "not listening on "+addr)
}

func waitUntil(ctx context.Context, ready func() error, what string) error {
	ctx, cancel := context.WithTimeout(ctx, readyWithin)
	defer cancel()
	for {
		err := ready()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CPUProfile saves a d-long CPU profile of the process whose pprof admin
// listener is adminAddr into path, starting after settle (a run's set-up),
// all within d plus 30 s.
func CPUProfile(ctx context.Context, adminAddr string, settle, d time.Duration, path string) error {
	select {
	case <-time.After(settle):
	case <-ctx.Done():
		return ctx.Err()
	}
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", adminAddr, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, res.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, res.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// Rows picks the rows a --workloads flag names (comma-separated, counted
// from 1) out of all, in the flag's order; an empty flag keeps all.
func Rows[T any](all []T, only string) ([]T, error) {
	if only == "" {
		return all, nil
	}
	var sel []T
	for _, s := range strings.Split(only, ",") {
		i, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || i < 1 || i > len(all) {
			return nil, fmt.Errorf("--workloads: %q is not a row 1..%d", s, len(all))
		}
		sel = append(sel, all[i-1])
	}
	return sel, nil
}

// Dev is a `star dev` StartDev started: its S2 listener and its internal
// (admin: /metrics, pprof) listener.
type Dev struct {
	*Proc
	Addr, AdminAddr string
}

// StartDev runs `star dev` of bin as work/<name>.log, its data in data,
// on free loopback addresses with args after, and waits for its /health.
func StartDev(ctx context.Context, work, name, bin, data string, args ...string) (*Dev, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	admin, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	p, err := Start(work, name, bin, append([]string{"dev", "--data", data, "--listen", addr, "--internal-listen", admin}, args...)...)
	if err != nil {
		return nil, err
	}
	if err := WaitHealth(ctx, "http://"+addr+"/health"); err != nil {
		p.Stop()
		return nil, fmt.Errorf("star dev: %w (log: %s)", err, p.LogPath)
	}
	return &Dev{Proc: p, Addr: addr, AdminAddr: admin}, nil
}
