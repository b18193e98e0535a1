package kafka_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/kafka"
	"github.com/starlog/starlog/star/node"
)

// Records produced with each compression codec read back from the start
// of the partition, key, value, headers and timestamp intact, at offsets
// that are the stream's seq nums.
func TestProduceEachCompressionConsumeFromStart(t *testing.T) {
	s := startStar(t, true)
	createTopic(t, s.admin(), "events", 2)
	codecs := []struct {
		name  string
		codec kgo.CompressionCodec
	}{
		{"none", kgo.NoCompression()}, {"gzip", kgo.GzipCompression()}, {"snappy", kgo.SnappyCompression()},
		{"lz4", kgo.Lz4Compression()}, {"zstd", kgo.ZstdCompression()},
	}
	ts := time.Now().Add(-time.Hour).Truncate(time.Millisecond) // within the topic's retention
	var want []string
	for i, c := range codecs {
		p := s.admin(kgo.ProducerBatchCompression(c.codec), kgo.DefaultProduceTopic("events"),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		var recs []*kgo.Record
		for j := range 20 {
			v := fmt.Sprintf("%s-%02d", c.name, j)
			recs = append(recs, &kgo.Record{Key: []byte("k-" + v), Value: []byte(v + "-" + string(make([]byte, 100))),
				Headers: []kgo.RecordHeader{{Key: "codec", Value: []byte(c.name)}}, Timestamp: ts.Add(time.Duration(i*20+j) * time.Millisecond)})
			want = append(want, v)
		}
		if err := p.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
			t.Fatalf("produce %s: %v", c.name, err)
		}
		if recs[0].Offset != int64(i*20) || recs[19].Offset != int64(i*20+19) {
			t.Fatalf("%s: offsets %d..%d, want %d..%d", c.name, recs[0].Offset, recs[19].Offset, i*20, i*20+19)
		}
	}
	cons := s.admin(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"events": {0: kgo.NewOffset().AtStart()}}))
	var got []string
	for len(got) < len(want) {
		fs := cons.PollFetches(ctxT(t))
		if err := fs.Err0(); err != nil {
			t.Fatalf("poll: %v", err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			v := string(r.Value[:len(r.Value)-101])
			if r.Offset != int64(len(got)) {
				t.Errorf("record %q at offset %d, want %d", v, r.Offset, len(got))
			}
			if string(r.Key) != "k-"+v || len(r.Headers) != 1 || r.Headers[0].Key != "codec" {
				t.Errorf("record %q: key %q headers %v", v, r.Key, r.Headers)
			}
			if wantTS := ts.Add(time.Duration(len(got)) * time.Millisecond); !r.Timestamp.Equal(wantTS) {
				t.Errorf("record %q: timestamp %v, want %v", v, r.Timestamp, wantTS)
			}
			got = append(got, v)
		})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("consumed %v\nwant %v", got, want)
	}
}

func produceReq(topic string, acks int16, batch []byte) *kmsg.ProduceRequest {
	req := kmsg.NewPtrProduceRequest()
	req.Version, req.Acks, req.TimeoutMillis = 7, acks, 5000 // kmsg's default version is 0
	req.Topics = []kmsg.ProduceRequestTopic{{Topic: topic, Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: batch}}}}
	return req
}

// acks=0 is appended and not answered: the next answer on the connection
// is the next request's.
func TestProduceAcksZeroIsNotAnswered(t *testing.T) {
	s := startStar(t, true)
	createTopic(t, s.admin(), "quiet", 1)
	r := dialRaw(t, s.kafka)
	r.corr++
	frame := kmsg.NewRequestFormatter().AppendRequest(nil, produceReq("quiet", 0, kafka.EncodeTestBatch([]byte("fire"), []byte("forget"))), r.corr)
	if _, err := r.c.Write(frame); err != nil {
		t.Fatal(err)
	}
	if _, err := r.send(kmsg.NewPtrApiVersionsRequest()); err != nil { // send checks the correlation id
		t.Fatal(err)
	}
	tail, err := s.n.CheckTail(ctxT(t), kafka.DefaultBasin, "quiet/0", nil)
	if err != nil || tail.SeqNum != 2 {
		t.Fatalf("after acks=0: tail %d, %v", tail.SeqNum, err)
	}
}

