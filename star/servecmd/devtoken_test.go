package servecmd_test

import (
	"bufio"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
)

var devTokenRE = regexp.MustCompile(`^  token:   (\S+) \(admin`)

// runDevBanner starts star dev on data with env (no credentials of the
// test's own) and returns its endpoint, the token its banner shows ("" for
// none) and a stop function.
func runDevBanner(t *testing.T, data string, flags ...string) (string, string, func()) {
	t.Helper()
	bin := testsvc.StarBinary(t)
	cmd := exec.Command(bin, append([]string{"dev", "--data", data, "--listen", "127.0.0.1:0", "--shutdown-timeout", "5s", "--log-level", "warn"}, flags...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STARLOG_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	stop := func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
	}
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		cmd.Wait()
		close(done)
	}()
	var url, tok string
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("star dev exited before its banner ended:\n%s", stderr.String())
			}
			if m := endpointRE.FindStringSubmatch(l); m != nil {
				url = m[1]
			}
			if m := devTokenRE.FindStringSubmatch(l); m != nil {
				tok = m[1]
			}
			if strings.HasPrefix(l, "S2 SDKs and the star CLI") {
				go func() {
					for range lines {
					}
				}()
				return url, tok, stop
			}
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("no banner:\n%s", stderr.String())
		}
	}
}

func status(t *testing.T, url, token string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", url+"/v1/basins", nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

// star dev needs no setup: it generates a dev token, shows it, keeps it
// in <data>/dev-token across restarts, and refuses requests without it;
// --open serves without one.
func TestDevToken(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	data := t.TempDir()
	url, tok, stop := runDevBanner(t, data)
	kept, err := os.ReadFile(filepath.Join(data, "dev-token"))
	if err != nil || tok == "" || strings.TrimSpace(string(kept)) != tok {
		t.Fatalf("banner token %q, kept %q (%v)", tok, kept, err)
	}
	if s := status(t, url, tok); s != 200 {
		t.Errorf("with the dev token: %d", s)
	}
	if s := status(t, url, ""); s != 401 {
		t.Errorf("without a token: %d", s)
	}
	stop()
	url, again, stop := runDevBanner(t, data)
	if again != tok || status(t, url, tok) != 200 {
		t.Errorf("after a restart the token is %q, was %q", again, tok)
	}
	stop()
	url, none, stop := runDevBanner(t, t.TempDir(), "--open")
	defer stop()
	if none != "" || status(t, url, "") != 200 {
		t.Errorf("--open: token %q, status without one %d", none, status(t, url, ""))
	}
}
