package servecmd_test

import (
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
)

// twoStarEnv is the environment of star id on a shared metastore and
// object folder under dir.
func twoStarEnv(dir, id string) []string {
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

// twoStarsLedByA starts stars a and b on one metastore and object folder,
// creates the dev basin, and makes a the leader of each stream with a
// first append ("first" at seq 0, logged in the returned ack log).
func twoStarsLedByA(t *testing.T, streams ...string) (a, b *proc, acks *ackLog) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	dir := t.TempDir()
	a = startServe(t, twoStarEnv(dir, "a"))
	b = startServe(t, twoStarEnv(dir, "b"))
	if status, out, err := call(a, "POST", "/v1/basins", `{"basin":"starlog-dev","config":{"create_stream_on_append":true}}`); err != nil || status != 201 {
		t.Fatalf("create basin: %d %s %v", status, out, err)
	}
	acks = newAckLog(t)
	for _, s := range streams {
		if status, out, err := post(a.url, s, false, []string{"first"}); err != nil || status != 200 {
			t.Fatalf("first append to %s on a: %d %s %v", s, status, out, err)
		}
		acks.add(s, 0, []string{"first"})
	}
	return a, b, acks
}

// firstOK appends to stream on p as an already forwarded request (p
// answers itself, never forwards) until p acknowledges one, and returns
// when that was. Until p leads the stream it answers 503.
func firstOK(acks *ackLog, p *proc, stream string, stop <-chan struct{}) (time.Time, bool) {
	pace := time.NewTicker(time.Millisecond) // a probe a millisecond at most
	defer pace.Stop()
	for i := 0; ; i++ {
		select {
		case <-stop:
			return time.Time{}, false
		case <-pace.C:
		}
		bodies := []string{fmt.Sprintf("probe/%d", i)}
		status, out, err := post(p.url, stream, true, bodies)
		if err == nil && status == 200 {
			at := time.Now()
			ack, aerr := api.DecodeAppendAckJSON(out)
			if aerr != nil {
				acks.t.Errorf("probe ack %s: %v", out, aerr)
				return at, true
			}
			acks.add(stream, ack.Start.SeqNum, bodies)
			return at, true
		}
	}
}

