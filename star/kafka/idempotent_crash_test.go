package kafka_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/kafka"
)

// idemRun is a kgo producer (idempotent: kgo's default) writing numbered
// values to partition 0 of a topic until stopped, and what it was told.
type idemRun struct {
	c       *kgo.Client
	mu      sync.Mutex
	acked   map[string]int64 // value → the offset its produce was acknowledged at
	failed  map[string]error
	sent    int
	stop    chan struct{}
	stopped chan struct{}
}

func startIdemRun(t *testing.T, seed, topic string, opts ...kgo.Opt) *idemRun {
	t.Helper()
	c, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(seed), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.ProducerLinger(time.Millisecond),
		kgo.RetryTimeout(60 * time.Second),
		kgo.MetadataMinAge(10 * time.Millisecond), kgo.RecordDeliveryTimeout(120 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	r := &idemRun{c: c, acked: map[string]int64{}, failed: map[string]error{}, stop: make(chan struct{}), stopped: make(chan struct{})}
	go func() {
		defer close(r.stopped)
		tick := time.NewTicker(500 * time.Microsecond) // paced: a short queue drains soon after a restart
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-r.stop:
				return
			case <-tick.C:
			}
			v := fmt.Sprintf("v%07d", i)
			r.mu.Lock()
			r.sent++
			r.mu.Unlock()
			c.Produce(context.Background(), &kgo.Record{Value: []byte(v)}, func(rec *kgo.Record, err error) {
				r.mu.Lock()
				defer r.mu.Unlock()
				if err != nil {
					r.failed[v] = err
					return
				}
				r.acked[v] = rec.Offset
			})
		}
	}()
	return r
}

func (r *idemRun) ackedN() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.acked) }

// finish stops producing and waits for every record's outcome.
func (r *idemRun) finish(t *testing.T) {
	t.Helper()
	close(r.stop)
	<-r.stopped
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	if err := r.c.Flush(ctx); err != nil {
		t.Fatalf("flush: %v", err)
	}
	if id, epoch, err := r.c.ProducerID(ctx); err != nil || id < 0 {
		t.Fatalf("kgo produced without a producer id (%d, epoch %d, %v): not idempotently", id, epoch, err)
	}
}

// check reads partition 0 of topic from the start through c and fails on
// a value read twice, an acknowledged value missing or read at another
// offset than its ack's.
func (r *idemRun) check(t *testing.T, c *kgo.Client, topic string) {
	t.Helper()
	end := latestOffset(t, c, topic)
	cons, err := kgo.NewClient(kgo.SeedBrokers(c.OptValue(kgo.SeedBrokers).([]string)...),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	at := map[string]int64{}
	for next := int64(0); next < end; {
		fs := cons.PollFetches(ctxT(t))
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume: %v", err)
		}
		for _, rec := range fs.Records() {
			v := string(rec.Value)
			if o, dup := at[v]; dup {
				t.Fatalf("%s read twice: at offsets %d and %d", v, o, rec.Offset)
			}
			at[v] = rec.Offset
			next = rec.Offset + 1
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for v, o := range r.acked {
		if got, ok := at[v]; !ok || got != o {
			t.Fatalf("%s acknowledged at offset %d, read at %d (%v)", v, o, got, ok)
		}
	}
	t.Logf("%d records sent, %d acknowledged, %d failed, %d in the partition, none twice", r.sent, len(r.acked), len(r.failed), len(at))
	for v, err := range r.failed {
		t.Logf("first failure: %s: %v", v, err)
		break
	}
}

// A kill -9 of the star (a real star dev) while kgo produces
// idempotently (its default, up to five requests in flight): after the
// restart kgo retries what it was not told of, and every record it was
// told of reads back once, at its acknowledged offset; no record reads
// twice.
func TestIdempotentProduceSurvivesKill9(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: builds star dev and kills it with SIGKILL")
	}
	t.Parallel() // its own star dev process, ports and data; it mostly waits
	star := startDevProcess(t)
	adm, err := kgo.NewClient(kgo.SeedBrokers(star.kafkaAdr), kgo.RetryTimeout(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(adm.Close)
	createTopic(t, adm, "exactly", 1)

	r := startIdemRun(t, star.kafkaAdr, "exactly")
	poll.Until(t, 30*time.Second, "300 records acknowledged before the kill", func() bool { return r.ackedN() >= 300 })
	star.kill()
	before := r.ackedN()
	star.start()
	poll.Until(t, 60*time.Second, "300 more records acknowledged after the restart", func() bool { return r.ackedN() >= before+300 })
	r.finish(t)
	t.Logf("%d acknowledged before the kill -9", before)
	r.check(t, adm, "exactly")
}

// A handoff of the partition's stream while kgo produces idempotently
// through another star, which forwards to the leader: the new leader
// rebuilds the producer's state, so the retries across the handoff apply
// nothing twice and lose nothing acknowledged.
func TestIdempotentProduceAcrossHandoff(t *testing.T) {
	ms := testsvc.SQLite(t)
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string) *star {
		return startStarWith(t, starOpts{meta: ms, objs: objs, id: id, open: true, cluster: true})
	}
	a, b, c := mk("a"), mk("b"), mk("c")
	createTopic(t, b.admin(), "moving", 1)
	if err := b.admin().ProduceSync(ctxT(t), &kgo.Record{Topic: "moving", Value: []byte("first")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if nl := a.n.LeaderOf(ctxT(t), kafka.DefaultBasin, "moving/0"); nl == nil || nl.Leader.Star != "b" {
		t.Fatalf("star a sees the leader of moving/0 as %v, want b", nl)
	}

	r := startIdemRun(t, a.kafka, "moving")
	poll.Until(t, 30*time.Second, "300 records acknowledged before the handoff", func() bool { return r.ackedN() >= 300 })
	res, err := b.n.Handoff(ctxT(t), kafka.DefaultBasin, "moving/0", "c")
	if err != nil {
		t.Fatalf("handoff to c: %v", err)
	}
	before := r.ackedN()
	poll.Until(t, 30*time.Second, "300 more records acknowledged after the handoff", func() bool { return r.ackedN() >= before+300 })
	if nl := a.n.LeaderOf(ctxT(t), kafka.DefaultBasin, "moving/0"); nl == nil || nl.Leader.Star != "c" {
		t.Fatalf("after the handoff star a sees the leader of moving/0 as %v, want c", nl)
	}
	r.finish(t)
	t.Logf("handoff %+v; %d acknowledged before it", res, before)
	r.check(t, c.admin(), "moving")
}

// latestOffset is partition 0's end offset, from ListOffsets.
func latestOffset(t *testing.T, c *kgo.Client, topic string) int64 {
	t.Helper()
	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = topic
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.Timestamp = 0, -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	resp, err := lo.RequestWith(ctxT(t), c)
	if err != nil || resp.Topics[0].Partitions[0].ErrorCode != 0 {
		t.Fatalf("latest offset of %s: %v %+v", topic, err, resp)
	}
	return resp.Topics[0].Partitions[0].Offset
}
