package verify

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/starlog/starlog/shared/api"
)

var errReset = errors.New("connection reset by peer")

func batchOf(bodies ...string) ([]api.Record, []uint64) {
	rs := make([]api.Record, len(bodies))
	for i, b := range bodies {
		rs[i] = api.Record{Body: []byte(b)}
	}
	return rs, recs(bodies...)
}

func ack(start, n uint64) api.AppendAck {
	return api.AppendAck{Start: api.StreamPosition{SeqNum: start}, End: api.StreamPosition{SeqNum: start + n}, Tail: api.StreamPosition{SeqNum: start + n}}
}

// An indefinite append no read returned is pruned; one a read returned
// stays, and the history checks out either way.
func TestHistoryPrunesUnobservedIndefiniteAppends(t *testing.T) {
	h := NewHistory()
	_, a := batchOf("a")
	_, x := batchOf("x")
	_, y := batchOf("y")
	h.RecordAppend(0, &Input{Stream: "s", Kind: KindAppend, Records: a}, h.Now(), ack(0, 1), nil)
	h.RecordAppend(1, &Input{Stream: "s", Kind: KindAppend, Records: x}, h.Now(), api.AppendAck{}, errReset)
	h.RecordAppend(2, &Input{Stream: "s", Kind: KindAppend, Records: y}, h.Now(), api.AppendAck{}, errReset)
	rs, _ := batchOf("a", "y")
	rs[0].SeqNum, rs[1].SeqNum = 0, 1
	h.RecordRead(3, &Input{Stream: "s", Kind: KindRead, From: 0, Count: 10}, h.Now(), &api.ReadBatch{Records: rs}, nil)
	ops := h.Operations()
	if len(ops) != 3 {
		t.Fatalf("%d operations after pruning, want 3 (x pruned)", len(ops))
	}
	st := h.Stats()
	if st.Indefinite != 2 || st.Pruned != 1 || st.Acked != 1 {
		t.Fatalf("stats %+v", st)
	}
	if res := porcupine.CheckOperationsTimeout(Model(), ops, 0); res != porcupine.Ok {
		t.Fatalf("check = %v", res)
	}
	if got := h.Anomalies(); len(got) != 0 {
		t.Fatalf("anomalies %v", got)
	}
}

func TestHistoryFlagsMisplacedReadSeqs(t *testing.T) {
	h := NewHistory()
	rs, _ := batchOf("a")
	rs[0].SeqNum = 5
	h.RecordRead(0, &Input{Stream: "s", Kind: KindRead, From: 4, Count: 1}, h.Now(), &api.ReadBatch{Records: rs}, nil)
	if got := h.Anomalies(); len(got) != 1 {
		t.Fatalf("anomalies %v, want one", got)
	}
}

func TestVerifyAcks(t *testing.T) {
	h := NewHistory()
	_, ab := batchOf("a", "b")
	_, c := batchOf("c")
	h.RecordAppend(0, &Input{Stream: "s", Kind: KindAppend, Records: ab}, h.Now(), ack(0, 2), nil)
	h.RecordAppend(0, &Input{Stream: "s", Kind: KindAppend, Records: c}, h.Now(), ack(2, 1), nil)
	rs, _ := batchOf("b")
	rs[0].SeqNum = 1
	h.RecordRead(1, &Input{Stream: "s", Kind: KindRead, From: 1, Count: 1}, h.Now(), &api.ReadBatch{Records: rs}, nil)

	n, bad := VerifyAcks(h, map[string][]uint64{"s": recs("a", "b", "c")})
	if n != 3 || len(bad) != 0 {
		t.Fatalf("good read-back: verified %d, violations %v", n, bad)
	}
	// A lost ack, and a seq read as two different records.
	n, bad = VerifyAcks(h, map[string][]uint64{"s": recs("a", "z")})
	if n != 1 || len(bad) != 3 {
		t.Fatalf("bad read-back: verified %d, violations %v", n, bad)
	}
}

func TestCheckReports(t *testing.T) {
	seq := func(n uint64) error {
		return &api.Error{Status: 412, Body: api.AppendConditionFailed{SeqNumMismatch: api.Uint64(n)}}
	}
	tok := func(s string) error {
		return &api.Error{Status: 412, Body: api.AppendConditionFailed{FencingTokenMismatch: api.String(s)}}
	}
	h := NewHistory()
	_, ab := batchOf("a", "b")
	h.RecordAppend(0, &Input{Stream: "s", Kind: KindAppend, Records: ab, FenceTo: api.String("t1"), Label: "fence"}, h.Now(), ack(0, 2), nil)
	h.RecordAppend(1, &Input{Stream: "s", Kind: KindAppend, Records: recs("c"), MatchSeqNum: api.Uint64(0), Label: "ok-seq"}, h.Now(), api.AppendAck{}, seq(2))
	h.RecordAppend(1, &Input{Stream: "s", Kind: KindAppend, Records: recs("d"), FencingToken: api.String(""), Label: "ok-token"}, h.Now(), api.AppendAck{}, tok("t1"))
	if bad := h.CheckReports(); len(bad) != 0 {
		t.Fatalf("consistent reports flagged: %v", bad)
	}
	h.RecordAppend(1, &Input{Stream: "s", Kind: KindAppend, Records: recs("e"), MatchSeqNum: api.Uint64(0), Label: "bad-seq"}, h.Now(), api.AppendAck{}, seq(9))
	h.RecordAppend(1, &Input{Stream: "s", Kind: KindAppend, Records: recs("f"), FencingToken: api.String(""), Label: "bad-token"}, h.Now(), api.AppendAck{}, tok("nobody"))
	bad := h.CheckReports()
	if len(bad) != 2 || !strings.Contains(strings.Join(bad, "\n"), "bad-seq") || !strings.Contains(strings.Join(bad, "\n"), "bad-token") {
		t.Fatalf("reports %v, want bad-seq and bad-token", bad)
	}
}

// Star's start, readiness and kill -9 against a stand-in process that
// prints the banner.
func TestStarLifecycle(t *testing.T) {
	sh, err := exec.LookPath("sh")
	if err != nil {
		t.Skip("no sh")
	}
	s := NewStar(StarSpec{Binary: sh, Args: []string{"-c", "echo 'x serving the S2 API on http://127.0.0.1:1'; exec sleep 60"},
		Endpoint: "http://127.0.0.1:1", ReadyTimeout: 10 * time.Second})
	ctx := context.Background()
	for i := range 2 {
		if err := s.Start(ctx); err != nil {
			t.Fatalf("start %d: %v", i, err)
		}
		if !s.Running() {
			t.Fatal("not running after start")
		}
		if err := s.Start(ctx); err == nil {
			t.Fatal("second start of a running star succeeded")
		}
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		if s.Running() {
			t.Fatal("running after kill")
		}
	}
	if s.Starts() != 2 {
		t.Fatalf("starts = %d", s.Starts())
	}
	// A process that exits without the banner fails the start.
	bad := NewStar(StarSpec{Binary: sh, Args: []string{"-c", "echo nope; exit 3"}, ReadyTimeout: 10 * time.Second})
	if err := bad.Start(ctx); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("start of a failing process: %v", err)
	}
}
