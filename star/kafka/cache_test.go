package kafka_test

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/testsvc"
)

// Produce and fetch go on while the metastore is out, as the S2 face
// keeps acknowledging appends and serving tail reads through an outage:
// the topic's row is cached, and the one last read serves past its TTL
// while the metastore cannot answer.
func TestProduceAndFetchThroughAMetastoreOutage(t *testing.T) {
	fm := mfaults.New(testsvc.SQLite(t), 1)
	s := startStarOn(t, true, fm)
	c := s.admin(kgo.DefaultProduceTopic("steady"))
	createTopic(t, c, "steady", 1)
	cons := s.admin(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"steady": {0: kgo.NewOffset().AtStart()}}))
	if err := c.ProduceSync(ctxT(t), kgo.StringRecord("one")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if fs := cons.PollFetches(ctxT(t)); fs.Err0() != nil || len(fs.Records()) != 1 {
		t.Fatalf("before the outage: %v, %d records", fs.Err0(), len(fs.Records()))
	}
	fm.SetUnavailable(true)
	t.Cleanup(func() { fm.SetUnavailable(false) }) // before the star's close
	s.k.ExpireTopicCache()
	if err := c.ProduceSync(ctxT(t), kgo.StringRecord("two")).FirstErr(); err != nil {
		t.Fatalf("a produce while the metastore is out: %v", err)
	}
	fs := cons.PollFetches(ctxT(t))
	if err := fs.Err0(); err != nil || len(fs.Records()) != 1 || string(fs.Records()[0].Value) != "two" {
		t.Fatalf("a fetch while the metastore is out: %v, %d records", err, len(fs.Records()))
	}
}
