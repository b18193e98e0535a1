package servecmd_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/auth"
)

// ackLog records every acknowledged record by stream and seq num, from
// every star, and fails the test when one seq num is acknowledged with
// two different bodies (two leaders acknowledged different records).
type ackLog struct {
	t    *testing.T
	mu   sync.Mutex
	recs map[string]map[uint64]string
	// lastOK is when any star last acknowledged an append.
	lastOK atomic.Int64
}

func newAckLog(t *testing.T) *ackLog {
	return &ackLog{t: t, recs: map[string]map[uint64]string{}}
}

func (a *ackLog) add(stream string, start uint64, bodies []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.recs[stream] == nil {
		a.recs[stream] = map[uint64]string{}
	}
	for i, b := range bodies {
		seq := start + uint64(i)
		if prev, ok := a.recs[stream][seq]; ok && prev != b {
			a.t.Errorf("%s: seq %d acknowledged twice: %q and %q", stream, seq, prev, b)
		}
		a.recs[stream][seq] = b
	}
	a.lastOK.Store(time.Now().UnixNano())
}

func (a *ackLog) count(stream string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.recs[stream])
}

// waitMore waits until each of streams has n more acknowledged records
// than it has now (the producers are under way), failing the test (with
// what) after within.
func (a *ackLog) waitMore(t *testing.T, within time.Duration, what string, n int, streams ...string) {
	t.Helper()
	before := map[string]int{}
	for _, s := range streams {
		before[s] = a.count(s)
	}
	poll.Until(t, within, what, func() bool {
		for _, s := range streams {
			if a.count(s) < before[s]+n {
				return false
			}
		}
		return true
	})
}

// post sends one append to a star; hop marks it forwarded already, so the
// star answers itself instead of forwarding.
func post(url, stream string, hop bool, bodies []string) (int, []byte, error) {
	recs := make([]map[string]string, len(bodies))
	for i, b := range bodies {
		recs[i] = map[string]string{"body": b}
	}
	body, _ := json.Marshal(map[string]any{"records": recs})
	req, err := http.NewRequest("POST", url+"/v1/streams/"+stream+"/records", strings.NewReader(string(body)))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("s2-basin", "starlog-dev")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	if hop { // a peer's forward: it carries the internal credential
		req.Header.Set("Starlog-Forwarded-By", "test")
		req.Header.Set(auth.HeaderInternal, internalCred())
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	out, err := io.ReadAll(res.Body)
	return res.StatusCode, out, err
}

// backoff waits d before a producer retries, and reports false when stop
// closes first (the producer returns at once).
func backoff(stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-stop:
		return false
	case <-t.C:
		return true
	}
}

// loop appends batches to stream through url until stop closes, logging
// every ack; failures (503 while leadership moves, refused connections of
// a killed star) are retried. It returns the statuses it saw.
func (a *ackLog) loop(url, stream, worker string, hop bool, stop <-chan struct{}) map[int]int {
	seen := map[int]int{}
	for b := 0; ; b++ {
		select {
		case <-stop:
			return seen
		default:
		}
		bodies := make([]string, 1+b%4)
		for i := range bodies {
			bodies[i] = fmt.Sprintf("%s/%d/%d", worker, b, i)
		}
		status, out, err := post(url, stream, hop, bodies)
		if err != nil {
			seen[-1]++
			if !backoff(stop, 20*time.Millisecond) {
				return seen
			}
			continue
		}
		seen[status]++
		if status != 200 {
			if !backoff(stop, 10*time.Millisecond) {
				return seen
			}
			continue
		}
		ack, aerr := api.DecodeAppendAckJSON(out)
		if aerr != nil {
			a.t.Errorf("ack %s: %v", out, aerr)
			continue
		}
		a.add(stream, ack.Start.SeqNum, bodies)
	}
}

func (a *ackLog) checkReadBack(t *testing.T, p *proc) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	for stream, want := range a.recs {
		got, tail := readAll(t, p, stream)
		for seq, body := range want {
			if got[seq] != body {
				t.Fatalf("%s: acknowledged seq %d (%q) reads back as %q (tail %d)", stream, seq, body, got[seq], tail)
			}
		}
		t.Logf("%s: %d acknowledged records read back at their seq nums; tail %d", stream, len(want), tail)
	}
}

func metric(t *testing.T, p *proc, name string) string {
	t.Helper()
	res, err := client.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, name+" ") {
			return strings.TrimPrefix(line, name+" ")
		}
	}
	return ""
}