// Handoff under load: producers append through both stars while the
// stream moves from a to b (admin endpoint) and back to a (the CLI). No
// acknowledged record is lost, no seq num is acknowledged twice, the
// successor takes the released lease without a gate settle, and the
// producers only retry through the move.
func TestHandoffUnderLoad(t *testing.T) {
	const s = "moving"
	a, b, acks := twoStarsLedByA(t, s)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var seenMu sync.Mutex
	seen := map[int]int{}
	for i, p := range []*proc{a, b, a, b} {
		wg.Go(func() {
			got := acks.loop(p.url, s, fmt.Sprintf("w%d", i), false, stop)
			seenMu.Lock()
			for k, v := range got {
				seen[k] += v
			}
			seenMu.Unlock()
		})
	}
	acks.waitMore(t, 30*time.Second, "appends through both stars", 100, s)

	// a → b through the admin endpoint, asked of b (which forwards it to
	// the leader a).
	var first atomic.Int64
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		if at, ok := firstOK(acks, b, s, stop); ok {
			first.Store(at.UnixNano())
		}
	}()
	before := acks.count(s)
	start := time.Now()
	status, out, err := call(b, "POST", "/v1/starlog/streams/"+s+"/handoff", `{"to":"b"}`)
	if err != nil || status != 200 {
		t.Fatalf("handoff a→b: %d %s %v", status, out, err)
	}
	if !strings.Contains(string(out), `"from":"a"`) {
		t.Fatalf("handoff a→b answered %s, want from a", out)
	}
	select {
	case <-probeDone:
	case <-time.After(10 * time.Second):
		t.Fatal("b acknowledged nothing within 10 s of the handoff")
	}
	t.Logf("handoff a→b: %s; first append acknowledged by b %v after the handoff started",
		out, time.Duration(first.Load()-start.UnixNano()).Round(100*time.Microsecond))
	poll.Until(t, 10*time.Second, "20 acks after the handoff (producers stalled?)", func() bool { return acks.count(s) >= before+20 })
	if v := metric(t, b, `starlog_leader_lease_acquisitions_total{from="released"}`); v != "1" {
		t.Fatalf("b took the lease %q times from a released lease, want 1", v)
	}
	if v := metric(t, b, `starlog_leader_gate_settles_total{result="ok"}`); v != "" && v != "0" {
		t.Fatalf("b ran %s gate settles after a handoff, want none", v)
	}

	// b → a through the CLI, asked of a (forwarded to b).
	bin := testsvc.StarBinary(t)
	stopProbe := make(chan struct{})
	defer close(stopProbe)
	probeDone = make(chan struct{})
	first.Store(0)
	go func() {
		defer close(probeDone)
		if at, ok := firstOK(acks, a, s, stopProbe); ok {
			first.Store(at.UnixNano())
		}
	}()
	before = acks.count(s)
	start = time.Now()
	move := exec.Command(bin, "streams", "move", s, "--to", "a", "--endpoint", a.url, "--basin", "starlog-dev")
	move.Env = cliEnv()
	cli, err := move.CombinedOutput()
	if err != nil {
		t.Fatalf("star streams move: %v\n%s", err, cli)
	}
	if !strings.Contains(string(cli), "from b to a") {
		t.Fatalf("star streams move printed %q", cli)
	}
	select {
	case <-probeDone:
	case <-time.After(10 * time.Second):
		t.Fatal("a acknowledged nothing within 10 s of the handoff back")
	}
	t.Logf("handoff b→a via the CLI: %s; first append acknowledged by a %v after the handoff started",
		strings.TrimSpace(string(cli)), time.Duration(first.Load()-start.UnixNano()).Round(100*time.Microsecond))
	poll.Until(t, 10*time.Second, "20 acks after the handoff back (producers stalled?)", func() bool { return acks.count(s) >= before+20 })
	close(stop)
	wg.Wait()
	if v := metric(t, a, `starlog_leader_lease_acquisitions_total{from="released"}`); v != "1" {
		t.Fatalf("a took the lease back %q times from a released lease, want 1\na: %s\nb: %s", v, grepMetrics(t, a, "lease_acquisitions"), grepMetrics(t, b, "lease_acquisitions"))
	}
	if v := metric(t, a, `starlog_leader_gate_settles_total{result="ok"}`); v != "" && v != "0" {
		t.Fatalf("a ran %s gate settles after a handoff, want none", v)
	}
	t.Logf("producer statuses over both moves: %v (-1: transport errors)", seen)
	if seen[-1] > 0 || seen[500] > 0 {
		t.Fatalf("producers saw transport errors or 500s: %v", seen)
	}
	acks.checkReadBack(t, a)
	acks.checkReadBack(t, b)
}

// grepMetrics is p's metric lines that contain sub, for failure messages.
func grepMetrics(t *testing.T, p *proc, sub string) string {
	t.Helper()
	res, err := client.Get(p.url + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(line, sub) && !strings.HasPrefix(line, "#") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "; ")
}

// SIGTERM of the leader releases its leases after the absorb covered its
// streams: the other star takes them over at once (no dead-after wait)
// and without a gate settle, and every acknowledged record reads back.
// The closing star's nudge makes the other settle its chains at once.
func TestGracefulCloseReleasesLeases(t *testing.T) {
	streams := []string{"s1", "s2", "s3"}
	a, b, acks := twoStarsLedByA(t, streams...)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() { acks.loop(a.url, s, fmt.Sprintf("a%d", i), false, stop) })
		wg.Go(func() { acks.loop(b.url, s, fmt.Sprintf("b%d", i), false, stop) })
	}
	acks.waitMore(t, 30*time.Second, "appends through both stars", 50, streams...)

	// Probes append through b as already-forwarded requests (b answers
	// itself): their first ack is b's first as the leader.
	var firstAt [3]time.Time
	var probes sync.WaitGroup
	for i, s := range streams {
		probes.Go(func() { firstAt[i], _ = firstOK(acks, b, s, stop) })
	}
	termed := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-a.done:
		if err != nil {
			t.Fatalf("a exited with %v after SIGTERM\n%s", err, a.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("a did not exit within 15 s of SIGTERM\n%s", a.stderr)
	}
	exited := time.Since(termed)
	if !strings.Contains(a.stderr.String(), "shutdown: released stream leases\" released=3") {
		t.Fatalf("a did not log releasing its 3 leases\n%s", a.stderr)
	}
	probed := make(chan struct{})
	go func() { probes.Wait(); close(probed) }()
	select {
	case <-probed:
	case <-time.After(10 * time.Second):
		t.Fatal("b acknowledged nothing within 10 s of a's exit")
	}
	close(stop)
	wg.Wait()
	for i, s := range streams {
		t.Logf("%s: first append acknowledged by b %v after SIGTERM of a (a exited after %v; dead-after is 2 s)",
			s, firstAt[i].Sub(termed).Round(time.Millisecond), exited.Round(time.Millisecond))
		// Without the release b would wait out the dead-after bound.
		if d := firstAt[i].Sub(termed); d >= 2*time.Second {
			t.Fatalf("%s: b took %v to take over after a graceful close", s, d)
		}
	}
	if v := metric(t, b, `starlog_leader_lease_acquisitions_total{from="released"}`); v != "3" {
		t.Fatalf("b took %q released leases, want 3\nb: %s", v, grepMetrics(t, b, "lease_acquisitions"))
	}
	if v := metric(t, b, `starlog_leader_gate_settles_total{result="ok"}`); v != "" && v != "0" {
		t.Fatalf("b ran %s gate settles after a graceful close, want none", v)
	}
	// a left settle markers for its two chains and nudged b, which
	// settled both in the background.
	if poll.Wait(10*time.Second, func() error {
		if v := metric(t, b, `starlog_leader_nudged_settles_total{result="ok"}`); v != "2" {
			return fmt.Errorf("nudged settles ok %q", v)
		}
		return nil
	}) != nil {
		t.Fatalf("b did not settle a's two chains on a's nudge\nb: %s\na: %s", grepMetrics(t, b, "settles"), a.stderr)
	}
	acks.checkReadBack(t, b)
}

