package servecmd_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/starlog/starlog/shared/testsvc"
)

// freePorts is a loopback port p with p … p+n-1 free (a cluster's stars
// listen on consecutive ports).
func freePorts(t *testing.T, n int) int {
	t.Helper()
	for range 50 {
		base := 20000 + rand.IntN(40000)
		var lns []net.Listener
		for i := range n {
			ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", base+i))
			if err != nil {
				break
			}
			lns = append(lns, ln)
		}
		for _, ln := range lns {
			ln.Close()
		}
		if len(lns) == n {
			return base
		}
	}
	t.Fatalf("no %d consecutive free ports", n)
	return 0
}

// star dev --stars 3 serves Kafka on every star (star serve processes
// with --kafka-listen): a client of star 1 produces to the partition star
// 2 leads (it took the first produce), a client of star 3 consumes every
// record from the start.
func TestDevClusterServesKafkaOnEveryStar(t *testing.T) {
	bin := testsvc.StarBinary(t)
	api, kbase := freePorts(t, 3), freePorts(t, 3)
	cmd := exec.Command(bin, "dev", "--stars", "3", "--data", t.TempDir(), "--basin", "",
		"--listen", fmt.Sprintf("127.0.0.1:%d", api), "--kafka-listen", fmt.Sprintf("127.0.0.1:%d", kbase),
		"--log-level", "warn", "--shutdown-timeout", "5s")
	cmd.Env = append(os.Environ(), credEnv...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
	})
	banner := make(chan string, 64)
	go func() {
		defer close(done)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case banner <- sc.Text():
			default:
			}
		}
		cmd.Wait()
	}()
	var kafkaLines int
	deadline := time.After(90 * time.Second)
	for ready := false; !ready; {
		select {
		case l := <-banner:
			if strings.Contains(l, "  kafka 127.0.0.1:") {
				kafkaLines++
			}
			ready = strings.HasPrefix(l, "Kafka: any star's address")
		case <-done:
			t.Fatalf("star dev --stars 3 exited:\n%s", stderr.String())
		case <-deadline:
			t.Fatalf("no cluster banner with Kafka:\n%s", stderr.String())
		}
	}
	if kafkaLines != 3 {
		t.Fatalf("the banner names %d Kafka listeners, want 3", kafkaLines)
	}
	client := func(i int, opts ...kgo.Opt) *kgo.Client {
		c, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(fmt.Sprintf("127.0.0.1:%d", kbase+i)),
			kgo.SASL(plain.Auth{User: "admin", Pass: testAdminToken}.AsMechanism()), kgo.RetryTimeout(20 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	createKafkaTopic(t, fmt.Sprintf("127.0.0.1:%d", kbase+1), "everywhere")
	if err := client(1).ProduceSync(ctx, &kgo.Record{Topic: "everywhere", Value: []byte("via star-2")}).FirstErr(); err != nil {
		t.Fatalf("produce through star-2: %v", err)
	}
	if err := client(0).ProduceSync(ctx, &kgo.Record{Topic: "everywhere", Key: []byte("k"), Value: []byte("via star-1")}).FirstErr(); err != nil {
		t.Fatalf("produce through star-1: %v", err)
	}
	cons := client(2, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"everywhere": {0: kgo.NewOffset().AtStart()}}))
	var got []string
	for len(got) < 2 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume through star-3: %v", err)
		}
		for _, r := range fs.Records() {
			got = append(got, fmt.Sprintf("%d:%s=%s", r.Offset, r.Key, r.Value))
		}
	}
	if strings.Join(got, " ") != "0:=via star-2 1:k=via star-1" {
		t.Fatalf("consumed through star-3: %v", got)
	}
}
