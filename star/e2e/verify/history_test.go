package verify

import (
	"context"
	"errors"
	"fmt"
	"math"
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
	if st.Indefinite != 2 || st.Pruned != 1 || st.Observed != 1 || st.Acked != 1 {
		t.Fatalf("stats %+v", st)
	}
	// y was observed: it is checked as applied, returned when the read did.
	if o := ops[1]; o.Output.(*Output).Outcome != OutObserved || o.Return != ops[2].Return {
		t.Fatalf("observed append checked as %+v, returning at %d (the read returned at %d)", o.Output, o.Return, ops[2].Return)
	}
	if res := porcupine.CheckOperationsTimeout(Model(), ops, 0); res != porcupine.Ok {
		t.Fatalf("check = %v", res)
	}
	if got := h.Anomalies(); len(got) != 0 {
		t.Fatalf("anomalies %v", got)
	}
}

// An observed indefinite append happened: it must have taken effect before
// the read that returned its records, and its conditions must have held.
func TestHistoryObservedIndefiniteAppends(t *testing.T) {
	read := func(h *History, c int, from uint64, bodies ...string) {
		rs, _ := batchOf(bodies...)
		for i := range rs {
			rs[i].SeqNum = from + uint64(i)
		}
		h.RecordRead(c, &Input{Stream: "s", Kind: KindRead, From: from, Count: 10}, h.Now(), &api.ReadBatch{Records: rs}, nil)
	}
	tail := func(h *History, c int, n uint64) {
		h.RecordCheckTail(c, "s", h.Now(), api.StreamPosition{SeqNum: n}, nil)
	}
	// Read, then a check-tail that still sees 0: the append took effect
	// before the read returned, so the later check-tail is stale.
	h := NewHistory()
	_, x := batchOf("x")
	h.RecordAppend(0, &Input{Stream: "s", Kind: KindAppend, Records: x}, h.Now(), api.AppendAck{}, errReset)
	read(h, 1, 0, "x")
	tail(h, 2, 0)
	if res := porcupine.CheckOperationsTimeout(Model(), h.Operations(), 0); res != porcupine.Illegal {
		t.Fatalf("a check-tail behind an observed append after its read checks %v", res)
	}
	// Its match_seq_num could not have held where it took effect: a read
	// returning it anyway is illegal.
	h = NewHistory()
	_, a := batchOf("a")
	h.RecordAppend(0, &Input{Stream: "s", Kind: KindAppend, Records: a}, h.Now(), ack(0, 1), nil)
	_, y := batchOf("y")
	h.RecordAppend(1, &Input{Stream: "s", Kind: KindAppend, Records: y, MatchSeqNum: api.Uint64(0)}, h.Now(), api.AppendAck{}, errReset)
	read(h, 2, 0, "a", "y")
	if res := porcupine.CheckOperationsTimeout(Model(), h.Operations(), 0); res != porcupine.Illegal {
		t.Fatalf("an observed append whose match_seq_num failed checks %v", res)
	}
	// Concurrent with the read that returned it, and before a tail that
	// counts it: fine.
	h = NewHistory()
	call := h.Now()
	read(h, 2, 0, "z")
	_, z := batchOf("z")
	h.RecordAppend(0, &Input{Stream: "s", Kind: KindAppend, Records: z}, call, api.AppendAck{}, errReset)
	tail(h, 1, 1)
	if res := porcupine.CheckOperationsTimeout(Model(), h.Operations(), 0); res != porcupine.Ok {
		t.Fatalf("an observed append before its read checks %v", res)
	}
	// The read places it: the records start where the read found its
	// first unique record, and the model applies it only at that tail.
	h = NewHistory()
	h.RecordAppend(0, &Input{Stream: "s", Kind: KindAppend, Records: a}, h.Now(), ack(0, 1), nil)
	_, w := batchOf("w1", "w2")
	h.RecordAppend(1, &Input{Stream: "s", Kind: KindAppend, Records: w}, h.Now(), api.AppendAck{}, errReset)
	read(h, 2, 2, "w2")
	ops := h.Operations()
	if o := ops[1].Output.(*Output); !o.Placed || o.Start != 1 || o.End != 3 {
		t.Fatalf("observed append placed as %+v, want [1,3)", o)
	}
	if ok, _ := step(&state{}, ops[1].Input, ops[1].Output); ok {
		t.Fatal("the model applied an append placed at 1 on an empty stream")
	}
	if res := porcupine.CheckOperationsTimeout(Model(), ops, 0); res != porcupine.Ok {
		t.Fatalf("a placed observed append checks %v", res)
	}
}

