package clientcmd

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
)

// The integration test runs the client commands against a real `star dev`
// (built from this module). It is skipped with -short.

func TestMain(m *testing.M) {
	code := m.Run()
	testsvc.RemoveStarBinary()
	os.Exit(code)
}

var (
	devEndpointRE = regexp.MustCompile(`serving the S2 API on (http://\S+)`)
	devTokenRE    = regexp.MustCompile(`^  token:   (\S+) \(admin`)
)

// startStarDev starts `star dev` on a fresh data folder and returns its
// endpoint, default basin and the dev token its banner shows; the test's
// cleanup stops it.
func startStarDev(t *testing.T) (string, string, string) {
	t.Helper()
	bin := testsvc.StarBinary(t)
	const basin = "clientcmd-dev"
	cmd := exec.Command(bin, "dev", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--basin", basin,
		"--s3-flush-interval", "2ms", "--s3-express-flush-interval", "2ms", "--shutdown-timeout", "5s",
		"--session-heartbeat-min", "100ms", "--session-heartbeat-max", "200ms", "--log-level", "warn")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls, tokens := make(chan string, 1), make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := devEndpointRE.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
			if m := devTokenRE.FindStringSubmatch(sc.Text()); m != nil {
				tokens <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	select {
	case u := <-urls:
		select {
		case tok := <-tokens:
			return u, basin, tok
		case <-time.After(10 * time.Second):
			t.Fatalf("the star dev banner shows no token")
		}
	case err := <-exited:
		t.Fatalf("star dev exited: %v\n%s", err, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("star dev did not start\n%s", stderr.String())
	}
	return "", "", ""
}

// TestAgainstStarDev drives every client command against a real star.
func TestAgainstStarDev(t *testing.T) {
	t.Parallel() // its own star (or test server), port and client; it mostly waits
	if testing.Short() {
		t.Skip("builds and runs star dev")
	}
	url, basin, token := startStarDev(t)
	env := map[string]string{EnvEndpoint: url, EnvBasin: basin, EnvToken: token}

	mustRun(t, env, "", "streams", "create", "cli", "--storage-class", "express")
	if out := mustRun(t, env, "", "streams", "list"); !strings.Contains(out, "cli") {
		t.Fatalf("streams list: %q", out)
	}
	out, errOut, err := run(t, env, "one\ntwo\nthree\n", "append", "cli")
	if err != nil || out != "[0, 3) tail=3\n" {
		t.Fatalf("append: %q %q %v", out, errOut, err)
	}
	if out := mustRun(t, env, "", "read", "cli"); out != "one\ntwo\nthree\n" {
		t.Fatalf("read: %q", out)
	}
	if out := mustRun(t, env, "", "check-tail", "cli"); !strings.HasPrefix(out, "3\t") {
		t.Fatalf("check-tail: %q", out)
	}
	if _, _, err := run(t, env, "four\n", "append", "cli", "--match-seq-num", "1"); err == nil || !strings.Contains(err.Error(), "next seq num is 3") {
		t.Fatalf("stale match: %v", err)
	}
	tailed := make(chan string, 1)
	go func() {
		out, _, err := run(t, env, "", "tail", "cli", "--for", "3s")
		if err != nil {
			out = "error: " + err.Error()
		}
		tailed <- out
	}()
	// The session counts as open once its start (the tail) is fixed.
	poll.Until(t, 2*time.Second, "the tail's read session to open", func() bool {
		return openSessions(t, url, "s2s_read") == 1
	})
	mustRun(t, env, "four\nfive\n", "append", "cli", "--match-seq-num", "3")
	if out := <-tailed; out != "four\nfive\n" {
		t.Fatalf("tail: %q", out)
	}

	out = mustRun(t, env, "", "bench", "--streams", "2", "--producers", "2", "--readers", "1",
		"--record-size", "512", "--duration", "2s", "--storage-class", "express", "--json")
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if res.Append.Records == 0 || res.Read.Records != res.Append.Records || res.Read.Missing != 0 {
		t.Fatalf("bench: appended %d, read %d, missing %d", res.Append.Records, res.Read.Records, res.Read.Missing)
	}
	t.Logf("star dev bench (express, 2 producers, 512 B): %.2f MiB/s, %.0f rec/s, ack p50 %.2f ms p99 %.2f ms, e2e p50 %.2f ms p99 %.2f ms",
		res.Append.MiBPerSec, res.Append.RecordsPerSec, res.AckLatency.P50MS, res.AckLatency.P99MS, res.E2ELatency.P50MS, res.E2ELatency.P99MS)

	mustRun(t, env, "", "streams", "delete", "cli")
}

// openSessions reads the star's starlog_http_sessions gauge of one kind.
func openSessions(t *testing.T, url, kind string) float64 {
	t.Helper()
	res, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	prefix := `starlog_http_sessions{kind="` + kind + `"} `
	for line := range strings.Lines(string(body)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), prefix); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %v", line, err)
			}
			return n
		}
	}
	return 0
}
