package clientcmd

import (
	"encoding/json"
	"strings"
	"testing"
)

// Unary mode: appends of --batch records, --in-flight per producer; the
// report matches what the server holds and every record's ack is counted.
func TestBenchUnary(t *testing.T) {
	srv, env := testEnv(t)
	out := mustRun(t, env, "", "bench", "--mode", "unary", "--streams", "2", "--producers", "2", "--batch", "5",
		"--in-flight", "3", "--readers", "1", "--record-size", "100", "--duration", "400ms", "--json")
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	n := res.Append.Records
	if n == 0 || n%5 != 0 || res.Append.Errors != 0 {
		t.Fatalf("appended %d (want a positive multiple of 5), errors %d", n, res.Append.Errors)
	}
	held := uint64(len(srv.Records(testBasin, "bench-0")) + len(srv.Records(testBasin, "bench-1")))
	if held != n {
		t.Fatalf("the server holds %d records, the bench reports %d", held, n)
	}
	if res.Mode != "unary" || res.Batch != 5 || res.InFlight != 3 {
		t.Fatalf("report mode %q batch %d in flight %d", res.Mode, res.Batch, res.InFlight)
	}
	if res.Append.Bytes != n*108 || res.AckLatency.Count != n || res.Read.Records != n || res.Read.Missing != 0 {
		t.Fatalf("bytes %d, acks %d, read %d (missing %d) for %d records", res.Append.Bytes, res.AckLatency.Count, res.Read.Records, res.Read.Missing, n)
	}

	out = mustRun(t, env, "", "bench", "--mode", "unary", "--duration", "200ms", "--readers", "0", "--encoding", "proto")
	if !strings.Contains(out, "unary appends of 1 records, 1 in flight") {
		t.Errorf("text report does not name the mode: %q", out)
	}
	for _, bad := range [][]string{{"--mode", "nope"}, {"--mode", "unary", "--batch", "0"}, {"--mode", "unary", "--batch", "1001"},
		{"--mode", "unary", "--in-flight", "0"}, {"--mode", "unary", "--encoding", "xml"}} {
		if _, _, err := run(t, env, "", append([]string{"bench", "--duration", "100ms"}, bad...)...); err == nil {
			t.Errorf("bench %v: no error", bad)
		}
	}
}

// Session mode with --in-flight caps the unacked records.
func TestBenchSessionInFlight(t *testing.T) {
	_, env := testEnv(t)
	out := mustRun(t, env, "", "bench", "--in-flight", "4", "--linger", "-1ns", "--readers", "0", "--duration", "300ms", "--json")
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if res.Mode != "session" || res.Append.Records == 0 || res.Append.Errors != 0 {
		t.Fatalf("session with --in-flight: %+v", res)
	}
}
