package kafka_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/kafka"
)

func metadata(t *testing.T, c *kgo.Client, topics ...string) *kmsg.MetadataResponse {
	t.Helper()
	req := kmsg.NewPtrMetadataRequest()
	if topics != nil {
		req.Topics = []kmsg.MetadataRequestTopic{}
	}
	for _, tp := range topics {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(tp)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctxT(t), c)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func findTopic(resp *kmsg.MetadataResponse, name string) *kmsg.MetadataResponseTopic {
	for i := range resp.Topics {
		if deref(resp.Topics[i].Topic) == name {
			return &resp.Topics[i]
		}
	}
	return nil
}

// A topic's life through the admin requests: created with a retention,
// described (Metadata, DescribeConfigs, DescribeCluster), grown
// (CreatePartitions), deleted with its streams, and created anew empty.
func TestTopicLifecycle(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	ctx := ctxT(t)
	created := createTopic(t, c, "orders", 3, kmsg.CreateTopicsRequestTopicConfig{Name: "retention.ms", Value: kmsg.StringPtr("3600000")})
	if created.NumPartitions != 3 {
		t.Fatalf("created with %d partitions", created.NumPartitions)
	}
	md := metadata(t, c)
	mt := findTopic(md, "orders")
	if mt == nil || len(mt.Partitions) != 3 || mt.TopicID != created.TopicID || mt.ErrorCode != 0 {
		t.Fatalf("metadata of orders: %+v", mt)
	}
	if len(md.Brokers) != 1 || md.Brokers[0].NodeID != mt.Partitions[2].Leader {
		t.Fatalf("brokers %+v, leader %d", md.Brokers, mt.Partitions[2].Leader)
	}
	for p := range 3 {
		if _, err := s.n.StreamConfig(ctx, kafka.DefaultBasin, "orders/"+string(rune('0'+p))); err != nil {
			t.Fatalf("stream of partition %d: %v", p, err)
		}
	}

	dc := kmsg.NewPtrDescribeConfigsRequest()
	dc.Resources = []kmsg.DescribeConfigsRequestResource{{ResourceType: kmsg.ConfigResourceTypeTopic, ResourceName: "orders"}}
	dresp, err := dc.RequestWith(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	var retention string
	for _, cfg := range dresp.Resources[0].Configs {
		if cfg.Name == "retention.ms" {
			retention = deref(cfg.Value)
		}
	}
	if dresp.Resources[0].ErrorCode != 0 || retention != "3600000" {
		t.Fatalf("DescribeConfigs: code %d, retention.ms %q", dresp.Resources[0].ErrorCode, retention)
	}
	cl, err := kmsg.NewPtrDescribeClusterRequest().RequestWith(ctx, c)
	if err != nil || cl.ErrorCode != 0 || len(cl.Brokers) != 1 || cl.ClusterID != "starlog" {
		t.Fatalf("DescribeCluster: %+v, %v", cl, err)
	}

	cp := kmsg.NewPtrCreatePartitionsRequest()
	cp.Topics = []kmsg.CreatePartitionsRequestTopic{{Topic: "orders", Count: 5}}
	cpr, err := cp.RequestWith(ctx, c)
	if err != nil || cpr.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreatePartitions: %v %+v", err, cpr)
	}
	if mt := findTopic(metadata(t, c, "orders"), "orders"); mt == nil || len(mt.Partitions) != 5 {
		t.Fatalf("after CreatePartitions: %+v", mt)
	}
	sc, err := s.n.StreamConfig(ctx, kafka.DefaultBasin, "orders/4")
	if err != nil || sc.RetentionPolicy == nil || sc.RetentionPolicy.AgeSecs != 3600 {
		t.Fatalf("new partition's stream: %+v, %v", sc, err)
	}
	cp.Topics[0].Count = 4
	if cpr, _ = cp.RequestWith(ctx, c); cpr.Topics[0].ErrorCode != kerr.InvalidPartitions.Code {
		t.Fatalf("shrinking: code %d", cpr.Topics[0].ErrorCode)
	}

	p := s.admin(kgo.DefaultProduceTopic("orders"), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err := p.ProduceSync(ctx, &kgo.Record{Partition: 4, Value: []byte("x")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	dt := kmsg.NewPtrDeleteTopicsRequest()
	dt.TopicNames = []string{"orders"}                                             // v0–5
	dt.Topics = []kmsg.DeleteTopicsRequestTopic{{Topic: kmsg.StringPtr("orders")}} // v6
	dtr, err := dt.RequestWith(ctx, c)
	if err != nil || len(dtr.Topics) != 1 || dtr.Topics[0].ErrorCode != 0 {
		t.Fatalf("DeleteTopics: %v %+v", err, dtr)
	}
	if mt := findTopic(metadata(t, c, "orders"), "orders"); mt == nil || mt.ErrorCode != kerr.UnknownTopicOrPartition.Code {
		t.Fatalf("metadata after delete: %+v", mt)
	}
	if findTopic(metadata(t, c), "orders") != nil {
		t.Fatal("a deleted topic is still listed")
	}
	var ae *api.Error
	if _, err := s.n.StreamConfig(ctx, kafka.DefaultBasin, "orders/4"); !errors.As(err, &ae) || (ae.Status != 404 && ae.Code != api.CodeStreamDeletionPending) {
		t.Fatalf("stream of a deleted partition: %v", err)
	}
	// The name is free again once the streams' deletion is done (the
	// deletion-pending window: 300 ms here).
	var again kmsg.CreateTopicsResponseTopic
	poll.UntilErr(t, 10*time.Second, "re-creating orders", func() error {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "orders", NumPartitions: 5, ReplicationFactor: -1}}
		resp, err := req.RequestWith(ctx, c)
		if err != nil {
			return err
		}
		again = resp.Topics[0]
		if again.ErrorCode != 0 {
			return fmt.Errorf("code %d: %s", again.ErrorCode, deref(again.ErrorMessage))
		}
		return nil
	})
	if again.ErrorCode != 0 || again.TopicID == created.TopicID {
		t.Fatalf("re-created: code %d %s, same id %v", again.ErrorCode, deref(again.ErrorMessage), again.TopicID == created.TopicID)
	}
	tail, err := s.n.CheckTail(ctx, kafka.DefaultBasin, "orders/4", nil)
	if err != nil || tail.SeqNum != 0 {
		t.Fatalf("re-created partition 4: tail %d, %v", tail.SeqNum, err)
	}
}

// CreateTopics refuses what it cannot serve, each with its own code.
func TestCreateTopicsRefusals(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	createTopic(t, c, "taken", 1)
	cases := []struct {
		name  string
		topic kmsg.CreateTopicsRequestTopic
		code  int16
	}{
		{"slash", kmsg.CreateTopicsRequestTopic{Topic: "a/b", NumPartitions: 1, ReplicationFactor: -1}, kerr.InvalidTopicException.Code},
		{"taken", kmsg.CreateTopicsRequestTopic{Topic: "taken", NumPartitions: 1, ReplicationFactor: -1}, kerr.TopicAlreadyExists.Code},
		{"no partitions", kmsg.CreateTopicsRequestTopic{Topic: "zero", NumPartitions: 0, ReplicationFactor: -1}, kerr.InvalidPartitions.Code},
		{"too many", kmsg.CreateTopicsRequestTopic{Topic: "huge", NumPartitions: kafka.MaxPartitions + 1, ReplicationFactor: -1}, kerr.InvalidPartitions.Code},
		{"compaction", kmsg.CreateTopicsRequestTopic{Topic: "compact", NumPartitions: 1, ReplicationFactor: -1,
			Configs: []kmsg.CreateTopicsRequestTopicConfig{{Name: "cleanup.policy", Value: kmsg.StringPtr("compact")}}}, kerr.InvalidConfig.Code},
		{"unknown config", kmsg.CreateTopicsRequestTopic{Topic: "odd", NumPartitions: 1, ReplicationFactor: -1,
			Configs: []kmsg.CreateTopicsRequestTopicConfig{{Name: "segment.bytes", Value: kmsg.StringPtr("1")}}}, kerr.InvalidConfig.Code},
	}
	for _, tc := range cases {
		req := kmsg.NewPtrCreateTopicsRequest()
		req.Topics = []kmsg.CreateTopicsRequestTopic{tc.topic}
		resp, err := req.RequestWith(context.Background(), c)
		if err != nil {
			t.Fatal(err)
		}
		if got := resp.Topics[0].ErrorCode; got != tc.code {
			t.Errorf("%s: code %d (%s), want %d", tc.name, got, deref(resp.Topics[0].ErrorMessage), tc.code)
		}
	}
	if findTopic(metadata(t, c), "zero") != nil || findTopic(metadata(t, c), "compact") != nil {
		t.Fatal("a refused topic was created")
	}
}

// ListOffsets: earliest, latest, and the first record at or after a
// timestamp (none past the last: -1).
func TestListOffsets(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	createTopic(t, c, "times", 1)
	// An hour ago: within the topic's retention (reads skip records
	// older than its age at once, as Kafka's retention.ms deletes them).
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	p := s.admin(kgo.DefaultProduceTopic("times"))
	for i := range 5 {
		if err := p.ProduceSync(ctxT(t), &kgo.Record{Value: []byte("v"), Timestamp: base.Add(time.Duration(i) * time.Second)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	ask := func(ts int64) kmsg.ListOffsetsResponseTopicPartition {
		req := kmsg.NewPtrListOffsetsRequest()
		rt := kmsg.NewListOffsetsRequestTopic()
		rt.Topic = "times"
		rp := kmsg.NewListOffsetsRequestTopicPartition()
		rp.Timestamp = ts
		rt.Partitions = append(rt.Partitions, rp)
		req.Topics = append(req.Topics, rt)
		resp, err := req.RequestWith(ctxT(t), c)
		if err != nil {
			t.Fatal(err)
		}
		return resp.Topics[0].Partitions[0]
	}
	for _, tc := range []struct {
		name           string
		ts             int64
		offset, wantTS int64
	}{
		{"earliest", -2, 0, -1},
		{"latest", -1, 5, -1},
		{"at the third", base.Add(2 * time.Second).UnixMilli(), 2, base.Add(2 * time.Second).UnixMilli()},
		{"between", base.Add(2500 * time.Millisecond).UnixMilli(), 3, base.Add(3 * time.Second).UnixMilli()},
		{"past the last", base.Add(time.Minute).UnixMilli(), -1, -1},
	} {
		got := ask(tc.ts)
		if got.ErrorCode != 0 || got.Offset != tc.offset || got.Timestamp != tc.wantTS {
			t.Errorf("%s: code %d offset %d timestamp %d, want offset %d timestamp %d", tc.name, got.ErrorCode, got.Offset, got.Timestamp, tc.offset, tc.wantTS)
		}
	}
}

// A produce to a partition whose stream is gone (its topic being deleted
// by another star: the streams go first, then the row) does not bring
// the stream back: it is UNKNOWN_TOPIC_OR_PARTITION, and the stream stays
// deleted.
func TestProduceDoesNotRecreateADeletedPartition(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	ctx := ctxT(t)
	createTopic(t, c, "going", 1)
	if err := s.n.DeleteStream(ctx, kafka.DefaultBasin, "going/0"); err != nil {
		t.Fatal(err)
	}
	// Past the deletion-pending window (300 ms here) the name is free.
	poll.UntilErr(t, 10*time.Second, "the stream's deletion", func() error {
		_, err := s.n.StreamConfig(ctx, kafka.DefaultBasin, "going/0")
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status == 404 {
			return nil
		}
		return fmt.Errorf("stream config: %v", err)
	})
	prod := kmsg.NewPtrProduceRequest()
	prod.Acks, prod.TimeoutMillis = -1, 5000
	prod.Topics = []kmsg.ProduceRequestTopic{{Topic: "going", Partitions: []kmsg.ProduceRequestTopicPartition{{Partition: 0, Records: kafka.EncodeTestBatch([]byte("late"))}}}}
	resp, err := prod.RequestWith(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].Partitions[0].ErrorCode; code != kerr.UnknownTopicOrPartition.Code {
		t.Errorf("produce to a deleted partition: code %d, want UNKNOWN_TOPIC_OR_PARTITION", code)
	}
	if _, err := s.n.StreamConfig(ctx, kafka.DefaultBasin, "going/0"); err == nil {
		t.Fatal("the produce brought the deleted partition's stream back")
	}
}
