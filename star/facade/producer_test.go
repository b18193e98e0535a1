package facade

import (
	"errors"
	"testing"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/star/producer"
)

func marked(id string, epoch, seq uint64, bodies ...string) Request {
	var req Request
	for i, b := range bodies {
		in := rec(b)
		if i == 0 {
			for _, h := range api.ProducerHeaders(api.ProducerMark{ID: id, Epoch: epoch, Seq: seq}) {
				in.Headers = append(in.Headers, format.Header(h))
			}
		}
		req.Records = append(req.Records, in)
	}
	return req
}

func withProducers(st State) *Stream {
	s := New(Config{}, st)
	s.LoadProducers(producer.New())
	return s
}

func TestProducerBatchAppliesOnceAndRetriesGetItsAck(t *testing.T) {
	s := withProducers(State{NextSeq: 10})
	a := mustSeq(t, s, marked("p", 0, 0, "a", "b"), 100)
	if a.Producer == nil || a.Producer.ID != "p" || a.Start.SeqNum != 10 || a.End.SeqNum != 12 {
		t.Fatalf("first batch %+v", a)
	}
	mustSeq(t, s, batch(rec("other")), 101)
	err := mustReject(t, s, marked("p", 0, 0, "a", "b"), 102)
	var dup DuplicateError
	if !errors.As(err, &dup) || dup.Start != a.Start || dup.End != a.End || !dup.EndTimestampKnown {
		t.Fatalf("retry: got %v, want the original ack [%+v, %+v)", err, a.Start, a.End)
	}
	wantInvalid(t, mustReject(t, s, marked("p", 0, 0, "a"), 102), "must carry its batch's 2 records")
}

// The order of the checks, each combination: a retry's ack wins over any
// condition (the original met them); a new batch meets the fencing token,
// then match_seq_num, then its producer's seq and epoch.
func TestProducerChecksComposeWithConditions(t *testing.T) {
	s := withProducers(State{NextSeq: 0})
	mustSeq(t, s, batch(fence("tok")), 1)
	orig := marked("p", 1, 0, "x")
	orig.FencingToken, orig.MatchSeqNum = str("tok"), u64(1)
	a := mustSeq(t, s, orig, 2)
	mustSeq(t, s, batch(fence("tok2")), 3)

	for _, c := range []struct {
		name  string
		req   Request
		check func(error) bool
	}{
		{"retry, stale token and seq", func() Request {
			r := marked("p", 1, 0, "x")
			r.FencingToken, r.MatchSeqNum = str("tok"), u64(1)
			return r
		}(), func(err error) bool { d, ok := errors.AsType[DuplicateError](err); return ok && d.Start == a.Start }},
		{"gap, wrong token", func() Request { r := marked("p", 1, 5, "x"); r.FencingToken = str("tok"); return r }(),
			func(err error) bool { _, ok := errors.AsType[FencingTokenMismatchError](err); return ok }},
		{"gap, wrong match_seq_num", func() Request { r := marked("p", 1, 5, "x"); r.MatchSeqNum = u64(0); return r }(),
			func(err error) bool { _, ok := errors.AsType[SeqNumMismatchError](err); return ok }},
		{"gap, conditions hold", func() Request {
			r := marked("p", 1, 5, "x")
			r.FencingToken, r.MatchSeqNum = str("tok2"), u64(3)
			return r
		}(), func(err error) bool {
			e, ok := errors.AsType[ProducerError](err)
			n, has := e.Err.ProducerExpectedSeq()
			return ok && e.Err.Code == api.CodeProducerSeqGap && has && n == 1
		}},
		{"stale epoch, conditions hold", func() Request { r := marked("p", 0, 1, "x"); r.FencingToken = str("tok2"); return r }(),
			func(err error) bool {
				e, ok := errors.AsType[ProducerError](err)
				n, has := e.Err.ProducerCurrentEpoch()
				return ok && e.Err.Code == api.CodeProducerEpochStale && has && n == 1
			}},
	} {
		if err := mustReject(t, s, c.req, 4); !c.check(err) {
			t.Errorf("%s: got %T %v", c.name, err, err)
		}
	}
	// The next batch with both conditions met applies.
	next := marked("p", 1, 1, "y")
	next.FencingToken, next.MatchSeqNum = str("tok2"), u64(3)
	if got := mustSeq(t, s, next, 5); got.Start.SeqNum != 3 {
		t.Fatalf("next batch at %d, want 3", got.Start.SeqNum)
	}
}

func TestProducerMarksMalformedOrMisplacedAreInvalid(t *testing.T) {
	s := withProducers(State{})
	bad := marked("p", 0, 0, "x")
	bad.Records[0].Headers[2].Value = []byte("x1")
	wantInvalid(t, mustReject(t, s, bad, 1), "starlog-producer-seq")
	late := batch(rec("a"), marked("p", 0, 0, "b").Records[0])
	wantInvalid(t, mustReject(t, s, late, 1), "only a batch's first record")
	noID := marked("p", 0, 0, "x")
	noID.Records[0].Headers = noID.Records[0].Headers[1:]
	wantInvalid(t, mustReject(t, s, noID, 1), "needs all of")
}

func TestProducerBatchWaitsForTheTable(t *testing.T) {
	s := New(Config{}, State{})
	if err := mustReject(t, s, marked("p", 0, 0, "x"), 1); !errors.Is(err, ErrProducersNotLoaded) {
		t.Fatalf("got %v, want ErrProducersNotLoaded", err)
	}
	mustSeq(t, s, batch(rec("unmarked")), 1)
}

// A mark counted in records (the Kafka face's) must state the batch's
// own record count, and moves the producer's next seq by it.
func TestProducerRecordCountedMark(t *testing.T) {
	s := withProducers(State{NextSeq: 0})
	counted := func(seq, n uint64, bodies ...string) Request {
		req := batch()
		for i, b := range bodies {
			in := rec(b)
			if i == 0 {
				for _, h := range api.ProducerHeaders(api.ProducerMark{ID: "k", Seq: seq, Records: n}) {
					in.Headers = append(in.Headers, format.Header(h))
				}
			}
			req.Records = append(req.Records, in)
		}
		return req
	}
	wantInvalid(t, mustReject(t, s, counted(0, 3, "a", "b"), 1), "says 3 records, the batch has 2")
	mustSeq(t, s, counted(0, 2, "a", "b"), 1)
	a := mustSeq(t, s, counted(2, 1, "c"), 2)
	if a.Start.SeqNum != 2 || a.Producer == nil || a.Producer.Records != 1 {
		t.Fatalf("the batch at seq 2 (after 2 records): %+v", a)
	}
	if _, ok := errors.AsType[DuplicateError](mustReject(t, s, counted(0, 2, "a", "b"), 3)); !ok {
		t.Fatal("a retry of the first batch is not a duplicate")
	}
}
