package kafka_test

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/kafka"
)

// counterReads counts the reads of the producer id counter row.
type counterReads struct {
	meta.Store
	n atomic.Int64
}

func (c *counterReads) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	if sk == "producer-ids" {
		c.n.Add(1)
	}
	return c.Store.Get(ctx, pk, sk)
}

// A producer id no InitProducerId handed out is refused with
// UNKNOWN_PRODUCER_ID (on which kgo and librdkafka ask for a new one),
// nothing appended, at sequence 0 too: an id past the counter row, and
// one of this star's block not handed out yet. An id another star handed
// out after this one read the counter is accepted (the row is read again),
// and the ids handed out are accepted without reading it on each produce.
func TestProduceRefusesNeverIssuedProducerID(t *testing.T) {
	ms := testsvc.SQLite(t)
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	cr := &counterReads{Store: ms}
	a := startStarWith(t, starOpts{meta: cr, objs: objs, id: "a", open: true, cluster: true})
	a.k.SetProducerIDRecheck(0)
	b := startStarWith(t, starOpts{meta: ms, objs: objs, id: "b", open: true, cluster: true})
	ca := a.admin()
	createTopic(t, ca, "pids", 1)
	pid, _ := initProducerID(t, ca) // a claims [pid, pid+ProducerIDBlock)

	for _, st := range []struct {
		name string
		pid  int64
	}{
		{"past the counter", pid + 5*kafka.ProducerIDBlock},
		{"in this star's block, not handed out", pid + 1},
	} {
		base, code := produceRaw(t, ca, "pids", kafka.EncodeTestIdempotentBatch(st.pid, 0, 0, values("x", 1)...))
		if code != kerr.UnknownProducerID.Code {
			t.Fatalf("%s (id %d): base offset %d code %d (%v), want UNKNOWN_PRODUCER_ID", st.name, st.pid, base, code, kerr.ErrorForCode(code))
		}
	}

	other, _ := initProducerID(t, b.admin()) // b claims the next block
	steps := []struct {
		name string
		pid  int64
		seq  int32
		base int64
	}{
		{"handed out here", pid, 0, 0},
		{"handed out by another star since", other, 0, 1},
	}
	for i := range 20 {
		steps = append(steps, struct {
			name string
			pid  int64
			seq  int32
			base int64
		}{"handed out here, again", pid, int32(1 + i), int64(2 + i)})
	}
	var readsBefore int64
	for i, st := range steps {
		if i == 2 {
			readsBefore = cr.n.Load()
		}
		base, code := produceRaw(t, ca, "pids", kafka.EncodeTestIdempotentBatch(st.pid, 0, st.seq, values("y", 1)...))
		if code != 0 || base != st.base {
			t.Fatalf("%s (id %d seq %d): base offset %d code %d (%v), want %d", st.name, st.pid, st.seq, base, code, kerr.ErrorForCode(code), st.base)
		}
	}
	if n := cr.n.Load() - readsBefore; n != 0 {
		t.Fatalf("%d reads of the producer id counter for 20 produces of an id known issued, want 0", n)
	}
}
