package kafka_test

import (
	"errors"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/kafka"
)

// A produce into a basin past its append quota fails with
// POLICY_VIOLATION at once (not retried), and so does creating a topic
// past the basin's stream quota; nothing is appended or created.
func TestProduceAndCreateTopicPastAQuota(t *testing.T) {
	t.Parallel()
	s := startStar(t, true)
	c := s.admin(kgo.DefaultProduceTopic("quota-t"))
	createTopic(t, c, "quota-t", 1)
	ctx := ctxT(t)
	if err := c.ProduceSync(ctx, &kgo.Record{Value: []byte("first")}).FirstErr(); err != nil {
		t.Fatalf("under no quota: %v", err)
	}
	if _, err := s.n.ReconfigureBasin(ctx, kafka.DefaultBasin, api.BasinReconfiguration{Quotas: api.SetTo(api.BasinQuotasReconfiguration{
		AppendBytesPerSec: api.SetTo[uint64](0), Streams: api.SetTo[uint64](1),
	})}); err != nil {
		t.Fatal(err)
	}
	err := c.ProduceSync(ctx, &kgo.Record{Value: []byte("second")}).FirstErr()
	if !errors.Is(err, kerr.PolicyViolation) {
		t.Fatalf("produce past the append quota: %v, want POLICY_VIOLATION", err)
	}
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = "quota-u", 1, -1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if code := resp.Topics[0].ErrorCode; code != kerr.PolicyViolation.Code {
		t.Fatalf("CreateTopics past the stream quota: code %d (%v), want POLICY_VIOLATION", code, kerr.ErrorForCode(code))
	}
	ends := kmsg.NewPtrListOffsetsRequest()
	lt := kmsg.NewListOffsetsRequestTopic()
	lt.Topic = "quota-t"
	lp := kmsg.NewListOffsetsRequestTopicPartition()
	lp.Timestamp = -1
	lt.Partitions = append(lt.Partitions, lp)
	ends.Topics = append(ends.Topics, lt)
	lr, err := ends.RequestWith(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if p := lr.Topics[0].Partitions[0]; p.ErrorCode != 0 || p.Offset != 1 {
		t.Fatalf("quota-t's end offset %d (code %d), want 1: the refused produce appended nothing", p.Offset, p.ErrorCode)
	}
}
