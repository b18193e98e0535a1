package servecmd_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
)

// proc is a running star process.
type proc struct {
	cmd    *exec.Cmd
	url    string
	stderr *syncBuffer
	done   chan error
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// The credentials every star of these tests runs with (through the
// environment, as a unit would pass them).
const (
	testAdminToken  = "servecmd-admin-token-0123456789"
	testInternalKey = "servecmd-internal-key-0123456789abcdef"
)

var credEnv = []string{"STARLOG_ADMIN_TOKEN=" + testAdminToken, "STARLOG_INTERNAL_KEY=" + testInternalKey}

// cliEnv is the environment of the star CLI in these tests: the admin
// token and the internal key (drain and streams move need it).
func cliEnv() []string {
	return append(os.Environ(), "S2_ACCESS_TOKEN="+testAdminToken, "STARLOG_INTERNAL_KEY="+testInternalKey)
}

// internalCred is the internal credential of testInternalKey.
func internalCred() string {
	c, err := auth.InternalCredential([]byte(testInternalKey))
	if err != nil {
		panic(err)
	}
	return c
}

var endpointRE = regexp.MustCompile(`serving the S2 API on (http://\S+)`)

func startDev(t *testing.T, data string, flags ...string) *proc {
	t.Helper()
	bin := testsvc.StarBinary(t)
	args := append([]string{"dev", "--data", data, "--listen", "127.0.0.1:0", "--s3-flush-interval", "2ms", "--shutdown-timeout", "5s"}, flags...)
	cmd := exec.Command(bin, args...)
	cmd.Env = append(append(os.Environ(), credEnv...), "STARLOG_LOG_LEVEL=warn")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan error, 1)}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := endpointRE.FindStringSubmatch(sc.Text()); m != nil {
				urls <- m[1]
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	go func() { p.done <- cmd.Wait() }()
	select {
	case p.url = <-urls:
	case err := <-p.done:
		t.Fatalf("star dev exited before serving: %v\n%s", err, p.stderr)
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("star dev did not print its endpoint\n%s", p.stderr)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func (p *proc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.done
}

var client = &http.Client{Timeout: 30 * time.Second}

func call(p *proc, method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, p.url+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("s2-basin", "starlog-dev")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+testAdminToken)
	if strings.HasPrefix(path, "/v1/starlog/") { // an operator's call
		req.Header.Set(auth.HeaderInternal, internalCred())
	}
	res, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// acked maps each acknowledged seq num of a stream to its body.
type acked struct {
	mu   sync.Mutex
	recs map[string]map[uint64]string
}

func (a *acked) add(stream string, start uint64, bodies []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.recs[stream] == nil {
		a.recs[stream] = map[uint64]string{}
	}
	for i, b := range bodies {
		a.recs[stream][start+uint64(i)] = b
	}
}

func (a *acked) count(stream string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.recs[stream])
}

// waitAcked waits until each of streams has n more acknowledged records
// than it has now (the producers are under way).
func (a *acked) waitMore(t *testing.T, n int, streams ...string) {
	t.Helper()
	before := map[string]int{}
	for _, s := range streams {
		before[s] = a.count(s)
	}
	poll.Until(t, 30*time.Second, fmt.Sprintf("%d more acknowledged records on %v", n, streams), func() bool {
		for _, s := range streams {
			if a.count(s) < before[s]+n {
				return false
			}
		}
		return true
	})
}

// appendLoop appends batches to stream until stop closes or the star
// dies, recording every acknowledged record.
func appendLoop(p *proc, stream, worker string, a *acked, stop <-chan struct{}) {
	for b := 0; ; b++ {
		select {
		case <-stop:
			return
		default:
		}
		bodies := make([]string, 1+b%5)
		recs := make([]map[string]string, len(bodies))
		for i := range bodies {
			bodies[i] = fmt.Sprintf("%s/%d/%d", worker, b, i)
			recs[i] = map[string]string{"body": bodies[i]}
		}
		body, _ := json.Marshal(map[string]any{"records": recs})
		status, out, err := call(p, "POST", "/v1/streams/"+stream+"/records", string(body))
		if err != nil {
			return // the star died: this append is indefinite
		}
		if status != 200 {
			continue
		}
		ack, aerr := api.DecodeAppendAckJSON(out)
		if aerr == nil {
			a.add(stream, ack.Start.SeqNum, bodies)
		}
	}
}

// readAll reads a stream from 0 to its tail.
func readAll(t *testing.T, p *proc, stream string) (map[uint64]string, uint64) {
	t.Helper()
	status, out, err := call(p, "GET", "/v1/streams/"+stream+"/records/tail", "")
	if err != nil || status != 200 {
		t.Fatalf("tail of %s: %d %s %v", stream, status, out, err)
	}
	tail, terr := api.DecodeTailJSON(out)
	if terr != nil {
		t.Fatal(terr)
	}
	got := map[uint64]string{}
	for next := uint64(0); next < tail.SeqNum; {
		status, out, err := call(p, "GET", fmt.Sprintf("/v1/streams/%s/records?seq_num=%d", stream, next), "")
		if err != nil || status != 200 {
			t.Fatalf("read %s at %d: %d %s %v", stream, next, status, out, err)
		}
		b, berr := api.DecodeReadBatchJSON(out, api.FormatRaw)
		if berr != nil || len(b.Records) == 0 {
			t.Fatalf("read %s at %d: %v %s", stream, next, berr, out)
		}
		for _, r := range b.Records {
			if r.SeqNum != next {
				t.Fatalf("%s: seq %d where %d was expected", stream, r.SeqNum, next)
			}
			got[r.SeqNum] = string(r.Body)
			next++
		}
	}
	return got, tail.SeqNum
}

// The crash test of docs/design.md §15 with a real process: appends run on a
// Standard and an Express stream, the star is kill -9'd mid-flight,
// restarted on the same data, and every acknowledged record reads back at
// its seq num; then a clean SIGTERM stop and a third start do the same.
func TestKill9Restart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	data := t.TempDir()
	p := startDev(t, data)
	if status, out, err := call(p, "POST", "/v1/streams", `{"stream":"exp","config":{"storage_class":"express"}}`); err != nil || status != 201 {
		t.Fatalf("create express stream: %d %s %v", status, out, err)
	}
	a := &acked{recs: map[string]map[uint64]string{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		for _, s := range []string{"std", "exp"} {
			wg.Go(func() { appendLoop(p, s, fmt.Sprintf("w%d", i), a, stop) })
		}
	}
	a.waitMore(t, 200, "std", "exp") // mid-flight, with enough behind
	p.kill9(t)
	close(stop)
	wg.Wait()
	for _, s := range []string{"std", "exp"} {
		if len(a.recs[s]) < 20 {
			t.Fatalf("only %d acked records on %s before the kill", len(a.recs[s]), s)
		}
	}

	check := func(p *proc) {
		t.Helper()
		for stream, want := range a.recs {
			got, tail := readAll(t, p, stream)
			for seq, body := range want {
				if got[seq] != body {
					t.Fatalf("%s: acknowledged seq %d (%q) reads back as %q (tail %d)", stream, seq, body, got[seq], tail)
				}
			}
			t.Logf("%s: %d acknowledged records read back; tail %d", stream, len(want), tail)
		}
	}
	p2 := startDev(t, data)
	check(p2)

	// Appends continue at the tail; then a graceful stop keeps them too.
	stop = make(chan struct{})
	for _, s := range []string{"std", "exp"} {
		wg.Go(func() { appendLoop(p2, s, "after", a, stop) })
	}
	a.waitMore(t, 20, "std", "exp")
	close(stop)
	wg.Wait()
	if err := p2.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := <-p2.done; err != nil {
		t.Fatalf("star dev after SIGTERM: %v\n%s", err, p2.stderr)
	}
	p3 := startDev(t, data)
	check(p3)
}
