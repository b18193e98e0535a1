package clientcmd

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk/sdktest"
)

// TestBench runs a short bench against the test server and checks the
// report is consistent with what the server holds: every acked record was
// read once per reader, and the latencies cover every record.
func TestBench(t *testing.T) {
	srv, env := testEnv(t)
	out := mustRun(t, env, "", "bench", "--streams", "2", "--producers", "3", "--readers", "2",
		"--record-size", "100", "--duration", "400ms", "--linger", "1ms", "--json")
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	n := res.Append.Records
	if n == 0 || res.Append.Errors != 0 {
		t.Fatalf("appended %d, errors %d", n, res.Append.Errors)
	}
	held := uint64(len(srv.Records(testBasin, "bench-0")) + len(srv.Records(testBasin, "bench-1")))
	if held != n {
		t.Fatalf("the server holds %d records, the bench reports %d", held, n)
	}
	if res.Append.Bytes != n*108 || res.AckLatency.Count != n {
		t.Fatalf("bytes %d, ack latencies %d for %d records", res.Append.Bytes, res.AckLatency.Count, n)
	}
	if res.Read.Records != 2*n || res.Read.Missing != 0 || res.E2ELatency.Count != 2*n {
		t.Fatalf("read %d (missing %d, e2e %d) of %d", res.Read.Records, res.Read.Missing, res.E2ELatency.Count, 2*n)
	}
	l := res.AckLatency
	if !(l.P50MS > 0 && l.P50MS <= l.P90MS && l.P90MS <= l.P99MS && l.P99MS <= l.P999MS && l.P999MS <= l.MaxMS) {
		t.Fatalf("ack percentiles out of order: %+v", l)
	}
	if res.Append.MiBPerSec <= 0 || res.Append.RecordsPerSec <= 0 || res.DurationS < 0.4 {
		t.Fatalf("throughput %+v over %.2f s", res.Append, res.DurationS)
	}

	// The text report names every figure.
	out = mustRun(t, env, "", "bench", "--duration", "200ms", "--readers", "0", "--record-size", "16")
	for _, want := range []string{"append:", "MiB/s", "records/s", "ack:", "p99.9"} {
		if !strings.Contains(out, want) {
			t.Errorf("report lacks %q: %q", want, out)
		}
	}
}

// TestBenchRate: a target rate bounds what is appended.
func TestBenchRate(t *testing.T) {
	_, env := testEnv(t)
	out := mustRun(t, env, "", "bench", "--producers", "2", "--rate", "200", "--duration", "1s", "--json")
	var res benchResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if n := res.Append.Records; n < 150 || n > 210 {
		t.Fatalf("appended %d records at 200/s for 1 s", n)
	}
}

// TestBenchReportsFailures: failed appends and unread records fail the
// command, and the report still comes out.
func TestBenchReportsFailures(t *testing.T) {
	var calls atomic.Int32
	srv := sdktest.New(sdktest.Options{AppendHook: func(context.Context, sdktest.AppendCall) sdktest.Fault {
		if calls.Add(1) == 3 {
			return sdktest.Fault{Err: api.Storage("disk on fire")}
		}
		return sdktest.Fault{}
	}})
	t.Cleanup(srv.Close)
	env := map[string]string{EnvAccountEndpoint: srv.URL, EnvBasin: testBasin}
	mustRun(t, env, "", "basins", "create", testBasin)
	out, _, err := run(t, env, "", "bench", "--duration", "300ms", "--linger", "1ms", "--catch-up", "500ms", "--json")
	if err == nil || !strings.Contains(err.Error(), "disk on fire") {
		t.Fatalf("err %v", err)
	}
	var res benchResult
	if jerr := json.Unmarshal([]byte(out), &res); jerr != nil || res.Append.Errors == 0 {
		t.Fatalf("report %q (%v)", out, jerr)
	}
}

func TestBenchBody(t *testing.T) {
	body := make([]byte, 40)
	at := time.Unix(1700000000, 123456789)
	encodeBenchBody(body, at, 7)
	got, p, ok := decodeBenchBody(body)
	if !ok || !got.Equal(at) || p != 7 {
		t.Fatalf("decoded %v %d %v", got, p, ok)
	}
	for _, bad := range [][]byte{nil, []byte("SLB1"), []byte("XLB1xxxxxxxxxxxxxxxx")} {
		if _, _, ok := decodeBenchBody(bad); ok {
			t.Errorf("%q decoded", bad)
		}
	}
}

// FuzzDecodeBenchBody: any body decodes or is refused without panicking,
// and what decodes re-encodes to the same header.
func FuzzDecodeBenchBody(f *testing.F) {
	b := make([]byte, 16)
	encodeBenchBody(b, time.Unix(0, 42), 3)
	f.Add(b)
	f.Add([]byte("SLB1\xff\xff\xff\xff\xff\xff\xff\xff\x00\x00\x00\x01"))
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, body []byte) {
		at, p, ok := decodeBenchBody(body)
		if !ok {
			return
		}
		re := make([]byte, benchHeaderLen)
		encodeBenchBody(re, at, p)
		if string(re) != string(body[:benchHeaderLen]) {
			t.Fatalf("re-encoded %x, want %x", re, body[:benchHeaderLen])
		}
	})
}

// TestBenchRead reads back what a bench appended: every record, its
// metered bytes, and figures that are positive.
func TestBenchRead(t *testing.T) {
	srv, env := testEnv(t)
	mustRun(t, env, "", "bench", "--readers", "0", "--record-size", "100", "--duration", "300ms", "--linger", "1ms")
	held := uint64(len(srv.Records(testBasin, "bench-0")))
	if held == 0 {
		t.Fatal("the bench appended nothing")
	}
	out := mustRun(t, env, "", "bench", "read", "--stream", "bench-0", "--json")
	var res benchReadResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v: %q", err, out)
	}
	if res.Records != held || res.MeteredBytes != held*108 || res.Transport != "s2s" {
		t.Fatalf("read %d records, %d bytes over %s; the server holds %d", res.Records, res.MeteredBytes, res.Transport, held)
	}
	if res.MiBPerSec <= 0 || res.FirstBatchMs <= 0 || res.ClientCPUPerGi <= 0 {
		t.Fatalf("figures %+v", res)
	}
	out = mustRun(t, env, "", "bench", "read", "--stream", "bench-0", "--seq-num", "1", "--bytes", "108")
	if !strings.Contains(out, "read 1 records") || !strings.Contains(out, "MiB/s") {
		t.Fatalf("report %q", out)
	}
}
