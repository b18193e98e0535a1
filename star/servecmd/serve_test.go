package servecmd_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
)

var listenRE = regexp.MustCompile(`msg=serving listen=(\S+)`)

// startServe runs `star serve` configured only through STARLOG_*
// environment variables (the flags' fallbacks).
func startServe(t *testing.T, env []string) *proc {
	t.Helper()
	bin := testsvc.StarBinary(t)
	cmd := exec.Command(bin, "serve")
	cmd.Env = append(append(os.Environ(), credEnv...), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{cmd: cmd, stderr: &syncBuffer{}, done: make(chan error, 1)}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	urls := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.stderr.Write([]byte(line + "\n"))
			if m := listenRE.FindStringSubmatch(line); m != nil {
				urls <- "http://" + m[1]
			}
		}
		io.Copy(io.Discard, stderr)
	}()
	go func() { p.done <- cmd.Wait() }()
	select {
	case p.url = <-urls:
	case err := <-p.done:
		t.Fatalf("star serve exited: %v\n%s", err, p.stderr)
	case <-time.After(90 * time.Second):
		cmd.Process.Kill()
		t.Fatalf("star serve did not start\n%s", p.stderr)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

// `star serve` on the production backends' protocols (versitygw for S3,
// DynamoDB Local), configured by environment: basins and streams, appends
// on both classes, kill -9, restart, every ack reads back.
func TestServeOnS3AndDynamo(t *testing.T) {
	if testing.Short() {
		t.Skip("starts versitygw, DynamoDB Local and the star binary")
	}
	s3 := testsvc.StartVersity(t, "std-bucket", "exp-a", "exp-b", "exp-c")
	ddb := testsvc.StartDynamo(t)
	env := []string{
		"STARLOG_LISTEN=127.0.0.1:" + fmt.Sprint(testsvc.FreePort(t)),
		"STARLOG_STAR_ID=serve-test",
		"STARLOG_LOG_LEVEL=info",
		"STARLOG_DYNAMO_TABLE=" + ddb.TableName(t),
		"STARLOG_DYNAMO_ENDPOINT=" + ddb.Endpoint,
		"STARLOG_DYNAMO_REGION=" + testsvc.DynamoRegion,
		"STARLOG_DYNAMO_CREATE_TABLE=true",
		"STARLOG_S3_ENDPOINT=" + s3.Endpoint,
		"STARLOG_S3_REGION=" + s3.Region,
		"STARLOG_S3_PATH_STYLE=true",
		"STARLOG_AWS_ACCESS_KEY_ID=" + s3.AccessKey,
		"STARLOG_AWS_SECRET_ACCESS_KEY=" + s3.SecretKey,
		"STARLOG_STANDARD_BUCKETS=std-bucket",
		"STARLOG_EXPRESS_BUCKETS=exp-a,exp-b,exp-c",
		"STARLOG_S3_FLUSH_INTERVAL=5ms",
	}
	p := startServe(t, env)
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/basins", `{"basin":"starlog-dev","config":{"create_stream_on_append":true}}`},
		{"POST", "/v1/streams", `{"stream":"exp","config":{"storage_class":"express"}}`},
	} {
		if status, out, err := call(p, c.method, c.path, c.body); err != nil || status != 201 {
			t.Fatalf("%s %s: %d %s %v", c.method, c.path, status, out, err)
		}
	}
	a := &acked{recs: map[string]map[uint64]string{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range []string{"std", "exp"} {
		wg.Go(func() { appendLoop(p, s, "w", a, stop) })
	}
	a.waitMore(t, 100, "std", "exp") // mid-flight, with enough behind
	p.kill9(t)
	close(stop)
	wg.Wait() // every append in flight has its answer or its error
	a.mu.Lock()
	for _, s := range []string{"std", "exp"} {
		if len(a.recs[s]) == 0 {
			t.Fatalf("no acked records on %s\n%s", s, p.stderr)
		}
	}
	a.mu.Unlock()

	p2 := startServe(t, env)
	if !strings.Contains(p2.stderr.String(), "incarnation=2") {
		t.Fatalf("second start is not incarnation 2:\n%s", p2.stderr)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for stream, want := range a.recs {
		got, tail := readAll(t, p2, stream)
		for seq, body := range want {
			if got[seq] != body {
				t.Fatalf("%s: acknowledged seq %d (%q) reads back as %q (tail %d)", stream, seq, body, got[seq], tail)
			}
		}
		t.Logf("%s: %d acknowledged records read back from S3 and DynamoDB; tail %d", stream, len(want), tail)
	}
}
