package servecmd_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/starlog/starlog/star/auth"
)

// TestDurableProducerSurvivesHandoff: an idempotent producer's append
// acknowledged by star a is retried, unchanged, after the stream was
// handed off to star b: b, which never saw the producer, answers 204
// duplicate from the records, and the producer's next seq is applied once
// (sent to a, which forwards it to b). The Durable Streams face's basin
// is durable-streams (the default).
func TestDurableProducerSurvivesHandoff(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds and runs two star serve processes")
	}
	dir := t.TempDir()
	a := startServe(t, twoStarEnv(dir, "a"))
	b := startServe(t, twoStarEnv(dir, "b"))
	do := func(p *proc, method, body string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, p.url+"/ds/handoff/s", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", method, p.url, err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return resp, string(out)
	}
	prod := func(seq string) []string {
		return []string{"Content-Type", "text/plain", "Producer-Id", "p1", "Producer-Epoch", "0", "Producer-Seq", seq}
	}
	if r, out := do(a, http.MethodPut, "", "Content-Type", "text/plain"); r.StatusCode != http.StatusCreated {
		t.Fatalf("create on a: %d %s", r.StatusCode, out)
	}
	if r, out := do(a, http.MethodPost, "a", prod("0")...); r.StatusCode != http.StatusOK {
		t.Fatalf("append on a: %d %s", r.StatusCode, out)
	}

	req, _ := http.NewRequest(http.MethodPost, a.url+"/v1/starlog/streams/handoff%2Fs/handoff", strings.NewReader(`{"to":"b"}`))
	req.Header.Set("s2-basin", "durable-streams")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	req.Header.Set(auth.HeaderInternal, internalCred())
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), `"a"`) {
		t.Fatalf("handoff a→b: %d %s", resp.StatusCode, out)
	}

	if r, out := do(b, http.MethodPost, "a", prod("0")...); r.StatusCode != http.StatusNoContent || r.Header.Get("Producer-Seq") != "0" {
		t.Fatalf("retry on b after the handoff: %d (Producer-Seq %q) %s, want 204 duplicate", r.StatusCode, r.Header.Get("Producer-Seq"), out)
	}
	if r, out := do(a, http.MethodPost, "b", prod("1")...); r.StatusCode != http.StatusOK {
		t.Fatalf("next seq through a (forwarded to b): %d %s", r.StatusCode, out)
	}
	if r, out := do(b, http.MethodPost, "b", prod("1")...); r.StatusCode != http.StatusNoContent {
		t.Fatalf("retry of the next seq on b: %d %s, want 204", r.StatusCode, out)
	}
	if r, body := do(a, http.MethodGet, ""); r.StatusCode != http.StatusOK || body != "ab" {
		t.Fatalf("read through a: %d %q, want %q (each append once)", r.StatusCode, body, "ab")
	}
}
