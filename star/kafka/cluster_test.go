package kafka_test

import (
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/kafka"
)

// Three stars on one metastore and one object store, each serving Kafka:
// a client of star A produces to a partition star B leads, a client of
// star C consumes it from the start and lists its offsets, each star's
// Metadata naming itself as the one broker leading every partition
// (docs/kafka.md, "Many stars"). Authenticated, so the forwarded calls
// carry the client's token.
func TestManyStarsForwardToTheLeader(t *testing.T) {
	ms := testsvc.SQLite(t)
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	mk := func(id string) *star { return startStarWith(t, starOpts{meta: ms, objs: objs, id: id, cluster: true}) }
	a, b, c := mk("a"), mk("b"), mk("c")

	createTopic(t, b.admin(), "spread", 1)
	first := &kgo.Record{Topic: "spread", Value: []byte("through b")}
	if err := b.admin().ProduceSync(ctxT(t), first).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if nl := a.n.LeaderOf(ctxT(t), kafka.DefaultBasin, "spread/0"); nl == nil || nl.Leader.Star != "b" {
		t.Fatalf("star a sees the leader of spread/0 as %v, want b", nl)
	}

	md := metadata(t, a.admin(), "spread")
	if len(md.Brokers) != 1 || md.Brokers[0].Host+":"+itoa(md.Brokers[0].Port) != a.kafka ||
		len(md.Topics) != 1 || md.Topics[0].Partitions[0].Leader != md.Brokers[0].NodeID {
		t.Fatalf("star a's Metadata: brokers %+v, topics %+v (want one broker at %s leading spread/0)", md.Brokers, md.Topics, a.kafka)
	}

	pa := a.admin(kgo.DefaultProduceTopic("spread"), kgo.ProducerLinger(0))
	var recs []*kgo.Record
	for i := range 5 {
		recs = append(recs, &kgo.Record{Key: []byte{'k', byte('0' + i)}, Value: []byte("through a"),
			Headers: []kgo.RecordHeader{{Key: "n", Value: []byte{byte('0' + i)}}}})
	}
	if err := pa.ProduceSync(ctxT(t), recs...).FirstErr(); err != nil {
		t.Fatalf("produce through star a to a partition b leads: %v", err)
	}
	for i, r := range recs {
		if r.Offset != int64(i+1) {
			t.Fatalf("record %d acknowledged at offset %d, want %d", i, r.Offset, i+1)
		}
	}

	cons := c.admin(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"spread": {0: kgo.NewOffset().AtStart()}}))
	var got []*kgo.Record
	for len(got) < 6 {
		fs := cons.PollFetches(ctxT(t))
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume through star c: %v", err)
		}
		got = append(got, fs.Records()...)
	}
	if string(got[0].Value) != "through b" || got[0].Offset != 0 {
		t.Fatalf("offset 0 through c: %q at %d", got[0].Value, got[0].Offset)
	}
	for i, r := range got[1:] {
		if r.Offset != int64(i+1) || string(r.Key) != string(recs[i].Key) || string(r.Value) != "through a" ||
			len(r.Headers) != 1 || string(r.Headers[0].Value) != string(recs[i].Headers[0].Value) {
			t.Fatalf("record %d through c: offset %d key %q value %q headers %v", i+1, r.Offset, r.Key, r.Value, r.Headers)
		}
	}

	lo := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "spread"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Partition, lp.Timestamp = 0, -1
	lt.Partitions = append(lt.Partitions, lp)
	lo.Topics = append(lo.Topics, lt)
	resp, err := lo.RequestWith(ctxT(t), c.admin())
	if err != nil {
		t.Fatal(err)
	}
	if p := resp.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 6 {
		t.Fatalf("latest offset through c: %d (code %d), want 6", p.Offset, p.ErrorCode)
	}
}

func itoa(p int32) string { return fmt.Sprint(p) }

// With an advertised address (the load balancer's) Metadata and
// DescribeCluster name it as the one broker, whatever address the client
// reached; a malformed one is refused at start.
func TestAdvertisedAddress(t *testing.T) {
	s := startStarOn(t, true, testsvc.SQLite(t), func(c *kafka.Config) { c.Advertise = "kafka.example.net:9092" })
	// Raw requests: a kgo client would go on to dial the advertised name.
	r := dialRaw(t, s.kafka)
	resp, err := r.send(kmsg.NewPtrMetadataRequest())
	if err != nil {
		t.Fatal(err)
	}
	if md := resp.(*kmsg.MetadataResponse); len(md.Brokers) != 1 || md.Brokers[0].Host != "kafka.example.net" || md.Brokers[0].Port != 9092 {
		t.Fatalf("Metadata brokers: %+v, want kafka.example.net:9092", md.Brokers)
	}
	resp, err = r.send(kmsg.NewPtrDescribeClusterRequest())
	if err != nil {
		t.Fatal(err)
	}
	if dc := resp.(*kmsg.DescribeClusterResponse); len(dc.Brokers) != 1 || dc.Brokers[0].Host != "kafka.example.net" || dc.Brokers[0].Port != 9092 {
		t.Fatalf("DescribeCluster brokers: %+v", dc.Brokers)
	}
	for _, bad := range []string{"no-port", "host:0", ":9092"} {
		if _, err := kafka.New(kafka.Config{Star: s.n, Open: true, Advertise: bad}); err == nil {
			t.Fatalf("advertised address %q accepted", bad)
		}
	}
}
