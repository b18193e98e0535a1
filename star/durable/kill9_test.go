package durable_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
)

// TestTypeScriptClientSurvivesKill9 runs the official TypeScript client
// (testdata/kill9.mjs) against star dev, kills the star with SIGKILL twice
// while the client's producer appends and its tail long-polls, and starts
// it again on the same data and port each time. Nothing acknowledged may
// be lost and nothing retried may be applied twice: the tail and a re-read
// hold every message once, in order, and so does the S2 face (one record
// per JSON message).
func TestTypeScriptClientSurvivesKill9(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: builds star dev, kills it with SIGKILL and runs @durable-streams/client from .ci/tools/node_modules (make tools)")
	}
	const messages = 50
	killAt := map[string]bool{"ACK 15": true, "ACK 35": true}

	root := testsvc.RepoRoot(t)
	nodeTools := testsvc.NodeToolsDir(t)
	testsvc.RequireFile(t, filepath.Join(nodeTools, "@durable-streams", "client", "package.json"),
		"the Durable Streams TypeScript client (@durable-streams/client)")
	node := lookNode(t)
	star := startDev(t, root, t.TempDir(), "")
	streamURL := star.url + "/ds/kill9/stream"

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, filepath.Join(root, "star", "durable", "testdata", "kill9.mjs"))
	cmd.Env = append(os.Environ(), "STARLOG_NODE_TOOLS="+nodeTools, "DS_STREAM_URL="+streamURL,
		fmt.Sprintf("DS_MESSAGES=%d", messages), "DS_DEADLINE_MS=180000")
	cmd.Stderr = os.Stderr
	cmd.WaitDelay = 5 * time.Second
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start node: %v", err)
	}
	var result string
	acks, kills := 0, 0
	began := time.Now()
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		t.Logf("%6.2fs %s", time.Since(began).Seconds(), line)
		switch {
		case strings.HasPrefix(line, "ACK "):
			acks++
		case strings.HasPrefix(line, "RESULT "):
			result = line
		}
		if killAt[line] {
			// The next append is sent at once: the kill lands on it or
			// just before it, and the star comes back on the same data.
			star.kill()
			kills++
			t.Logf("star killed with SIGKILL after %s; restarting", line)
			star.start()
			t.Logf("%6.2fs star healthy again", time.Since(began).Seconds())
		}
	}
	err = cmd.Wait()
	if !strings.HasPrefix(result, fmt.Sprintf("RESULT ok %d messages acknowledged, tailed and re-read once each, in order", messages)) {
		t.Fatalf("client run: %q (exit: %v, %d acks, %d kills)\nstar output:\n%s", result, err, acks, kills, tail(star.output(), 16<<10))
	}
	if err != nil {
		t.Fatalf("node: %v", err)
	}
	if acks != messages || kills != 2 {
		t.Fatalf("%d acks and %d kills, want %d and 2", acks, kills, messages)
	}

	// The other face: the same stream through the S2 API, one record per
	// message, each body the message's JSON.
	req, _ := http.NewRequest(http.MethodGet, star.url+"/v1/streams/kill9%2Fstream/records?seq_num=0&count=1000", nil)
	req.Header.Set("s2-basin", "durable-streams")
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var batch struct {
		Records []struct {
			SeqNum uint64 `json:"seq_num"`
			Body   string `json:"body"`
		} `json:"records"`
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("S2 read: status %d", resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(&batch); err != nil {
		t.Fatalf("S2 read: %v", err)
	}
	if len(batch.Records) != messages {
		t.Fatalf("S2 face holds %d records, want %d", len(batch.Records), messages)
	}
	for i, r := range batch.Records {
		if want := fmt.Sprintf(`{"i":%d}`, i); r.SeqNum != uint64(i) || r.Body != want {
			t.Fatalf("S2 record %d: seq %d body %q, want seq %d body %q", i, r.SeqNum, r.Body, i, want)
		}
	}
}

// TestProducerStateSurvivesKill9 retries, after a SIGKILL and a restart of
// the star, an append the killed star acknowledged: the restarted star has
// no memory of the producer, yet answers 204 (duplicate) and applies it
// once, because the producer state is folded from the records.
func TestProducerStateSurvivesKill9(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("-short: builds star dev and kills it with SIGKILL")
	}
	star := startDev(t, testsvc.RepoRoot(t), t.TempDir(), "")
	url := star.url + "/ds/producer/after-kill"
	do := func(method, body string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(method, url, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		resp.Body.Close()
		return resp
	}
	prod := func(seq string) []string {
		return []string{"Content-Type", "text/plain", "Producer-Id", "p1", "Producer-Epoch", "3", "Producer-Seq", seq}
	}
	if r := do(http.MethodPut, "", "Content-Type", "text/plain"); r.StatusCode != http.StatusCreated {
		t.Fatalf("create: %d", r.StatusCode)
	}
	if r := do(http.MethodPost, "a", prod("0")...); r.StatusCode != http.StatusOK {
		t.Fatalf("first append: %d", r.StatusCode)
	}
	star.kill()
	star.start()
	if r := do(http.MethodPost, "a", prod("0")...); r.StatusCode != http.StatusNoContent || r.Header.Get("Producer-Seq") != "0" {
		t.Fatalf("retried append after kill -9: %d (Producer-Seq %q), want 204 duplicate", r.StatusCode, r.Header.Get("Producer-Seq"))
	}
	if r := do(http.MethodPost, "b", prod("2")...); r.StatusCode != http.StatusConflict || r.Header.Get("Producer-Expected-Seq") != "1" {
		t.Fatalf("gap after kill -9: %d (expected %q), want 409 expecting 1", r.StatusCode, r.Header.Get("Producer-Expected-Seq"))
	}
	if r := do(http.MethodPost, "b", "Content-Type", "text/plain", "Producer-Id", "p1", "Producer-Epoch", "2", "Producer-Seq", "0"); r.StatusCode != http.StatusForbidden {
		t.Fatalf("stale epoch after kill -9: %d, want 403", r.StatusCode)
	}
	if r := do(http.MethodPost, "b", prod("1")...); r.StatusCode != http.StatusOK {
		t.Fatalf("next append: %d", r.StatusCode)
	}
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = bufio.NewReader(resp.Body).WriteTo(&b)
	if b.String() != "ab" {
		t.Fatalf("stream holds %q, want %q (each append once)", b.String(), "ab")
	}
}
