package servecmd_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
)

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(url, "/v1/starlog/") { // an operator's call
		req.Header.Set(auth.HeaderInternal, internalCred())
	}
	res, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}

// With --internal-listen the public listener answers S2's API and /health
// only; /metrics and the /v1/starlog/ endpoints are on the internal one,
// which peers are told about and forward to.
func TestInternalListener(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	dir := t.TempDir()
	type star struct {
		p                *proc
		public, internal string
	}
	start := func(id string) star {
		pub, in := testsvc.Addr(testsvc.FreePort(t)), testsvc.Addr(testsvc.FreePort(t))
		env := twoStarEnv(dir, id)
		env = append(env[:len(env):len(env)], "STARLOG_LISTEN="+pub, "STARLOG_INTERNAL_LISTEN="+in)
		return star{p: startServe(t, env), public: "http://" + pub, internal: "http://" + in}
	}
	a, b := start("a"), start("b")
	if !strings.Contains(a.p.stderr.String(), "address="+strings.TrimPrefix(a.internal, "http://")) {
		t.Fatalf("a does not advertise its internal address:\n%s", a.p.stderr)
	}
	if status, out, err := call(a.p, "POST", "/v1/basins", `{"basin":"starlog-dev","config":{"create_stream_on_append":true}}`); err != nil || status != 201 {
		t.Fatalf("create basin: %d %s %v", status, out, err)
	}
	if status, out, err := post(a.public, "s", false, []string{"first"}); err != nil || status != 200 {
		t.Fatalf("first append through a: %d %s %v", status, out, err)
	}

	for _, s := range []star{a, b} {
		for _, path := range []string{"/metrics", "/v1/starlog/drain", "/debug/pprof/"} {
			if status, body := get(t, s.public+path); status != http.StatusNotFound {
				t.Errorf("public %s: %d %s, want 404", path, status, body)
			}
			if status, body := get(t, s.internal+path); status != http.StatusOK {
				t.Errorf("internal %s: %d %s", path, status, body)
			}
		}
		req, _ := http.NewRequest("POST", s.public+"/v1/starlog/streams/s/handoff", bytes.NewReader([]byte(`{}`)))
		req.Header.Set("s2-basin", "starlog-dev")
		if res, err := client.Do(req); err != nil || res.StatusCode != http.StatusNotFound {
			t.Errorf("public handoff: %v %v, want 404", res.StatusCode, err)
		}
		if status, body := get(t, s.public+"/health"); status != http.StatusOK {
			t.Errorf("public /health: %d %s", status, body)
		}
	}

	// b forwards to a (the leader) at a's internal address; a request
	// that claims to be forwarded already is forwarded all the same (the
	// public listener drops the header), so it is acknowledged.
	for _, hop := range []bool{false, true} {
		if status, out, err := post(b.public, "s", hop, []string{"via-b"}); err != nil || status != 200 {
			t.Fatalf("append through b's public listener (claims forwarded: %v): %d %s %v", hop, status, out, err)
		}
	}
	if v := metricAt(t, b.internal, `starlog_http_forwarded_total{result="ok"}`); v != "2" {
		t.Fatalf("b forwarded %q appends to a, want 2", v)
	}
	if v := metricAt(t, a.internal, `starlog_http_requests_total{method="POST",route="records",status="200"}`); v != "3" {
		t.Fatalf("a acknowledged %q appends, want 3 (one direct, two forwarded)", v)
	}
}

func metricAt(t *testing.T, base, series string) string {
	t.Helper()
	_, body := get(t, base+"/metrics")
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v
		}
	}
	return ""
}

// A star without its required settings exits at once and names the flags
// and their variables (issue 12: the unit lacked the S3 region and every
// star exited with "no directory and no S3 region configured").
func TestServeNamesMissingSettings(t *testing.T) {
	bin := testsvc.StarBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "serve", "--listen=127.0.0.1:0", "--dynamo-table=t", "--dynamo-region=us-east-1",
		"--standard-buckets=std", "--express-buckets=a--use1-az4--x-s3,b--use1-az5--x-s3,c--use1-az6--x-s3")
	cmd.Env = []string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin", "AWS_CONFIG_FILE=" + filepath.Join(t.TempDir(), "none")}
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("star serve without an S3 region did not fail:\n%s", out)
	}
	if !strings.Contains(string(out), "--s3-region (STARLOG_S3_REGION)") {
		t.Fatalf("the error does not name the flag and its variable:\n%s", out)
	}
}

// A star without an admin token or internal key exits at once, naming
// every flag and variable that would supply them; one with a short key
// says so.
func TestServeNeedsCredentials(t *testing.T) {
	bin := testsvc.StarBinary(t)
	run := func(env ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "serve", "--listen=127.0.0.1:0", "--sqlite="+filepath.Join(t.TempDir(), "m.db"), "--fs-root="+t.TempDir())
		cmd.Env = append([]string{"HOME=" + t.TempDir(), "PATH=/usr/bin:/bin"}, env...)
		out, err := cmd.CombinedOutput()
		if err == nil {
			t.Fatalf("star serve with %v started:\n%s", env, out)
		}
		return string(out)
	}
	out := run()
	for _, want := range []string{"--admin-token-file (STARLOG_ADMIN_TOKEN_FILE)", "STARLOG_ADMIN_TOKEN", "--internal-key-file (STARLOG_INTERNAL_KEY_FILE)", "STARLOG_INTERNAL_KEY"} {
		if !strings.Contains(out, want) {
			t.Errorf("the error does not name %s:\n%s", want, out)
		}
	}
	if out := run("STARLOG_ADMIN_TOKEN="+testAdminToken, "STARLOG_INTERNAL_KEY=short"); !strings.Contains(out, "at least 32 bytes") {
		t.Errorf("a short internal key:\n%s", out)
	}
	keyFile := filepath.Join(t.TempDir(), "key")
	os.WriteFile(keyFile, []byte(testInternalKey+"\n"), 0o600)
	if out := run("STARLOG_INTERNAL_KEY_FILE=" + keyFile); strings.Contains(out, "internal key") || !strings.Contains(out, "admin token") {
		t.Errorf("a key file and no admin token:\n%s", out)
	}
}
