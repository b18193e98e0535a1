package interop_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
)

// sdkScript checks what a scenario of the S2 TypeScript SDK needs (the
// SDK under the node tools, node on PATH, the script in testdata) and
// returns the repository root, the node tools folder, node and the
// script's path.
func sdkScript(t *testing.T, name string) (root, nodeTools, node, script string) {
	t.Helper()
	root = testsvc.RepoRoot(t)
	nodeTools = testsvc.NodeToolsDir(t)
	testsvc.RequireFile(t, filepath.Join(nodeTools, "@s2-dev", "streamstore", "package.json"),
		"the S2 TypeScript SDK (@s2-dev/streamstore)")
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found on PATH: the S2 SDK scenarios need Node 20 (install it, then run `make tools`): %v", err)
	}
	script = filepath.Join(root, "star", "e2e", "interop", "testdata", name)
	testsvc.RequireFile(t, script, name)
	return root, nodeTools, node, script
}

// wantScenarios is what conformance.mjs reports: the ten scenarios of
// docs/design.md §16.3, with the three session scenarios (3, 8, 9) run once per SDK
// transport, the access-token scenario (11), S2 fidelity (12), stream
// encryption (13, once per transport) and resources, paging and session
// compression (14). A script that silently drops a scenario fails the test.
const wantScenarios = 18

// interopToken is the admin token the star dev of the test runs with
// (STARLOG_ADMIN_TOKEN), and so the SDK's S2_ACCESS_TOKEN.
const interopToken = "interop-admin-token-0123456789"

// conformanceTimeout bounds the Node run; the script itself takes about
// 35 s (its 30 s idle session sets the pace).
const conformanceTimeout = 3 * time.Minute

var (
	resultLine  = regexp.MustCompile(`^(PASS|FAIL) (\S+)(?:: (.*))?$`)
	summaryLine = regexp.MustCompile(`^(\d+) passed, (\d+) failed$`)
)

// TestS2TypeScriptSDK runs the official S2 TypeScript SDK against `star dev`
// with its default settings (flush intervals, session heartbeats): what a
// user running `make run` gets.
func TestS2TypeScriptSDK(t *testing.T) {
	t.Parallel()
	root, nodeTools, node, script := sdkScript(t, "conformance.mjs")

	bin := buildStar(t, root)
	addr := testsvc.Addr(testsvc.FreePort(t))
	// A short deletion-pending window lets scenario 12 see a name's
	// re-creation refused (409) and then allowed.
	star := exec.Command(bin, "dev", "--data", t.TempDir(), "--listen", addr, "--shutdown-timeout", "5s", "--deletion-pending", "5s")
	star.Env = append(withoutStarlogConfig(os.Environ()), "STARLOG_ADMIN_TOKEN="+interopToken)
	srv := testsvc.Start(t, "star dev", star)
	srv.WaitTCP(t, addr, time.Minute)
	endpoint := "http://" + addr
	waitHealthy(t, srv, endpoint+"/health", 30*time.Second)

	results, runErr := runConformance(t, node, script, nodeTools, endpoint)
	failed := false
	defer func() {
		if failed {
			t.Logf("star dev output (tail):\n%s", tail(srv.Output(), 64<<10))
		}
	}()
	for _, f := range results.failures {
		failed = true
		t.Errorf("S2 SDK scenario failed: %s", f)
	}
	if runErr != nil {
		failed = true
		t.Errorf("conformance.mjs: %v", runErr)
	}
	if !results.summary {
		failed = true
		t.Errorf("conformance.mjs printed no `N passed, M failed` summary")
		return
	}
	if results.passed != len(results.passes) || results.failed != len(results.failures) {
		failed = true
		t.Errorf("summary says %d passed, %d failed; the lines say %d passed, %d failed",
			results.passed, results.failed, len(results.passes), len(results.failures))
	}
	if n := len(results.passes) + len(results.failures); n != wantScenarios {
		failed = true
		t.Errorf("conformance.mjs reported %d scenarios, want %d", n, wantScenarios)
	}
}

type conformanceResults struct {
	passes, failures []string
	summary          bool
	passed, failed   int
}

// runConformance runs the script with the SDK pointed at endpoint, streams
// its stdout and stderr into the test log line by line, and parses the
// result lines from stdout. The error is a non-zero exit or a timeout.
func runConformance(t *testing.T, node, script, nodeTools, endpoint string, extraEnv ...string) (conformanceResults, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), conformanceTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Dir = filepath.Dir(script)
	cmd.Env = append(os.Environ(),
		"S2_ACCOUNT_ENDPOINT="+endpoint,
		"S2_BASIN_ENDPOINT="+endpoint,
		"S2_ACCESS_TOKEN="+interopToken,
		"STARLOG_NODE_TOOLS="+nodeTools,
	)
	cmd.Env = append(cmd.Env, extraEnv...)
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatalf("stdout pipe: %v", err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatalf("stderr pipe: %v", err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node %s: %v", script, err)
	}

	var res conformanceResults
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		scanLines(stdout, func(line string) {
			t.Log(line)
			if m := resultLine.FindStringSubmatch(line); m != nil {
				if m[1] == "PASS" {
					res.passes = append(res.passes, m[2])
				} else {
					res.failures = append(res.failures, m[2]+": "+m[3])
				}
			} else if m := summaryLine.FindStringSubmatch(line); m != nil {
				res.summary = true
				res.passed, _ = strconv.Atoi(m[1])
				res.failed, _ = strconv.Atoi(m[2])
			}
		})
	}()
	go func() {
		defer wg.Done()
		scanLines(stderr, func(line string) { t.Log("  " + line) })
	}()
	// The pipes must be drained before Wait closes them.
	wg.Wait()
	err = cmd.Wait()
	if ctx.Err() != nil {
		return res, fmt.Errorf("did not finish within %v: %w", conformanceTimeout, err)
	}
	if err != nil {
		return res, fmt.Errorf("node exited: %w", err)
	}
	return res, nil
}

func scanLines(r io.Reader, each func(string)) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		each(sc.Text())
	}
	// A read error here means the process went away; Wait reports why.
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

// buildStar compiles the star binary from this module once for the
// package (its tests run at once, each with its own star dev on it) into
// a folder TestMain removes.
func buildStar(t *testing.T, root string) string {
	t.Helper()
	bin, err := starBin(root)
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

var (
	starBinOnce sync.Once
	starBinPath string
	starBinErr  error
	starBinDir  string
)

func starBin(root string) (string, error) {
	starBinOnce.Do(func() {
		goBin, err := exec.LookPath("go")
		if err != nil {
			goBin = filepath.Join(os.Getenv("GOROOT"), "bin", "go")
		}
		if starBinDir, starBinErr = os.MkdirTemp("", "starlog-interop-"); starBinErr != nil {
			return
		}
		starBinPath = filepath.Join(starBinDir, "star")
		cmd := exec.Command(goBin, "build", "-o", starBinPath, "github.com/starlog/starlog/star")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			starBinErr = fmt.Errorf("go build star: %v\n%s", err, out)
		}
	})
	return starBinPath, starBinErr
}

// waitHealthy polls the star's /health until it answers 200: the listener
// may accept connections before the node is ready to serve.
func waitHealthy(t *testing.T, srv *testsvc.Process, url string, timeout time.Duration) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Second}
	if err := poll.Wait(timeout, func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		return nil
	}); err != nil {
		t.Fatalf("star dev not healthy at %s after %v: %v\n%s", url, timeout, err, srv.Output())
	}
}

// tail is the last n bytes of s, cut at a line start.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	return "…\n" + s
}
