package kafka_test

import (
	"bufio"
	"fmt"
	"io"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/starlog/starlog/shared/poll"
)

// librdkafka through kcat (the Debian package .ci/kcat.sh pins, which
// `make tools` installs) against a star dev process (docs/kafka.md
// "Checked by"): idempotent production across a kill -9, and a group of
// two.

// kcatPath is kcat on PATH; a missing one fails the test.
func kcatPath(t *testing.T) string {
	t.Helper()
	bin, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not found on PATH (run `make tools`, which runs .ci/kcat.sh): %v", err)
	}
	return bin
}

// lines is what a process printed, line by line, as it comes.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) read(r io.Reader, done chan<- struct{}) {
	defer close(done)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		l.mu.Lock()
		l.all = append(l.all, sc.Text())
		l.mu.Unlock()
	}
}

func (l *lines) snapshot() []string { l.mu.Lock(); defer l.mu.Unlock(); return slices.Clone(l.all) }

var kcatDelivered = regexp.MustCompile(`Message delivered to partition 0 \(offset (-?\d+)\)`)

// consumeValues reads partition 0 of topic from the start to its end
// with kgo: offset → value.
func consumeValues(t *testing.T, addr, topic string) map[int64]string {
	t.Helper()
	c, err := kgo.NewClient(kgo.SeedBrokers(addr), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	end := latestOffset(t, c, topic)
	got := map[int64]string{}
	for next := int64(0); next < end; {
		fs := c.PollFetches(ctxT(t))
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume %s: %v", topic, err)
		}
		for _, r := range fs.Records() {
			got[r.Offset] = string(r.Value)
			next = r.Offset + 1
		}
	}
	return got
}

// With librdkafka's idempotence on, a kill -9 of the star while kcat
// produces loses nothing kcat reported delivered and appends nothing
// twice: kcat (-E: it keeps going while its broker is down) retries its
// in-flight batches once the star is back, and the star, which rebuilt
// the producer's state from the records, applies each once. Idempotence
// keeps the delivery reports in the order of the lines.
func TestKcatIdempotentKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds star dev and kills it with SIGKILL")
	}
	t.Parallel() // its own star dev process, ports and data; it mostly waits
	kcat := kcatPath(t)
	star := startDevProcess(t)
	adm, err := kgo.NewClient(kgo.SeedBrokers(star.kafkaAdr), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.Close)
	createTopic(t, adm, "kcrash", 1)

	cmd := exec.Command(kcat, "-b", star.kafkaAdr, "-P", "-E", "-t", "kcrash", "-p", "0", "-v", "-v",
		"-X", "enable.idempotence=true", "-X", "linger.ms=2", "-X", "reconnect.backoff.ms=50",
		"-X", "reconnect.backoff.max.ms=200", "-X", "message.timeout.ms=120000")
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
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	var out lines
	outDone := make(chan struct{})
	go out.read(stderr, outDone)
	delivered := func() []int64 {
		var offs []int64
		for _, l := range out.snapshot() {
			if m := kcatDelivered.FindStringSubmatch(l); m != nil {
				o, _ := strconv.ParseInt(m[1], 10, 64)
				offs = append(offs, o)
			}
		}
		return offs
	}
	stop, written := make(chan struct{}), make(chan int, 1)
	go func() {
		n := 0
		defer func() { written <- n }()
		tick := time.NewTicker(time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			if _, err := fmt.Fprintf(stdin, "v%07d\n", n); err != nil {
				return
			}
			n++
		}
	}()
	poll.Until(t, 30*time.Second, "200 delivery reports before the kill", func() bool { return len(delivered()) >= 200 })
	star.kill()
	before := len(delivered())
	star.start()
	poll.Until(t, 60*time.Second, "200 more delivery reports after the restart", func() bool { return len(delivered()) >= before+200 })
	close(stop)
	n := <-written
	stdin.Close() // kcat flushes what it holds, then exits
	waited := make(chan error, 1)
	go func() { <-outDone; waited <- cmd.Wait() }()
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("kcat: %v\n%s", err, strings.Join(tail(out.snapshot(), 30), "\n"))
		}
	case <-time.After(90 * time.Second):
		t.Fatalf("kcat did not finish within 90 s of its input's end\n%s", strings.Join(tail(out.snapshot(), 30), "\n"))
	}

	offs := delivered()
	got := consumeValues(t, star.kafkaAdr, "kcrash")
	at := map[string]int64{}
	for o, v := range got {
		if p, dup := at[v]; dup {
			t.Fatalf("%s appended twice: at offsets %d and %d", v, min(o, p), max(o, p))
		}
		at[v] = o
	}
	for i, o := range offs {
		v := fmt.Sprintf("v%07d", i)
		if got, ok := at[v]; !ok || o >= 0 && got != o {
			t.Fatalf("line %d (%s), reported delivered at offset %d, reads back at %d (%v)", i, v, o, got, ok)
		}
	}
	if len(offs) != n {
		t.Fatalf("kcat reported %d of %d lines delivered\n%s", len(offs), n, strings.Join(tail(out.snapshot(), 30), "\n"))
	}
	t.Logf("%d lines, all reported delivered (%d before the kill -9); %d records in the partition, none twice", n, before, len(got))
}