// Every batch that clears the fencing token carries the same fence record:
// reading one such record tells nothing about which batch happened.
func TestHistorySharedRecordsDoNotObserve(t *testing.T) {
	h := NewHistory()
	clear := api.FenceRecord("")
	fr := RecordHash(&clear)
	_, a := batchOf("a")
	_, b := batchOf("b")
	h.RecordAppend(0, &Input{Stream: "s", Kind: KindAppend, Records: append([]uint64{fr}, a...), FenceTo: api.String("")}, h.Now(), api.AppendAck{}, errReset)
	h.RecordAppend(1, &Input{Stream: "s", Kind: KindAppend, Records: append([]uint64{fr}, b...), FenceTo: api.String("")}, h.Now(), api.AppendAck{}, errReset)
	rs := []api.Record{clear, {Body: []byte("a")}}
	rs[1].SeqNum = 1
	h.RecordRead(2, &Input{Stream: "s", Kind: KindRead, From: 0, Count: 10}, h.Now(), &api.ReadBatch{Records: rs}, nil)
	ops := h.Operations()
	if st := h.Stats(); st.Pruned != 1 || st.Observed != 1 || len(ops) != 2 {
		t.Fatalf("stats %+v, %d ops: want b pruned, a observed", st, len(ops))
	}
	if res := porcupine.CheckOperationsTimeout(Model(), ops, 0); res != porcupine.Ok {
		t.Fatalf("check = %v", res)
	}
}

func TestDuplicateAcks(t *testing.T) {
	acks := []Ack{{Stream: "s", Start: 0, Records: recs("a", "b")}, {Stream: "t", Start: 1, Records: recs("c")}, {Stream: "s", Start: 2, Records: recs("d")}}
	if bad := DuplicateAcks(acks); len(bad) != 0 {
		t.Fatalf("distinct acks flagged: %v", bad)
	}
	acks = append(acks, Ack{Stream: "s", Start: 1, Records: recs("e", "f")})
	if bad := DuplicateAcks(acks); len(bad) != 2 {
		t.Fatalf("acks of seqs 1 and 2 twice: %v, want two violations", bad)
	}
}

