package node_test

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/producer"
)

// producerBatch is n records of body prefix, the first marked (id, epoch,
// seq).
func producerBatch(id string, epoch, seq uint64, prefix string, n int) *api.AppendInput {
	in := records(prefix, n)
	in.Records[0].Headers = api.ProducerHeaders(api.ProducerMark{ID: id, Epoch: epoch, Seq: seq})
	return in
}

func sameAck(t *testing.T, what string, got, want api.AppendAck) {
	t.Helper()
	if got.Start != want.Start || got.End != want.End {
		t.Fatalf("%s: ack [%+v, %+v), want the original [%+v, %+v)", what, got.Start, got.End, want.Start, want.End)
	}
}

func countBodies(t *testing.T, n *node.Node, basin, stream string) map[string]int {
	t.Helper()
	c := map[string]int{}
	for _, r := range readAll(t, n, basin, stream) {
		c[string(r.Body)]++
	}
	return c
}

// A marked batch applies once: a retry gets the original ack and appends
// nothing, on the star that applied it and on a star that restarted over
// the same stores (it folds the records); a gap and a stale epoch are
// 409s naming the number; a malformed mark is 422.
func TestProducerRetriesAcrossRestart(t *testing.T) {
	st := newStores(t)
	ctx := context.Background()
	n1 := open(t, st, testConfig())
	if _, err := n1.CreateBasin(ctx, api.CreateBasinRequest{Basin: "prod-basin", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n1.Append(ctx, "prod-basin", "s", records("plain", 2), nil); err != nil {
		t.Fatal(err)
	}
	a0, err := n1.Append(ctx, "prod-basin", "s", producerBatch("p", 0, 0, "b0", 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	a1, err := n1.Append(ctx, "prod-basin", "s", producerBatch("p", 0, 1, "b1", 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	r1, err := n1.Append(ctx, "prod-basin", "s", producerBatch("p", 0, 1, "b1", 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	sameAck(t, "retry on the same star", r1, a1)
	_, err = n1.Append(ctx, "prod-basin", "s", producerBatch("p", 0, 3, "b3", 1), nil)
	if e := apiErr(t, err, http.StatusConflict, api.CodeProducerSeqGap); func() bool { n, _ := e.ProducerExpectedSeq(); return n != 2 }() {
		t.Fatalf("gap names %v, want 2", e)
	}
	bad := producerBatch("p", 0, 2, "bad", 1)
	bad.Records[0].Headers[1].Value = []byte("zero")
	_, err = n1.Append(ctx, "prod-basin", "s", bad, nil)
	apiErr(t, err, http.StatusUnprocessableEntity, api.CodeInvalid)

	// kill -9 stand-in: no Close; the next incarnation deposes n1.
	n2 := open(t, st, testConfig())
	r0, err := n2.Append(ctx, "prod-basin", "s", producerBatch("p", 0, 0, "b0", 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	sameAck(t, "retry of seq 0 after the restart", r0, a0)
	// The load's fold left a checkpoint at the tail it folded to, so the
	// next star to open the stream starts there.
	if c := producerCheckpoint(t, st, streamIDIn(t, st, "prod-basin", "s")); c.Next != 7 || len(c.Producers) != 1 || c.Producers[0].Next != 2 {
		t.Fatalf("checkpoint after the load %+v, want next 7 with p at seq 2", c)
	}
	r1, err = n2.Append(ctx, "prod-basin", "s", producerBatch("p", 0, 1, "b1", 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	sameAck(t, "retry of seq 1 after the restart", r1, a1)
	_, err = n2.Append(ctx, "prod-basin", "s", producerBatch("p", 0, 3, "b3", 1), nil)
	apiErr(t, err, http.StatusConflict, api.CodeProducerSeqGap)
	a2, err := n2.Append(ctx, "prod-basin", "s", producerBatch("p", 0, 2, "b2", 1), nil)
	if err != nil || a2.Start.SeqNum != 7 {
		t.Fatalf("seq 2 after the restart: %+v %v, want it at 7", a2, err)
	}
	if _, err := n2.Append(ctx, "prod-basin", "s", producerBatch("p", 1, 0, "e1", 1), nil); err != nil {
		t.Fatal(err)
	}
	_, err = n2.Append(ctx, "prod-basin", "s", producerBatch("p", 0, 3, "b3", 1), nil)
	if e := apiErr(t, err, http.StatusConflict, api.CodeProducerEpochStale); func() bool { n, _ := e.ProducerCurrentEpoch(); return n != 1 }() {
		t.Fatalf("stale epoch names %v, want 1", e)
	}
	got := countBodies(t, n2, "prod-basin", "s")
	for _, b := range []string{"b0-0", "b0-2", "b1-0", "b1-1", "b2-0", "e1-0"} {
		if got[b] != 1 {
			t.Fatalf("%s read back %d times, want once (all: %v)", b, got[b], got)
		}
	}
	if got["b3-0"] != 0 || got["bad-0"] != 0 || len(got) != 9 {
		t.Fatalf("read back %v", got)
	}
}

// The new leader after a handoff rebuilds the producers from the records.
func TestProducerRetryAfterHandoff(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	a := open(t, st, clusterConfig("a"))
	b := open(t, st, clusterConfig("b"))
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	orig, err := a.Append(ctx, "basin-one", "s1", producerBatch("p", 4, 0, "x", 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Handoff(ctx, "basin-one", "s1", "b"); err != nil {
		t.Fatal(err)
	}
	retry, err := b.Append(ctx, "basin-one", "s1", producerBatch("p", 4, 0, "x", 5), nil)
	if err != nil {
		t.Fatal(err)
	}
	sameAck(t, "retry on the new leader", retry, orig)
	if got := readAll(t, b, "basin-one", "s1"); len(got) != 5 {
		t.Fatalf("read back %d records, want 5", len(got))
	}
}

// A checkpoint is written once enough records were appended, and a star
// that opens the stream starts its fold there: a producer batch from
// before the checkpoint is still a duplicate, and its ack is exact.
func TestProducerCheckpointRestart(t *testing.T) {
	st := newStores(t)
	ctx := context.Background()
	n1 := open(t, st, testConfig())
	if _, err := n1.CreateBasin(ctx, api.CreateBasinRequest{Basin: "ckpt-basin", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	first, err := n1.Append(ctx, "ckpt-basin", "s", producerBatch("p", 0, 0, "p0", 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < producer.CheckpointEvery/1000+1; i++ {
		if _, err := n1.Append(ctx, "ckpt-basin", "s", records(fmt.Sprint("fill", i), 1000), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := n1.Append(ctx, "ckpt-basin", "s", producerBatch("q", 0, 0, "q0", 1), nil); err != nil {
		t.Fatal(err)
	}
	id := streamIDIn(t, st, "ckpt-basin", "s")
	waitProducerCheckpoint(t, st, id)

	n2 := open(t, st, testConfig())
	retry, err := n2.Append(ctx, "ckpt-basin", "s", producerBatch("p", 0, 0, "p0", 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if retry != (api.AppendAck{Start: first.Start, End: first.End, Tail: retry.Tail}) {
		t.Fatalf("retry after the checkpoint %+v, want the original %+v", retry, first)
	}
}

func streamIDIn(t *testing.T, st stores, basin, name string) string {
	t.Helper()
	k := meta.StreamNameKey(basin, name)
	it, err := st.meta.Get(context.Background(), k.PK, k.SK)
	if err != nil {
		t.Fatal(err)
	}
	var row node.StreamRow
	if err := meta.Decode(it.Val, &row); err != nil {
		t.Fatal(err)
	}
	return row.ID
}

// waitProducerCheckpoint waits for the stream's producer checkpoint to
// cover at least producer.CheckpointEvery records and to name producer p.
func waitProducerCheckpoint(t *testing.T, st stores, id string) {
	t.Helper()
	poll.UntilErr(t, 10*time.Second, "the producer checkpoint", func() error {
		it, err := st.meta.Get(context.Background(), "producers#"+id, "checkpoint")
		if err != nil {
			return err
		}
		c, err := producer.DecodeCheckpoint(it.Val)
		if err != nil {
			return err
		}
		if c.Next < producer.CheckpointEvery || len(c.Producers) == 0 || c.Producers[0].ID != "p" {
			return fmt.Errorf("checkpoint %+v", c)
		}
		return nil
	})
}

func producerCheckpoint(t *testing.T, st stores, id string) producer.Checkpoint {
	t.Helper()
	it, err := st.meta.Get(context.Background(), "producers#"+id, "checkpoint")
	if err != nil {
		t.Fatalf("producer checkpoint of %s: %v", id, err)
	}
	c, err := producer.DecodeCheckpoint(it.Val)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
