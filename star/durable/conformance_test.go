package durable_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
)

// The official suite, @durable-streams/server-conformance-tests 0.3.6
// (pinned in .ci/tools), has 338 tests. testdata/conformance.mjs runs it
// with subscriptions enabled (its "Reserved subscription APIs" block is
// skipped otherwise): every test must run and pass; a skip fails.
const (
	wantTotal = 338
	// suiteTimeout bounds the Node run (about 40 s on a quiet machine).
	suiteTimeout = 10 * time.Minute
)

// TestConformance runs the official Durable Streams conformance suite
// against `star dev` (its own default durability: an append is
// acknowledged once durable at W).
func TestConformance(t *testing.T) {
	t.Parallel() // beside the kill -9 tests: each has its own star dev
	if testing.Short() {
		t.Skip("-short: runs the npm conformance suite (node, .ci/tools/node_modules from make tools) against a star dev it builds, about a minute")
	}
	root := testsvc.RepoRoot(t)
	nodeTools := testsvc.NodeToolsDir(t)
	pkg := filepath.Join(nodeTools, "@durable-streams", "server-conformance-tests")
	testsvc.RequireFile(t, filepath.Join(pkg, "package.json"), "the Durable Streams conformance suite")
	node := lookNode(t)
	star := startDev(t, root, t.TempDir(), "")
	config := filepath.Join(root, "star", "durable", "testdata", "vitest.config.mjs")
	report := filepath.Join(t.TempDir(), "report.json")

	ctx, cancel := context.WithTimeout(context.Background(), suiteTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(nodeTools, "vitest", "vitest.mjs"), "run",
		"--root", filepath.Dir(nodeTools), "--config", config,
		"--reporter=default", "--reporter=json", "--outputFile="+report, "--no-color")
	cmd.Dir = filepath.Dir(nodeTools)
	cmd.Env = append(os.Environ(), "CONFORMANCE_TEST_URL="+star.url+"/ds", "NO_COLOR=1")
	cmd.WaitDelay = 5 * time.Second
	out, runErr := cmd.CombinedOutput()
	failed := runErr != nil
	defer func() {
		if failed {
			t.Logf("vitest output (tail):\n%s", tail(string(out), 48<<10))
			t.Logf("star dev output (tail):\n%s", tail(star.output(), 32<<10))
		}
	}()
	raw, err := os.ReadFile(report)
	if err != nil {
		failed = true
		t.Fatalf("no JSON report from the suite (exit: %v): %v", runErr, err)
	}
	var rep struct {
		NumTotalTests, NumPassedTests, NumFailedTests, NumPendingTests, NumTodoTests int
		TestResults                                                                  []struct {
			AssertionResults []struct {
				AncestorTitles  []string `json:"ancestorTitles"`
				Title           string   `json:"title"`
				Status          string   `json:"status"`
				FailureMessages []string `json:"failureMessages"`
			} `json:"assertionResults"`
		} `json:"testResults"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		failed = true
		t.Fatalf("decode the suite's report: %v", err)
	}
	passed, skipped := 0, 0
	for _, f := range rep.TestResults {
		for _, a := range f.AssertionResults {
			name := strings.Join(append(a.AncestorTitles, a.Title), " > ")
			switch a.Status {
			case "passed":
				passed++
			case "failed":
				failed = true
				t.Errorf("FAIL %s: %s", name, firstLine(strings.Join(a.FailureMessages, "\n")))
			default:
				skipped++
				failed = true
				t.Errorf("%s: %s (no test may be skipped)", a.Status, name)
			}
		}
	}
	t.Logf("Durable Streams conformance: %d tests, %d passed, %d failed, %d skipped",
		rep.NumTotalTests, rep.NumPassedTests, rep.NumFailedTests, skipped)
	if rep.NumTotalTests != wantTotal || rep.NumPassedTests != wantTotal || passed != wantTotal ||
		skipped != 0 || rep.NumPendingTests+rep.NumTodoTests != 0 {
		failed = true
		t.Errorf("want %d tests, all passed, none skipped; got %d, %d passed, %d skipped, %d pending, %d todo",
			wantTotal, rep.NumTotalTests, rep.NumPassedTests, skipped, rep.NumPendingTests, rep.NumTodoTests)
	}
	if runErr != nil && rep.NumFailedTests == 0 {
		t.Errorf("vitest: %v", runErr)
	}
}

func lookNode(t *testing.T) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found on PATH: the Durable Streams suites need Node 20 (install it, then run `make tools`): %v", err)
	}
	return node
}

// devStar is a `star dev --open` process on a fixed address and data
// folder, which the kill test kills with SIGKILL and starts again.
type devStar struct {
	t         *testing.T
	bin, data string
	addr, url string
	cmd       *exec.Cmd
	out       *strings.Builder
	done      chan struct{}
	outs      []string
}

func startDev(t *testing.T, root, data, addr string) *devStar {
	t.Helper()
	if addr == "" {
		addr = testsvc.Addr(testsvc.FreePort(t))
	}
	s := &devStar{t: t, bin: testsvc.StarBinary(t), data: data, addr: addr, url: "http://" + addr}
	s.start()
	t.Cleanup(func() { s.kill() })
	return s
}

// start runs the star and waits until it is healthy. The Durable Streams
// long-poll is 3 s (the suite's tests allow 5 s for one that times out);
// webhooks may target loopback (the suite's receiver is on 127.0.0.1).
func (s *devStar) start() {
	t := s.t
	t.Helper()
	var out strings.Builder
	cmd := exec.Command(s.bin, "dev", "--open", "--data", s.data, "--listen", s.addr,
		"--shutdown-timeout", "5s", "--durable-long-poll", "3s", "--durable-webhook-loopback")
	cmd.Env = withoutStarlogConfig(os.Environ())
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		t.Fatalf("start star dev: %v", err)
	}
	s.cmd, s.out, s.done = cmd, &out, make(chan struct{})
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
		close(lines)
	}()
	collected := make(chan string, 1)
	go func() {
		var b strings.Builder
		for l := range lines {
			b.WriteString(l + "\n")
		}
		collected <- b.String()
	}()
	go func() {
		_ = cmd.Wait()
		pw.Close()
		s.outs = append(s.outs, <-collected)
		close(s.done)
	}()
	waitHealthy(t, s, 60*time.Second)
}

// kill sends SIGKILL (kill -9) and waits for the process to go.
func (s *devStar) kill() {
	if s.cmd == nil {
		return
	}
	select {
	case <-s.done:
	default:
		_ = s.cmd.Process.Kill()
		<-s.done
	}
}

func (s *devStar) output() string {
	select {
	case <-s.done:
	default:
		return "(star still running)"
	}
	return strings.Join(s.outs, "\n--- restart ---\n")
}

func waitHealthy(t *testing.T, s *devStar, timeout time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	poll.UntilErr(t, timeout, "star dev healthy at "+s.url, func() error {
		select {
		case <-s.done:
			t.Fatalf("star dev exited before it was healthy:\n%s", s.output())
		default:
		}
		resp, err := client.Get(s.url + "/health")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	})
}

// withoutStarlogConfig drops the STARLOG_* variables, which the star reads
// as flag defaults, so a developer's shell cannot change what is tested.
func withoutStarlogConfig(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, "STARLOG_") {
			out = append(out, kv)
		}
	}
	return out
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…\n" + s[len(s)-n:]
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