// The blip of a handoff: the longest acked append and ack gap around it.
func TestHandoffBlips(t *testing.T) {
	ms := func(n int64) int64 { return n * int64(time.Millisecond) }
	h := NewHistory()
	add := func(call, ret int64, start uint64) {
		h.ops = append(h.ops, porcupine.Operation{Input: &Input{Stream: "s", Kind: KindAppend, Records: recs(fmt.Sprint(start))},
			Output: &Output{Outcome: OutOK, Start: start, End: start + 1}, Call: ms(call), Return: ms(ret)})
	}
	add(0, 10, 0)
	add(90, 100, 1)
	add(150, 700, 2) // straddles the handoff at [200, 300]
	add(710, 720, 3)
	add(5000, 5010, 4) // after the window
	evs := []FaultEvent{{Fault: "handoff", Stream: "s", At: 200 * time.Millisecond, Recovered: 300 * time.Millisecond},
		{Fault: "handoff", Stream: "s", Failed: true, At: time.Second, Recovered: 2 * time.Second}}
	bl := HandoffBlips(h, evs)
	if len(bl) != 1 {
		t.Fatalf("blips %+v, want one", bl)
	}
	// The gap (100, 700) counts from the handoff's start at 200.
	if b := bl[0]; b.MaxAckLatency != 550*time.Millisecond || b.AckGap != 500*time.Millisecond || b.Acks != 2 || b.Clean {
		t.Fatalf("blip %+v, want latency 550ms, gap 500ms, 2 acks, not clean (a fault follows within a second)", b)
	}
	evs[1].At = 1400 * time.Millisecond
	if b := HandoffBlips(h, evs)[0]; !b.Clean {
		t.Fatalf("blip %+v, want clean", b)
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

	n, bad := VerifyAcks(h, map[string][]uint64{"s": recs("a", "b", "c")}, nil)
	if n != 3 || len(bad) != 0 {
		t.Fatalf("good read-back: verified %d, violations %v", n, bad)
	}
	// A lost ack, and a seq read as two different records.
	n, bad = VerifyAcks(h, map[string][]uint64{"s": recs("a", "z")}, nil)
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

func TestTailBufferSince(t *testing.T) {
	b := &tailBuffer{max: 5}
	b.Write([]byte("abc"))
	at := b.Total()
	b.Write([]byte("defg"))
	if got := b.String(); got != "cdefg" {
		t.Fatalf("kept %q", got)
	}
	for off, want := range map[int64]string{0: "cdefg", at: "defg", 5: "fg", 7: ""} {
		if got := b.Since(off); got != want {
			t.Fatalf("Since(%d) = %q, want %q", off, got, want)
		}
	}
}

func TestWatchWriter(t *testing.T) {
	w := &watchWriter{marker: []byte("needle")}
	for _, chunk := range []string{"hay hay ne", "ed", "le hay"} {
		if w.seen.Load() {
			t.Fatalf("seen before %q", chunk)
		}
		w.Write([]byte(chunk))
	}
	if !w.seen.Load() {
		t.Fatal("a marker split over three writes was missed")
	}
	w2 := &watchWriter{marker: []byte("needle")}
	w2.Write([]byte("need"))
	w2.Write([]byte(" le"))
	if w2.seen.Load() {
		t.Fatal("seen a marker that was not written")
	}
}

// ClockGuarded knows the star's refusal of a rejection from memory, and
// only that 503.
func TestClockGuarded(t *testing.T) {
	for msg, want := range map[string]bool{
		"503 unavailable: this star has not renewed its registration for 1.299s, so it does not answer a seq_num_mismatch from its own state (a successor may have moved past it); nothing was sequenced; retry": true,
		"503 unavailable: this star has not renewed its registration for 1.256s; retry": false,
		"503 unavailable: the stream's leader could not be reached; retry":              false,
	} {
		if got := ClockGuarded(msg); got != want {
			t.Errorf("ClockGuarded(%q) = %v, want %v", msg, got, want)
		}
	}
}

// A deleted incarnation's acknowledged records are not looked for in the
// read-back; the current incarnation's are, so an append a star
// acknowledged into the deleted stream after the re-create is caught.
func TestVerifyAcksRetired(t *testing.T) {
	cat := NewCatalog("b")
	cat.SetStreams([]string{"s"}, []api.StorageClass{api.StorageStandard})
	old := cat.Key("s")
	cat.inc["s"]++ // what Recreate does once the name is created again
	cur := cat.Key("s")
	if old == cur || !cat.Retired()[old] || cat.Retired()[cur] {
		t.Fatalf("keys %q then %q, retired %v", old, cur, cat.Retired())
	}
	h := NewHistory()
	_, ab := batchOf("a", "b")
	_, c := batchOf("c")
	h.RecordAppend(0, &Input{Stream: old, Kind: KindAppend, Records: ab}, h.Now(), ack(0, 2), nil)
	h.RecordAppend(0, &Input{Stream: cur, Kind: KindAppend, Records: c}, h.Now(), ack(0, 1), nil)
	n, bad := VerifyAcks(h, map[string][]uint64{cur: recs("c")}, cat.Retired())
	if n != 1 || len(bad) != 0 {
		t.Fatalf("verified %d, violations %v", n, bad)
	}
	// Acknowledged into the new incarnation, absent from its read-back
	// (a star that still led the deleted stream took it).
	_, d := batchOf("d")
	h.RecordAppend(1, &Input{Stream: cur, Kind: KindAppend, Records: d}, h.Now(), ack(1, 1), nil)
	if _, bad := VerifyAcks(h, map[string][]uint64{cur: recs("c")}, cat.Retired()); len(bad) != 1 {
		t.Fatalf("an ack missing from the new incarnation: violations %v", bad)
	}
}

// An indefinite append into a deleted incarnation that no read saw is not
// pruned: no final read-back covers that incarnation, so it may have
// taken effect (a later acknowledged append lands past its records).
func TestHistoryKeepsUnreadIndefiniteAppendsOfRetiredStreams(t *testing.T) {
	h := NewHistory()
	h.ops = append(h.ops,
		porcupine.Operation{ClientId: 0, Input: &Input{Stream: "s@0", Kind: KindAppend, Records: []uint64{1, 2}}, Call: 0, Output: &Output{Outcome: OutUnknown}, Return: 1 << 62},
		porcupine.Operation{ClientId: 1, Input: &Input{Stream: "s@0", Kind: KindAppend, Records: []uint64{3}}, Call: 10, Output: &Output{Outcome: OutOK, Start: 2, End: 3}, Return: 20},
	)
	if res := porcupine.CheckOperationsTimeout(Model(), h.Operations(), 0); res != porcupine.Illegal {
		t.Fatalf("without Unread the unseen append is pruned and the ack at 2 is illegal; got %v", res)
	}
	h.Unread(map[string]bool{"s@0": true})
	ops := h.Operations()
	if len(ops) != 2 {
		t.Fatalf("%d operations, want the unseen append kept open", len(ops))
	}
	if res := porcupine.CheckOperationsTimeout(Model(), ops, 0); res != porcupine.Ok {
		t.Fatalf("an ack past an unseen append into a deleted incarnation checks %v", res)
	}
}

// The shape that left rounds undecided (two kill -9s in one round, then
// the catalog stream deleted): many indefinite appends into a deleted
// incarnation, none read, while the run's acks and reads cover every seq
// up to the furthest any operation saw. None of them can sit anywhere an
// operation looks, so they are pruned and the history decides at once;
// before, each stayed open to the end and porcupine's search for the
// incarnation ran past the checker's budget.
func TestHistoryPrunesUnplaceableAppendsOfRetiredStreams(t *testing.T) {
	const stream, open = "c@0", 60
	h := NewHistory()
	h.Unread(map[string]bool{stream: true})
	at := int64(0)
	tick := func() int64 { at += 10; return at }
	fence := rec("fence")
	var seq uint64
	for i := range 40 {
		// Two clients ack in turn; a third's appends fail indefinitely
		// (its star was killed), some of them fencing batches that carry
		// the fence record every fence carries.
		bodies := []string{fmt.Sprintf("a%d", i), fmt.Sprintf("b%d", i)}
		call := tick()
		h.ops = append(h.ops, porcupine.Operation{ClientId: i % 2, Call: call, Return: tick(),
			Input:  &Input{Stream: stream, Kind: KindAppend, Records: recs(bodies...)},
			Output: &Output{Outcome: OutOK, Start: seq, End: seq + 2}})
		seq += 2
		// A reader reads the batch back now and then.
		if i%4 == 3 {
			call := tick()
			h.ops = append(h.ops, porcupine.Operation{ClientId: 3, Call: call, Return: tick(),
				Input:  &Input{Stream: stream, Kind: KindRead, From: seq - 2, Count: 10},
				Output: &Output{Outcome: OutOK, Records: recs(bodies...)}})
		}
	}
	for i := range open {
		in := &Input{Stream: stream, Kind: KindAppend, Records: recs(fmt.Sprintf("x%d", i), fmt.Sprintf("y%d", i))}
		if i%10 == 0 {
			tok := fmt.Sprint(i)
			in.Records, in.FenceTo = append([]uint64{fence}, in.Records...), &tok
		}
		h.ops = append(h.ops, porcupine.Operation{ClientId: 4 + i, Call: int64(i * 13), Return: math.MaxInt64,
			Input: in, Output: &Output{Outcome: OutUnknown}})
	}
	h.ops = append(h.ops, porcupine.Operation{ClientId: 2, Call: tick(), Return: tick(),
		Input: &Input{Stream: stream, Kind: KindCheckTail}, Output: &Output{Outcome: OutOK, Tail: seq}})
	ops := h.Operations()
	left := 0
	for _, op := range ops {
		if op.Output.(*Output).Outcome == OutUnknown {
			left++
		}
	}
	if left != 0 {
		t.Fatalf("%d of %d indefinite appends into the deleted incarnation left open, want 0: every seq below the tail %d is acknowledged", left, open, seq)
	}
	if st := h.Stats(); st.Pruned != open {
		t.Fatalf("stats %+v: want %d pruned", st, open)
	}
	if res := porcupine.CheckOperationsTimeout(Model(), ops, 10*time.Second); res != porcupine.Ok {
		t.Fatalf("check = %v", res)
	}
}

// An indefinite append into a deleted incarnation stays open where the
// run leaves room for it: a seq no read or ack covers, or seqs a read
// returned its own records at (its records shared with another batch,
// so the read does not observe it).
func TestHistoryKeepsPlaceableAppendsOfRetiredStreams(t *testing.T) {
	const stream = "c@0"
	for _, tc := range []struct {
		name string
		open []uint64 // the open append's records
		ops  []porcupine.Operation
	}{
		{"a gap below an ack", recs("x", "y"), []porcupine.Operation{
			{ClientId: 0, Call: 0, Return: 10, Input: &Input{Stream: stream, Kind: KindAppend, Records: recs("a")}, Output: &Output{Outcome: OutOK, Start: 0, End: 1}},
			{ClientId: 1, Call: 20, Return: 30, Input: &Input{Stream: stream, Kind: KindAppend, Records: recs("b")}, Output: &Output{Outcome: OutOK, Start: 3, End: 4}},
		}},
		{"read as its own shared record", recs("fence", "x"), []porcupine.Operation{
			{ClientId: 0, Call: 0, Return: 10, Input: &Input{Stream: stream, Kind: KindAppend, Records: recs("a")}, Output: &Output{Outcome: OutOK, Start: 0, End: 1}},
			{ClientId: 1, Call: 5, Return: math.MaxInt64, Input: &Input{Stream: stream, Kind: KindAppend, Records: recs("fence")}, Output: &Output{Outcome: OutUnknown}},
			{ClientId: 2, Call: 20, Return: 30, Input: &Input{Stream: stream, Kind: KindRead, From: 1, Count: 5}, Output: &Output{Outcome: OutOK, Records: recs("fence")}},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistory()
			h.Unread(map[string]bool{stream: true})
			h.ops = append(tc.ops, porcupine.Operation{ClientId: 9, Call: 1, Return: math.MaxInt64,
				Input: &Input{Stream: stream, Kind: KindAppend, Records: tc.open}, Output: &Output{Outcome: OutUnknown}})
			ops := h.Operations()
			if len(ops) != len(h.ops) {
				t.Fatalf("%d operations of %d: an append with room in the stream was pruned", len(ops), len(h.ops))
			}
			if res := porcupine.CheckOperationsTimeout(Model(), ops, 0); res != porcupine.Ok {
				t.Fatalf("check = %v", res)
			}
		})
	}
}

func TestZoneHaltFailureClasses(t *testing.T) {
	subjects := map[string]bool{"lin-0": true}
	moved := `append: 503 this stream is led by another star; retry`
	for _, c := range []struct {
		fl        Failure
		disturbed bool
		want      zoneFailure
	}{
		// A just re-created catalog stream's leadership refusal is the
		// re-create nemesis's, not the zone's (a clean-clone run failed
		// on it).
		{Failure{Kind: KindAppend, Stream: "cat-0@3", Definite: true, Err: moved}, false, zoneNotSubject},
		{Failure{Kind: KindAppend, Stream: "lin-0", Definite: true, Err: moved}, false, zoneDefinite},
		{Failure{Kind: KindAppend, Stream: "lin-0", Err: "503 the object store is not taking this star's writes; retry"}, false, zoneDefinite},
		{Failure{Kind: KindAppend, Stream: "lin-0", Err: "connection refused"}, true, zoneRefused},
		{Failure{Kind: KindAppend, Stream: "lin-0", Err: "connection refused"}, false, zoneIndefinite},
		{Failure{Kind: KindAppend, Stream: "lin-0", Definite: true, Err: "star has not renewed its registration; will not answer from its own state"}, false, zoneGuarded},
		{Failure{Kind: KindAppend, Stream: "lin-0", Err: "context deadline exceeded"}, false, zoneIndefinite},
	} {
		if got := zoneHaltFailure(c.fl, subjects, c.disturbed); got != c.want {
			t.Errorf("%s %q (disturbed %v): class %d, want %d", c.fl.Stream, c.fl.Err, c.disturbed, got, c.want)
		}
	}
}
