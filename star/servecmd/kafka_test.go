package servecmd_test

import (
	"bufio"
	"context"
	"net"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/starlog/starlog/shared/testsvc"
)

var kafkaBannerRE = regexp.MustCompile(`^  kafka:   (\S+) \(bootstrap server`)

// startDevKafka runs star dev with flags and returns the Kafka address
// its banner prints ("" when it prints none) and the admin token.
func startDevKafka(t *testing.T, flags ...string) (string, string) {
	t.Helper()
	bin := testsvc.StarBinary(t)
	cmd := exec.Command(bin, append([]string{"dev", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--shutdown-timeout", "5s", "--log-level", "warn"}, flags...)...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STARLOG_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
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
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
		cmd.Wait()
		close(done)
	}()
	var addr, tok string
	deadline := time.After(60 * time.Second)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("star dev exited before its banner ended:\n%s", stderr.String())
			}
			if m := kafkaBannerRE.FindStringSubmatch(l); m != nil {
				addr = m[1]
			}
			if m := devTokenRE.FindStringSubmatch(l); m != nil {
				tok = m[1]
			}
			if strings.HasPrefix(l, "S2 SDKs and the star CLI") {
				go func() {
					for range lines {
					}
				}()
				return addr, tok
			}
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("no banner:\n%s", stderr.String())
		}
	}
}

// star dev serves Kafka where --kafka-listen says, prints it in its
// banner, and a client with the dev token as its SASL/PLAIN password
// creates a topic, produces and consumes.
func TestDevServesKafka(t *testing.T) {
	addr, tok := startDevKafka(t, "--kafka-listen", "127.0.0.1:0")
	if addr == "" || tok == "" {
		t.Fatalf("banner: kafka %q, token %q", addr, tok)
	}
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.SASL(plain.Auth{User: "dev", Pass: tok}.AsMechanism()),
		kgo.DefaultProduceTopic("hello"), kgo.ConsumeTopics("hello"), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "hello", NumPartitions: 1, ReplicationFactor: -1}}
	resp, err := req.RequestWith(ctx, c)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics: %v %+v", err, resp)
	}
	if err := c.ProduceSync(ctx, kgo.StringRecord("hi")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	fs := c.PollFetches(ctx)
	if err := fs.Err0(); err != nil || len(fs.Records()) != 1 || string(fs.Records()[0].Value) != "hi" {
		t.Fatalf("consumed %d records, %v", len(fs.Records()), err)
	}
}

// A taken default port leaves star dev serving without Kafka (no banner
// line); a taken port asked for is an error.
func TestDevKafkaPortTaken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	bin := testsvc.StarBinary(t)
	out, err := exec.Command(bin, "dev", "--data", t.TempDir(), "--listen", "127.0.0.1:0", "--kafka-listen", ln.Addr().String()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "--kafka-listen") {
		t.Fatalf("a taken --kafka-listen: %v\n%s", err, out)
	}
}
