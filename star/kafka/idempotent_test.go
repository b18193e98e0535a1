package kafka_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/kafka"
)

// initProducerID asks c's star for a producer id (no transactional id).
func initProducerID(t *testing.T, c *kgo.Client) (int64, int16) {
	t.Helper()
	resp, err := kmsg.NewPtrInitProducerIDRequest().RequestWith(ctxT(t), c)
	if err != nil || resp.ErrorCode != 0 {
		t.Fatalf("InitProducerId: %v %+v", err, resp)
	}
	return resp.ProducerID, resp.ProducerEpoch
}

// Producer ids are unique across stars on one metastore and across a
// star's restart: each star claims a block of ids from the counter row.
func TestInitProducerIDUniqueAcrossStars(t *testing.T) {
	ms := testsvc.SQLite(t)
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]string{}
	for _, id := range []string{"a", "b", "a-restarted"} {
		s := startStarWith(t, starOpts{meta: ms, objs: objs, id: id, open: true, cluster: true})
		c := s.admin()
		for range 3 {
			pid, epoch := initProducerID(t, c)
			if epoch != 0 || pid < 0 {
				t.Fatalf("star %s: producer id %d epoch %d", id, pid, epoch)
			}
			if other, dup := seen[pid]; dup {
				t.Fatalf("producer id %d handed out by star %s and by %s", pid, other, id)
			}
			seen[pid] = id
		}
	}
}

// produceRaw sends one partition's record batches and returns its base
// offset and error code.
func produceRaw(t *testing.T, c *kgo.Client, topic string, batch []byte) (int64, int16) {
	t.Helper()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10_000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Records = batch
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctxT(t), c)
	if err != nil {
		t.Fatalf("produce: %v", err)
	}
	p := resp.Topics[0].Partitions[0]
	return p.BaseOffset, p.ErrorCode
}

func values(prefix string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "%s%d", prefix, i)
	}
	return out
}

// consumeAll reads partition 0 of topic from the start until it has n
// records.
func consumeAll(t *testing.T, s *star, topic string, n int) []*kgo.Record {
	t.Helper()
	cons := s.admin(kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	var got []*kgo.Record
	for len(got) < n {
		fs := cons.PollFetches(ctxT(t))
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume %s: %v", topic, err)
		}
		got = append(got, fs.Records()...)
	}
	return got
}

// An idempotent producer's batch is applied once by (producer id, epoch,
// sequence): a retry gets its original base offset, as Kafka's last
// batches do; a gap, a stale epoch and an unknown producer get the errors
// Kafka answers them with; a batch over one S2 batch's records is applied
// once too, chunk by chunk.
func TestIdempotentProduceAppliesEachBatchOnce(t *testing.T) {
	s := startStar(t, true)
	c := s.admin()
	createTopic(t, c, "idem", 1)
	pid, _ := initProducerID(t, c)

	steps := []struct {
		name  string
		batch []byte
		base  int64
		code  int16
	}{
		{"first", kafka.EncodeTestIdempotentBatch(pid, 0, 0, values("a", 3)...), 0, 0},
		{"its retry", kafka.EncodeTestIdempotentBatch(pid, 0, 0, values("a", 3)...), 0, 0},
		{"second", kafka.EncodeTestIdempotentBatch(pid, 0, 3, values("b", 2)...), 3, 0},
		{"the first's retry after it", kafka.EncodeTestIdempotentBatch(pid, 0, 0, values("a", 3)...), 0, 0},
		{"a gap", kafka.EncodeTestIdempotentBatch(pid, 0, 9, values("x", 1)...), -1, kerr.OutOfOrderSequenceNumber.Code},
		{"inside a batch", kafka.EncodeTestIdempotentBatch(pid, 0, 1, values("x", 1)...), -1, kerr.OutOfOrderSequenceNumber.Code},
		{"a new epoch", kafka.EncodeTestIdempotentBatch(pid, 1, 0, values("c", 1)...), 5, 0},
		{"the old epoch", kafka.EncodeTestIdempotentBatch(pid, 0, 5, values("x", 1)...), -1, kerr.InvalidProducerEpoch.Code},
		{"an unknown producer", kafka.EncodeTestIdempotentBatch(pid+1_000_000, 0, 7, values("x", 1)...), -1, kerr.UnknownProducerID.Code},
		{"over one S2 batch", kafka.EncodeTestIdempotentBatch(pid, 1, 1, values("d", 2500)...), 6, 0},
		{"its retry", kafka.EncodeTestIdempotentBatch(pid, 1, 1, values("d", 2500)...), 6, 0},
		{"after it", kafka.EncodeTestIdempotentBatch(pid, 1, 2501, values("e", 1)...), 2506, 0},
	}
	for _, st := range steps {
		base, code := produceRaw(t, c, "idem", st.batch)
		if code != st.code || code == 0 && base != st.base {
			t.Fatalf("%s: base offset %d code %d (%v), want %d code %d (%v)", st.name, base, code, kerr.ErrorForCode(code),
				st.base, st.code, kerr.ErrorForCode(st.code))
		}
	}

	// Each value once, in order; the producer's mark is not a Kafka header.
	var want []string
	for _, v := range slices.Concat(values("a", 3), values("b", 2), values("c", 1), values("d", 2500), values("e", 1)) {
		want = append(want, string(v))
	}
	got := consumeAll(t, s, "idem", len(want))
	for i, r := range got {
		if i >= len(want) || string(r.Value) != want[i] || r.Offset != int64(i) || len(r.Headers) != 0 {
			t.Fatalf("record %d: offset %d value %q headers %v, want %q at %d without headers", i, r.Offset, r.Value, r.Headers, want[i], i)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("read %d records, want %d", len(got), len(want))
	}

	// Through S2 the mark shows on each chunk's first record, counted in
	// records.
	b, err := s.n.Read(ctxT(t), kafka.DefaultBasin, "idem/0", api.ReadRequest{From: api.FromSeqNum, Value: 1006, Count: new(uint64(1))}, nil)
	if err != nil || len(b.Records) != 1 {
		t.Fatalf("S2 read of seq 1006: %v %+v", err, b)
	}
	m, ok, aerr := api.ProducerOf(b.Records[0].Headers)
	if !ok || aerr != nil || m != (api.ProducerMark{ID: fmt.Sprintf("kafka-%d", pid), Epoch: 1, Seq: 1001, Records: 1000}) {
		t.Fatalf("seq 1006 (the second chunk's first record) is marked %+v %v %v", m, ok, aerr)
	}

	// A Kafka header may not take a mark's name.
	hdr := s.admin(kgo.DefaultProduceTopic("idem"))
	err = hdr.ProduceSync(ctxT(t), &kgo.Record{Value: []byte("x"), Headers: []kgo.RecordHeader{{Key: api.HeaderProducerSeq, Value: []byte("0")}}}).FirstErr()
	if !errors.Is(err, kerr.InvalidRecord) {
		t.Fatalf("a header named %s: %v, want INVALID_RECORD", api.HeaderProducerSeq, err)
	}
}