// Two star processes on one SQLite file and one object directory:
// appends through a star that does not lead a stream are forwarded; kill
// -9 of the leader hands its streams to the survivor once the dead-after
// bound passes, after it settled the dead star's chains; the killed star
// restarts as a new incarnation and forwards to the new leader; kill -9
// of that leader hands the streams back. No seq num is ever acknowledged
// with two different records, and every acknowledged record reads back at
// its seq num through the last leader.
//
// (A leader frozen with SIGSTOP is not used here: with the SQLite
// metastore a process frozen inside a write transaction holds the file's
// write lock and stalls every star. The deposed writer is tested
// deterministically in star/node.)
func TestLeadershipAcrossStars(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	dir := t.TempDir()
	env := func(id string) []string {
		return []string{
			"STARLOG_STAR_ID=" + id,
			"STARLOG_SQLITE=" + filepath.Join(dir, "meta.db"),
			"STARLOG_FS_ROOT=" + filepath.Join(dir, "objects"),
			"STARLOG_LISTEN=127.0.0.1:0",
			"STARLOG_REGISTRY_HEARTBEAT=200ms",
			"STARLOG_DEAD_AFTER=2s",
			"STARLOG_S3_FLUSH_INTERVAL=2ms",
			"STARLOG_SHUTDOWN_TIMEOUT=5s",
		}
	}
	a := startServe(t, env("a"))
	b := startServe(t, env("b"))
	if status, out, err := call(a, "POST", "/v1/basins", `{"basin":"starlog-dev","config":{"create_stream_on_append":true,"create_stream_on_read":true}}`); err != nil || status != 201 {
		t.Fatalf("create basin: %d %s %v", status, out, err)
	}
	if status, out, err := call(a, "POST", "/v1/streams", `{"stream":"exp","config":{"storage_class":"express"}}`); err != nil || status != 201 {
		t.Fatalf("create express stream: %d %s %v", status, out, err)
	}
	acks := newAckLog(t)
	streams := []string{"std", "exp"}

	// Phase 1: A leads both streams (it sees them first); appends through
	// B are forwarded to A.
	for _, s := range streams {
		if status, out, err := post(a.url, s, false, []string{"first"}); err != nil || status != 200 {
			t.Fatalf("first append to %s on a: %d %s %v", s, status, out, err)
		}
		acks.add(s, 0, []string{"first"})
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() { acks.loop(a.url, s, fmt.Sprintf("a%d", i), false, stop) })
		wg.Go(func() { acks.loop(b.url, s, fmt.Sprintf("b%d", i), false, stop) })
	}
	acks.waitMore(t, 30*time.Second, "appends through both stars", 100, streams...)
	if v := metric(t, b, `starlog_http_forwarded_total{result="ok"}`); v == "" || v == "0" {
		t.Fatalf("b forwarded nothing to a (forwarded ok = %q)", v)
	}
	for _, s := range streams {
		// Check-tail through either star is linearizable: a tail read
		// through b after one through a is never behind it.
		_, ta := readAllTail(t, a, s)
		_, tb := readAllTail(t, b, s)
		if tb < ta {
			t.Fatalf("%s: tail through b %d is behind the tail through a %d read before it", s, tb, ta)
		}
	}

	// Phase 2: kill -9 A mid-flight; B takes both streams over.
	before := map[string]int{}
	for _, s := range streams {
		before[s] = acks.count(s)
	}
	killed := time.Now()
	a.kill9(t)
	if err := poll.Wait(30*time.Second, func() error {
		for _, s := range streams {
			if acks.count(s) <= before[s]+5 {
				return fmt.Errorf("%s: no appends acknowledged through b", s)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("%v within 30 s of killing a\n%s", err, b.stderr)
	}
	t.Logf("failover: first acks through b %v after kill -9 of the leader (dead-after 2 s)", time.Duration(acks.lastOK.Load()-killed.UnixNano()).Round(time.Millisecond))
	close(stop)
	wg.Wait()
	acks.checkReadBack(t, b)
	if v := metric(t, b, `starlog_leader_gate_settles_total{result="ok"}`); v == "" || v == "0" {
		t.Fatalf("b took over without settling a's chains (gate settles ok = %q)", v)
	}

	// Phase 3: A comes back as a new incarnation; it forwards to B, the
	// live leader, instead of taking the streams back.
	a2 := startServe(t, env("a"))
	for _, s := range streams {
		status, out, err := post(a2.url, s, false, []string{"via-a2"})
		if err != nil || status != 200 {
			t.Fatalf("append to %s through restarted a: %d %s %v", s, status, out, err)
		}
		ack, _ := api.DecodeAppendAckJSON(out)
		acks.add(s, ack.Start.SeqNum, []string{"via-a2"})
	}
	if v := metric(t, a2, `starlog_http_forwarded_total{result="ok"}`); v == "" || v == "0" {
		t.Fatalf("restarted a did not forward to b (forwarded ok = %q)", v)
	}

	// Phase 4: kill -9 B, now the leader, with appends in flight through
	// both stars; the restarted A takes the streams over from it.
	stop = make(chan struct{})
	for i, s := range streams {
		wg.Go(func() { acks.loop(b.url, s, fmt.Sprintf("b2-%d", i), false, stop) })
		wg.Go(func() { acks.loop(a2.url, s, fmt.Sprintf("succ%d", i), false, stop) })
	}
	acks.waitMore(t, 30*time.Second, "appends through b and the restarted a", 50, streams...)
	for _, s := range streams {
		before[s] = acks.count(s)
	}
	killed = time.Now()
	b.kill9(t)
	if err := poll.Wait(30*time.Second, func() error {
		for _, s := range streams {
			if acks.count(s) <= before[s]+5 {
				return fmt.Errorf("%s: a2 did not take over from the killed b", s)
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("%v within 30 s\n%s", err, a2.stderr)
	}
	t.Logf("second failover: acks through the restarted a %v after kill -9 of b", time.Duration(acks.lastOK.Load()-killed.UnixNano()).Round(time.Millisecond))
	close(stop)
	wg.Wait()
	acks.checkReadBack(t, a2)
}

// readAllTail reads a stream's tail through p.
func readAllTail(t *testing.T, p *proc, stream string) (api.StreamPosition, uint64) {
	t.Helper()
	status, out, err := call(p, "GET", "/v1/streams/"+stream+"/records/tail", "")
	if err != nil || status != 200 {
		t.Fatalf("tail of %s: %d %s %v", stream, status, out, err)
	}
	tail, terr := api.DecodeTailJSON(out)
	if terr != nil {
		t.Fatal(terr)
	}
	return tail, tail.SeqNum
}
