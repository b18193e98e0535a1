package kafka_test

import (
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fetchReq is a fetch of one partition from offset.
func fetchReq(topic string, p int32, offset int64, maxWait time.Duration, minBytes int32) *kmsg.FetchRequest {
	req := kmsg.NewPtrFetchRequest()
	req.Version = 12
	req.MaxWaitMillis, req.MinBytes, req.MaxBytes = int32(maxWait.Milliseconds()), minBytes, 1<<20
	req.SessionEpoch = -1
	rt := kmsg.NewFetchRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewFetchRequestTopicPartition()
	rp.Partition, rp.FetchOffset, rp.PartitionMaxBytes = p, offset, 1<<20
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	return req
}

// A fetch at the tail waits (MaxWaitMs) and is answered as soon as a
// record is produced, not at the end of its wait.
func TestFetchLongPollWakesOnProduce(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	createTopic(t, c, "wake", 1)
	waiting := make(chan struct{}, 1)
	s.k.SetFetchWaiting(func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	})
	const maxWait = 20 * time.Second
	type result struct {
		resp    *kmsg.FetchResponse
		err     error
		elapsed time.Duration
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		resp, err := fetchReq("wake", 0, 0, maxWait, 1).RequestWith(ctxT(t), c)
		done <- result{resp, err, time.Since(start)}
	}()
	select {
	case <-waiting:
	case <-time.After(10 * time.Second):
		t.Fatal("the fetch did not start waiting")
	}
	p := s.admin(kgo.DefaultProduceTopic("wake"))
	if err := p.ProduceSync(ctxT(t), kgo.StringRecord("hello")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.elapsed >= maxWait/2 {
		t.Fatalf("the fetch answered after %v: it did not wake on the produce", r.elapsed)
	}
	rp := r.resp.Topics[0].Partitions[0]
	if rp.ErrorCode != 0 || rp.HighWatermark != 1 || len(rp.RecordBatches) == 0 {
		t.Fatalf("woken fetch: code %d, high watermark %d, %d batch bytes", rp.ErrorCode, rp.HighWatermark, len(rp.RecordBatches))
	}
}

// With nothing to read a fetch waits MaxWaitMs, then answers empty; one
// past the tail is OFFSET_OUT_OF_RANGE at once.
func TestFetchWaitsThenAnswersEmpty(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	createTopic(t, c, "quiet", 1)
	const maxWait = 300 * time.Millisecond
	start := time.Now()
	resp, err := fetchReq("quiet", 0, 0, maxWait, 1).RequestWith(ctxT(t), c)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < maxWait {
		t.Fatalf("an empty fetch answered after %v, before its wait of %v", el, maxWait)
	}
	if rp := resp.Topics[0].Partitions[0]; rp.ErrorCode != 0 || len(rp.RecordBatches) != 0 || rp.HighWatermark != 0 {
		t.Fatalf("empty fetch: code %d, %d batch bytes, high watermark %d", rp.ErrorCode, len(rp.RecordBatches), rp.HighWatermark)
	}
	resp, err = fetchReq("quiet", 0, 5, maxWait, 1).RequestWith(ctxT(t), c)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.OffsetOutOfRange.Code {
		t.Fatalf("fetch past the tail: code %d, want OFFSET_OUT_OF_RANGE", code)
	}
	resp, err = fetchReq("nosuch", 0, 0, 0, 1).RequestWith(ctxT(t), c)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("fetch of a missing topic: code %d, want UNKNOWN_TOPIC_OR_PARTITION", code)
	}
}

// A partition with nothing to answer carries empty record bytes, not
// null: librdkafka (kcat) fails the whole fetch on a null record set
// before v12 ("invalid MessageSetSize -1").
func TestFetchEmptyRecordsAreNotNull(t *testing.T) {
	s := startStar(t, true)
	createTopic(t, s.admin(), "empty", 1)
	r := dialRaw(t, s.kafka)
	req := fetchReq("empty", 0, 0, 0, 1)
	req.Version = 11
	resp, err := r.send(req)
	if err != nil {
		t.Fatal(err)
	}
	rp := resp.(*kmsg.FetchResponse).Topics[0].Partitions[0]
	if rp.ErrorCode != 0 || rp.RecordBatches == nil {
		t.Fatalf("an empty partition's fetch v11: code %d, records nil %v", rp.ErrorCode, rp.RecordBatches == nil)
	}
}

// MinBytes counts what every partition answers: short of it, a fetch
// waits its MaxWaitMs for more, also when what it has is not at a tail,
// and then answers what it has.
func TestFetchMinBytesWaitsForMore(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	createTopic(t, c, "some", 1)
	if err := s.admin(kgo.DefaultProduceTopic("some")).ProduceSync(ctxT(t), kgo.StringRecord("one")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	const maxWait = 300 * time.Millisecond
	start := time.Now()
	resp, err := fetchReq("some", 0, 0, maxWait, 1<<20).RequestWith(ctxT(t), c)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < maxWait {
		t.Errorf("a fetch short of MinBytes answered after %v, before its wait of %v", el, maxWait)
	}
	if rp := resp.Topics[0].Partitions[0]; rp.ErrorCode != 0 || len(rp.RecordBatches) == 0 {
		t.Fatalf("code %d, %d batch bytes", rp.ErrorCode, len(rp.RecordBatches))
	}
}
