package servecmd_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/starlog/starlog/shared/poll"
)

// librdkafka through kcat (the Debian package .ci/kcat.sh pins, installed
// by `make tools`) against star dev: docs/kafka.md "Checked by".

// kcatBin is kcat on PATH; a missing one fails the test (run make tools).
func kcatBin(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found on PATH (run `make tools`, which runs .ci/kcat.sh): %v", err)
	}
	return bin
}

// kcatArgs are the broker and SASL/PLAIN flags of a kcat run against
// addr, with the admin token as the password.
func kcatArgs(addr string, more ...string) []string {
	return append([]string{"-b", addr, "-X", "security.protocol=SASL_PLAINTEXT", "-X", "sasl.mechanisms=PLAIN",
		"-X", "sasl.username=kcat", "-X", "sasl.password=" + testAdminToken}, more...)
}

// freeAddr is a loopback address with a free port (a restarted star
// listens on it again).
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// createKafkaTopic creates a one-partition topic through the Kafka face.
func createKafkaTopic(t *testing.T, addr, topic string) {
	t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(plain.Auth{User: "admin", Pass: testAdminToken}.AsMechanism()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: topic, NumPartitions: 1, ReplicationFactor: -1}}
	resp, err := req.RequestWith(ctx, c)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics %s: %v %+v", topic, err, resp)
	}
}

// kcatConsume reads partition 0 of topic from the beginning to its end:
// offset → "key=value".
func kcatConsume(t *testing.T, addr, topic string) map[int64]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, kcatBin(t), kcatArgs(addr, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
		"-f", `%o %k=%s\n`)...).Output()
	if err != nil {
		t.Fatalf("kcat -C: %v\n%s", err, out)
	}
	got := map[int64]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		o, kv, ok := strings.Cut(l, " ")
		n, err := strconv.ParseInt(o, 10, 64)
		if !ok || err != nil {
			t.Fatalf("kcat -C printed %q", l)
		}
		got[n] = kv
	}
	return got
}

// kcat produces keyed records and consumes them from the beginning, at
// offsets 0 … n-1.
func TestKcatProduceConsume(t *testing.T) {
	kcat := kcatBin(t)
	addr := freeAddr(t)
	startDev(t, t.TempDir(), "--kafka-listen", addr)
	createKafkaTopic(t, addr, "kcat")
	var in strings.Builder
	for i := range 20 {
		fmt.Fprintf(&in, "k%d:v%d\n", i, i)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, kcatArgs(addr, "-P", "-t", "kcat", "-p", "0", "-K:")...)
	cmd.Stdin = strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	got := kcatConsume(t, addr, "kcat")
	if len(got) != 20 {
		t.Fatalf("consumed %d records, want 20: %v", len(got), got)
	}
	for i := range 20 {
		if want := fmt.Sprintf("k%d=v%d", i, i); got[int64(i)] != want {
			t.Fatalf("offset %d: %q, want %q", i, got[int64(i)], want)
		}
	}
}

var kcatDeliveredRE = regexp.MustCompile(`Message delivered to partition 0 \(offset (\d+)\)`)

// A kill -9 of the star while kcat produces loses no record kcat was told
// was delivered: after a restart on the same data each reads back at the
// offset its delivery report gave (kcat itself ends when its broker is
// gone). Idempotence is off (star/kafka's TestKcatIdempotentKill9 runs
// it on), so a batch retried across the kill may be appended twice:
// duplicates are allowed here, losses are not. One request in flight keeps the delivery
// reports in the order of the lines, so the i-th report is the i-th line.
func TestKcatKill9LosesNoAcknowledgedRecord(t *testing.T) {
	kcat := kcatBin(t)
	addr := freeAddr(t)
	data := t.TempDir()
	p := startDev(t, data, "--kafka-listen", addr)
	createKafkaTopic(t, addr, "crash")

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, kcatArgs(addr, "-P", "-t", "crash", "-p", "0", "-K:", "-v", "-v",
		"-X", "enable.idempotence=false", "-X", "max.in.flight.requests.per.connection=1",
		"-X", "linger.ms=1", "-X", "reconnect.backoff.max.ms=200", "-X", "message.timeout.ms=60000")...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var acked []int64 // the i-th delivery report's offset: line i's
	var logs []string // kcat's other lines
	reports := make(chan struct{})
	go func() {
		defer close(reports)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := kcatDeliveredRE.FindStringSubmatch(sc.Text()); m != nil {
				o, _ := strconv.ParseInt(m[1], 10, 64)
				mu.Lock()
				acked = append(acked, o)
				mu.Unlock()
			} else if len(logs) < 50 {
				mu.Lock()
				logs = append(logs, sc.Text())
				mu.Unlock()
			}
		}
	}()
	ackedN := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	// The writer feeds lines until told to stop; kcat reads stdin as it
	// comes, so records are in flight when the star dies.
	stop := make(chan struct{})
	written := make(chan int, 1)
	go func() {
		n := 0
		defer func() { written <- n }()
		// Paced (a line a millisecond at most), so kcat's queue stays
		// short and drains soon after the restart.
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := fmt.Fprintf(stdin, "k%d:v%d\n", n, n); err != nil {
				return
			}
			n++
		}
	}()
	poll.Until(t, 30*time.Second, "200 delivery reports before the kill", func() bool { return ackedN() >= 200 })
	p.kill9(t)
	// kcat ends itself once its one broker is down ("All broker
	// connections are down: terminating", exit status 1); what it
	// reported delivered before then is what must survive.
	close(stop)
	n := <-written
	stdin.Close()
	<-reports
	err = cmd.Wait()
	mu.Lock()
	defer mu.Unlock()
	if len(acked) < 200 || len(acked) >= n {
		t.Fatalf("kcat (%v) reported %d deliveries of %d lines: the kill came after every line was delivered, or the reports are lost\n%s",
			err, len(acked), n, strings.Join(logs, "\n"))
	}
	startDev(t, data, "--kafka-listen", addr)
	got := kcatConsume(t, addr, "crash")
	for i, o := range acked {
		if want := fmt.Sprintf("k%d=v%d", i, i); got[o] != want {
			t.Fatalf("line %d, reported delivered at offset %d, reads back %q after the restart", i, o, got[o])
		}
	}
	t.Logf("%d of %d lines reported delivered before the kill -9; %d records in the partition after the restart", len(acked), n, len(got))
}