func tail(ls []string, n int) []string { return ls[max(0, len(ls)-n):] }

// kcatMember is a kcat -G consumer of a group: the records it printed,
// "partition offset value" a line.
type kcatMember struct {
	cmd    *exec.Cmd
	out    lines
	errOut lines // its messages, "% Group … rebalanced" among them
	done   chan struct{}
}

// (Without -o: kcat -G applies -o to every partition it is assigned,
// over the group's committed offsets; auto.offset.reset applies only
// where there is none.)
func startKcatMember(t *testing.T, kcat, addr, group, topic string) *kcatMember {
	t.Helper()
	m := &kcatMember{done: make(chan struct{})}
	m.cmd = exec.Command(kcat, "-b", addr, "-G", group, "-X", "auto.offset.reset=earliest", "-f", `%p %o %s\n`, "-u",
		"-d", "cgrp", "-X", "session.timeout.ms=6000", "-X", "heartbeat.interval.ms=300", "-X", "auto.commit.interval.ms=100",
		"-X", "topic.metadata.refresh.interval.ms=1000", topic)
	stdout, err := m.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := m.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := m.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go m.out.read(stdout, m.done)
	go m.errOut.read(stderr, make(chan struct{}))
	t.Cleanup(func() {
		_ = m.cmd.Process.Kill()
		_ = m.cmd.Wait()
		if t.Failed() {
			t.Logf("kcat -G %s stderr (its group debug log's end):\n%s", group, strings.Join(tail(m.errOut.snapshot(), 40), "\n"))
		}
	})
	return m
}

var kcatRebalanced = regexp.MustCompile(`^% Group \S+ rebalanced \(memberid \S+\): (assigned|revoked): (.*)$`)

// assigned is the member's assignment as its latest rebalance left it
// ("kgroup [0]"; "" before any, or after a revocation).
func (m *kcatMember) assigned() string {
	got := ""
	for _, l := range m.errOut.snapshot() {
		if r := kcatRebalanced.FindStringSubmatch(l); r != nil {
			got = ""
			if r[1] == "assigned" {
				got = r[2]
			}
		}
	}
	return got
}

// read is what the member printed: partition → offset → value.
func (m *kcatMember) read(t *testing.T) map[int32]map[int64]string {
	t.Helper()
	got := map[int32]map[int64]string{}
	for _, l := range m.out.snapshot() {
		f := strings.Fields(l)
		p, err1 := strconv.Atoi(f[0])
		o, err2 := strconv.ParseInt(f[1], 10, 64)
		if len(f) != 3 || err1 != nil || err2 != nil {
			t.Fatalf("kcat -G printed %q", l)
		}
		if got[int32(p)] == nil {
			got[int32(p)] = map[int64]string{}
		}
		if _, dup := got[int32(p)][o]; dup {
			t.Fatalf("a member read partition %d offset %d twice", p, o)
		}
		got[int32(p)][o] = f[2]
	}
	return got
}