// `star drain --wait` on the leader: it releases every stream (the other
// star takes them without a gate settle), takes no new lease, forwards to
// the new leader, and returns once its terminate gate is open.
func TestDrainOpensTerminateGate(t *testing.T) {
	streams := []string{"d1", "d2", "d3"}
	a, b, acks := twoStarsLedByA(t, streams...)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i, s := range streams {
		wg.Go(func() { acks.loop(b.url, s, fmt.Sprintf("b%d", i), false, stop) })
	}
	acks.waitMore(t, 30*time.Second, "appends through b", 50, streams...)
	if status, out, err := call(a, "GET", "/v1/starlog/drain", ""); err != nil || status != 200 || !strings.Contains(string(out), `"draining":false,"leading":3,"chains_settled":false,"terminate_gate_open":false`) {
		t.Fatalf("drain status before the drain: %d %s %v", status, out, err)
	}

	bin := testsvc.StarBinary(t)
	start := time.Now()
	cmd := exec.Command(bin, "drain", "--wait", "--poll", "50ms", "--endpoint", a.url)
	cmd.Env = cliEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("star drain --wait: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "terminate gate open") {
		t.Fatalf("star drain --wait printed %q", out)
	}
	t.Logf("star drain --wait returned after %v: %s", time.Since(start).Round(time.Millisecond), strings.TrimSpace(string(out)))
	if status, out, err := call(a, "GET", "/v1/starlog/drain", ""); err != nil || status != 200 || !strings.Contains(string(out), `"draining":true,"leading":0,"chains_settled":true,"terminate_gate_open":true`) {
		t.Fatalf("drain status after the drain: %d %s %v", status, out, err)
	}
	// The drained star forwards to the new leader and takes no lease back.
	for _, s := range streams {
		poll.Until(t, 5*time.Second, s+": an append through the drained star acknowledged", func() bool {
			status, out, err := post(a.url, s, false, []string{"via-drained-a"})
			if err != nil || status != 200 {
				return false
			}
			ack, aerr := api.DecodeAppendAckJSON(out)
			if aerr != nil {
				t.Fatal(aerr)
			}
			acks.add(s, ack.Start.SeqNum, []string{"via-drained-a"})
			return true
		})
	}
	close(stop)
	wg.Wait()
	if v := metric(t, a, `starlog_leader_lease_acquisitions_total{from="released"}`); v != "" && v != "0" {
		t.Fatalf("the draining star took %s leases", v)
	}
	if v := metric(t, b, `starlog_leader_lease_acquisitions_total{from="released"}`); v != "3" {
		t.Fatalf("b took %q released leases, want 3\nb: %s", v, grepMetrics(t, b, "lease_acquisitions"))
	}
	if v := metric(t, b, `starlog_leader_gate_settles_total{result="ok"}`); v != "" && v != "0" {
		t.Fatalf("b ran %s gate settles after the drain, want none", v)
	}
	acks.checkReadBack(t, b)
}
