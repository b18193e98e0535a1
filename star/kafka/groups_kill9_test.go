package kafka_test

import (
	"net"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
)

// devProcess is a `star dev --open` process on fixed addresses and data
// folder, which a test kills with SIGKILL and starts again.
type devProcess struct {
	t                  *testing.T
	bin, data          string
	httpAddr, kafkaAdr string
	cmd                *exec.Cmd
	out                strings.Builder
}

func startDevProcess(t *testing.T) *devProcess {
	t.Helper()
	bin := testsvc.StarBinary(t) // once for the package
	p := &devProcess{t: t, bin: bin, data: t.TempDir(),
		httpAddr: testsvc.Addr(testsvc.FreePort(t)), kafkaAdr: testsvc.Addr(testsvc.FreePort(t))}
	p.start()
	t.Cleanup(p.kill)
	return p
}

func (p *devProcess) start() {
	p.t.Helper()
	p.cmd = exec.Command(p.bin, "dev", "--open", "--data", p.data, "--listen", p.httpAddr,
		"--kafka-listen", p.kafkaAdr, "--shutdown-timeout", "5s", "--log-level", "warn")
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STARLOG_") { // the star reads them as flag defaults
			p.cmd.Env = append(p.cmd.Env, kv)
		}
	}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	poll.UntilErr(p.t, 60*time.Second, "star dev's Kafka listener at "+p.kafkaAdr, func() error {
		c, err := net.DialTimeout("tcp", p.kafkaAdr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
}

// kill sends SIGKILL (kill -9) and waits for the process to go.
func (p *devProcess) kill() {
	if p.cmd == nil || p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
}

// commitPlain commits one offset of partition 0 for a group with no
// members (generation -1): Kafka's plain store of offsets.
func commitPlain(t *testing.T, c *kgo.Client, group, topic string, offset int64) error {
	req := kmsg.NewPtrOffsetCommitRequest()
	req.Group, req.Generation = group, -1
	rt := kmsg.NewOffsetCommitRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewOffsetCommitRequestTopicPartition()
	rp.Partition, rp.Offset = 0, offset
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctxT(t), c)
	if err != nil {
		return err
	}
	return kerr.ErrorForCode(resp.Topics[0].Partitions[0].ErrorCode)
}

// A kill -9 of the coordinator (a real star dev) loses no acknowledged
// commit: commits racing the kill are all there after the restart, and a
// group member rejoins the new coordinator and resumes from its commit,
// reading nothing twice.
func TestGroupCommitsSurviveKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds star dev and kills it with SIGKILL")
	}
	began := time.Now()
	star := startDevProcess(t)
	t.Logf("star dev built and started in %s", time.Since(began).Round(time.Millisecond))
	adm, err := kgo.NewClient(kgo.SeedBrokers(star.kafkaAdr), kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.RetryTimeout(30*time.Second), kgo.MetadataMinAge(10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.Close)
	createTopic(t, adm, "ledger", 2)
	produceTo(t, adm, "ledger", 2, 5)

	m := joinGroup(t, star.kafkaAdr, "kg", "ledger", kgo.RetryTimeout(30*time.Second))
	poll.Until(t, 20*time.Second, "the member read both partitions to 5", func() bool { return m.next(0) == 5 && m.next(1) == 5 })
	if err := m.c.CommitMarkedOffsets(ctxT(t)); err != nil {
		t.Fatalf("the member's commit: %v", err)
	}

	// Plain commits of increasing offsets, one after another, until the
	// kill stops them: every one acknowledged must survive.
	var acked atomic.Int64
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		for off := int64(1); ; off++ {
			if commitPlain(t, adm, "plain", "ledger", off) != nil {
				return
			}
			acked.Store(off)
		}
	}()
	poll.Until(t, 20*time.Second, "20 plain commits acknowledged", func() bool { return acked.Load() >= 20 })
	star.kill()
	<-stopped
	last := acked.Load()
	restarted := time.Now()
	star.start()
	t.Logf("restarted after kill -9 in %s", time.Since(restarted).Round(time.Millisecond))

	got := committedOffsets(t, adm, "plain", "ledger", 1)[0]
	if got < last || got > last+1 {
		t.Fatalf("after kill -9: committed %d, but %d was acknowledged (one more may have landed unacknowledged)", got, last)
	}
	if kg := committedOffsets(t, adm, "kg", "ledger", 2); kg[0] != 5 || kg[1] != 5 {
		t.Fatalf("the member's commit after kill -9: %v, want 5 on both", kg)
	}
	t.Logf("after kill -9: %d plain commits acknowledged, %d committed", last, got)

	// The member rejoins the restarted coordinator (which has no
	// membership) and resumes from its commit.
	produceTo(t, adm, "ledger", 2, 2)
	poll.Until(t, 60*time.Second, "the member read the 2 new records of each partition", func() bool { return m.next(0) == 7 && m.next(1) == 7 })
	t.Logf("the member resumed %s after the restart", time.Since(restarted).Round(time.Millisecond))
	m.mu.Lock()
	defer m.mu.Unlock()
	for p := range int32(2) {
		if want := []int64{0, 1, 2, 3, 4, 5, 6}; !slices.Equal(m.seen[p], want) {
			t.Fatalf("partition %d read %v, want %v (each once)", p, m.seen[p], want)
		}
	}
}