// A Kafka batch over one S2 batch (1,000 records) is appended whole, in
// order, as consecutive S2 batches; the base offset is its first record's.
func TestProduceBatchOverOneS2Batch(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	createTopic(t, c, "big", 1)
	values := make([][]byte, 2500)
	for i := range values {
		values[i] = fmt.Appendf(nil, "v%04d", i)
	}
	resp, err := produceReq("big", -1, kafka.EncodeTestBatch(values...)).RequestWith(ctxT(t), c)
	if err != nil {
		t.Fatal(err)
	}
	if rp := resp.Topics[0].Partitions[0]; rp.ErrorCode != 0 || rp.BaseOffset != 0 {
		t.Fatalf("produce of 2,500 records: code %d base %d", rp.ErrorCode, rp.BaseOffset)
	}
	cons := s.admin(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"big": {0: kgo.NewOffset().AtStart()}}))
	n := 0
	for n < len(values) {
		fs := cons.PollFetches(ctxT(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		for _, r := range fs.Records() {
			if string(r.Value) != string(values[n]) || r.Offset != int64(n) {
				t.Fatalf("record %d: %q at %d", n, r.Value, r.Offset)
			}
			n++
		}
	}
}

// A produce waits for durability no longer than its own TimeoutMillis:
// with the Express buckets hanging, a produce with a 200 ms timeout is
// answered REQUEST_TIMED_OUT well before the face's 30 s bound or the
// flight's deadline.
func TestProduceTimeoutBoundsDurabilityWait(t *testing.T) {
	const flight = 2 * time.Second
	var objs *faults.Store
	s := startStarNode(t, true, testsvc.SQLite(t), func(c *node.Config, d *node.Deps) {
		c.Express.FlightDeadline = flight // the hung flight's end: a failed ack then, and a quick close
		objs = faults.Wrap(d.Objects)
		d.Objects = objs
	})
	c := s.admin()
	createTopic(t, c, "slow", 1)
	buckets := []string{"express-a", "express-b", "express-c"}
	for _, b := range buckets {
		objs.SetDown(b, faults.Down{Hang: true})
	}
	t.Cleanup(func() { // before the star closes
		for _, b := range buckets {
			objs.SetUp(b)
		}
	})
	req := produceReq("slow", -1, kafka.EncodeTestBatch([]byte("late")))
	req.TimeoutMillis = 200
	start := time.Now()
	resp, err := req.RequestWith(ctxT(t), c)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("after %v: %v", took, err)
	}
	if rp := resp.Topics[0].Partitions[0]; rp.ErrorCode != kerr.RequestTimedOut.Code {
		t.Fatalf("code %d (%s) after %v, want REQUEST_TIMED_OUT", rp.ErrorCode, deref(rp.ErrorMessage), took)
	}
	if took < 200*time.Millisecond || took >= flight*3/4 {
		t.Fatalf("answered after %v: want the request's 200 ms timeout", took)
	}
}

// A topic's max.message.bytes (franz-go's kgo suite creates topics with
// it) bounds each produced batch as sent: a larger one is
// MESSAGE_TOO_LARGE with nothing of its partition appended, a smaller one
// is appended, and DescribeConfigs reads the value back.
func TestMaxMessageBytes(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	createTopic(t, c, "bounded", 1, kmsg.CreateTopicsRequestTopicConfig{Name: "max.message.bytes", Value: kmsg.StringPtr("1024")})
	p := s.admin(kgo.DefaultProduceTopic("bounded"), kgo.ProducerBatchCompression(kgo.NoCompression()))
	big := &kgo.Record{Value: make([]byte, 2000)}
	if err := p.ProduceSync(ctxT(t), big).FirstErr(); !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("a 2,000-byte batch to a topic of max.message.bytes 1024: %v, want MESSAGE_TOO_LARGE", err)
	}
	small := &kgo.Record{Value: []byte("fits")}
	if err := p.ProduceSync(ctxT(t), small).FirstErr(); err != nil || small.Offset != 0 {
		t.Fatalf("a small batch: offset %d, %v (want 0: nothing of the large one appended)", small.Offset, err)
	}
	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "bounded",
		ConfigNames: []string{"max.message.bytes"}}}
	resp, err := dc.RequestWith(ctxT(t), c)
	if err != nil {
		t.Fatal(err)
	}
	if r := resp.Resources[0]; r.ErrorCode != 0 || len(r.Configs) != 1 || deref(r.Configs[0].Value) != "1024" {
		t.Fatalf("DescribeConfigs max.message.bytes: %+v", r)
	}
}