// leave stops the member as a user would (SIGTERM): kcat commits what it
// read and leaves the group.
func (m *kcatMember) leave(t *testing.T) {
	t.Helper()
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
	case <-time.After(30 * time.Second):
		t.Fatal("kcat -G did not stop within 30 s of SIGTERM")
	}
	_ = m.cmd.Wait()
}

// count is how many records the members printed together.
func count(ms ...*kcatMember) int {
	n := 0
	for _, m := range ms {
		n += len(m.out.snapshot())
	}
	return n
}

// kcat in a group of two (librdkafka's classic consumer group): the two
// split a topic's two partitions; when one leaves, the group rebalances
// and the other takes its partition from its committed offset; a member
// that joins after both left resumes from the commits. Each record is
// read once by the group.
func TestKcatGroupOfTwo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds star dev")
	}
	t.Parallel() // its own star dev process, ports and data; it mostly waits
	kcat := kcatPath(t)
	star := startDevProcess(t)
	adm, err := kgo.NewClient(kgo.SeedBrokers(star.kafkaAdr), kgo.RetryTimeout(30*time.Second),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.Close)
	createTopic(t, adm, "kgroup", 2)

	// The records come once the two have split the partitions: before
	// that, a member that read a partition before a rebalance moved it
	// may read it again (the group commits after reading, as Kafka's).
	a := startKcatMember(t, kcat, star.kafkaAdr, "kg", "kgroup")
	b := startKcatMember(t, kcat, star.kafkaAdr, "kg", "kgroup")
	poll.Until(t, 60*time.Second, "the two members assigned a partition each", func() bool {
		pa, pb := a.assigned(), b.assigned()
		return pa != "" && pb != "" && pa != pb && !strings.Contains(pa, ",") && !strings.Contains(pb, ",")
	})
	produceTo(t, adm, "kgroup", 2, 20)
	poll.Until(t, 60*time.Second, "the two members read the 40 records", func() bool { return count(a, b) >= 40 })
	ra, rb := a.read(t), b.read(t)
	if len(ra) != 1 || len(rb) != 1 || len(ra[0])+len(ra[1]) != 20 || len(rb[0])+len(rb[1]) != 20 {
		t.Fatalf("the members did not split the partitions: a read %d+%d, b %d+%d", len(ra[0]), len(ra[1]), len(rb[0]), len(rb[1]))
	}

	b.leave(t)
	produceTo(t, adm, "kgroup", 2, 10) // offsets 20…29 of each
	poll.Until(t, 60*time.Second, "a reads the 20 new records of both partitions after b left", func() bool { return count(a) >= 40 })
	ra = a.read(t)
	for p := range int32(2) {
		if len(ra[p]) != 30 && len(ra[p]) != 10 {
			t.Fatalf("after b left, a read %d records of partition %d, want its 30 or b's 10 new ones", len(ra[p]), p)
		}
		for o := range int64(30) {
			if v, ok := ra[p][o]; ok && v != fmt.Sprintf("p%d-%d", p, o%20) && v != fmt.Sprintf("p%d-%d", p, o-20) {
				t.Fatalf("a read %q at partition %d offset %d", v, p, o)
			}
			if _, ok := ra[p][o]; !ok && o >= 20 {
				t.Fatalf("a did not read partition %d offset %d", p, o)
			}
		}
	}
	a.leave(t)

	// A new member resumes from the group's commits: it reads only what
	// is produced after.
	c := startKcatMember(t, kcat, star.kafkaAdr, "kg", "kgroup")
	produceTo(t, adm, "kgroup", 2, 3) // offsets 30…32
	poll.Until(t, 60*time.Second, "the new member reads the 6 newest records", func() bool { return count(c) >= 6 })
	rc := c.read(t)
	for p := range int32(2) {
		if len(rc[p]) != 3 || rc[p][30] != fmt.Sprintf("p%d-0", p) || rc[p][32] != fmt.Sprintf("p%d-2", p) {
			t.Fatalf("the member that joined after the others left read %v of partition %d, want offsets 30…32", rc[p], p)
		}
	}
}
