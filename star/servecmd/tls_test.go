package servecmd_test

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
)

// `star serve --tls-cert --tls-key --tls-ca` (by environment, as a unit
// would set them): it serves https only, advertises an https address, and
// a second star forwards to it over TLS.
func TestServeTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	ca := testsvc.NewCA(t, "stars")
	dir := t.TempDir()
	tlsEnv := []string{"STARLOG_TLS_CERT=" + ca.CertFile, "STARLOG_TLS_KEY=" + ca.KeyFile, "STARLOG_TLS_CA=" + ca.CAFile}
	a := startServe(t, append(twoStarEnv(dir, "a"), tlsEnv...))
	b := startServe(t, append(twoStarEnv(dir, "b"), tlsEnv...))
	for _, p := range []*proc{a, b} {
		if !strings.Contains(p.stderr.String(), "address=https://127.0.0.1:") {
			t.Fatalf("the star does not advertise an https address:\n%s", p.stderr)
		}
	}
	https := func(p *proc) string { return strings.Replace(p.url, "http://", "https://", 1) }
	var h2 http.Protocols
	h2.SetHTTP2(true)
	c := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Protocols: &h2, TLSClientConfig: &tls.Config{RootCAs: ca.Pool}}}
	do := func(method, url, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		req.Header.Set("s2-basin", "starlog-dev")
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		res, err := c.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, url, err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		if res.ProtoMajor != 2 {
			t.Fatalf("%s %s answered over %s, want HTTP/2 by ALPN", method, url, res.Proto)
		}
		return res.StatusCode, string(out)
	}
	if status, out := do("POST", https(a)+"/v1/basins", `{"basin":"starlog-dev","config":{"create_stream_on_append":true}}`); status != 201 {
		t.Fatalf("create basin: %d %s", status, out)
	}
	rec := `{"records":[{"body":"x"}]}`
	if status, out := do("POST", https(a)+"/v1/streams/s/records", rec); status != 200 {
		t.Fatalf("append through a: %d %s", status, out)
	}
	// b does not lead s: it forwards to a's https address.
	if status, out := do("POST", https(b)+"/v1/streams/s/records", rec); status != 200 || !strings.Contains(out, `"seq_num":1`) {
		t.Fatalf("append through b (forwarded over TLS): %d %s", status, out)
	}
	// No cleartext listener.
	if res, err := client.Get(a.url + "/health"); err == nil {
		res.Body.Close()
		if res.StatusCode == 200 {
			t.Fatalf("cleartext /health on a TLS star: %s", res.Status)
		}
	}
}

// Half a TLS setting is an error naming the missing flag and variable.
func TestServeTLSNeedsKey(t *testing.T) {
	bin := testsvc.StarBinary(t)
	ca := testsvc.NewCA(t, "stars")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, bin, "serve")
	cmd.Env = append(append(twoStarEnv(dir, "a"), credEnv...), "HOME="+dir, "STARLOG_TLS_CERT="+ca.CertFile)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--tls-key (STARLOG_TLS_KEY)") {
		t.Fatalf("star serve with a certificate and no key: %v\n%s", err, out)
	}
}
