package facade

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/format"
)

func u64(v uint64) *uint64 { return &v }
func str(v string) *string { return &v }

func rec(body string) Input { return Input{Body: []byte(body)} }

func recAt(ts uint64) Input { return Input{Timestamp: u64(ts), Body: []byte("x")} }

func fence(token string) Input {
	return Input{Headers: []format.Header{{Name: nil, Value: []byte("fence")}}, Body: []byte(token)}
}

func trim(point uint64) Input {
	b := binary.BigEndian.AppendUint64(nil, point)
	return Input{Headers: []format.Header{{Name: []byte{}, Value: []byte("trim")}}, Body: b}
}

func batch(in ...Input) Request { return Request{Records: in} }

// mustSeq sequences req and fails the test on error.
func mustSeq(t *testing.T, s *Stream, req Request, now uint64) Sequenced {
	t.Helper()
	out, err := s.Sequence(req, now)
	if err != nil {
		t.Fatalf("Sequence: unexpected error %v", err)
	}
	return out
}

// mustReject sequences req, expects an error and checks that the stream is
// exactly as before.
func mustReject(t *testing.T, s *Stream, req Request, now uint64) error {
	t.Helper()
	before := *s
	_, err := s.Sequence(req, now)
	if err == nil {
		t.Fatalf("Sequence: expected an error, got none")
	}
	if !reflect.DeepEqual(before, *s) {
		t.Fatalf("rejected batch changed the stream:\nbefore %+v\nafter  %+v", before, *s)
	}
	return err
}

func wantInvalid(t *testing.T, err error, substr string) {
	t.Helper()
	var ie InvalidError
	if !errors.As(err, &ie) {
		t.Fatalf("want InvalidError, got %T %v", err, err)
	}
	if !strings.Contains(ie.Reason, substr) {
		t.Fatalf("reason %q does not mention %q", ie.Reason, substr)
	}
}

func TestSequenceAssignsDenseSeqNums(t *testing.T) {
	s := New(Config{}, State{NextSeq: 42, LastTimestamp: 7})
	if got := s.Tail(); got != (Position{42, 7}) {
		t.Fatalf("initial tail %+v", got)
	}
	a := mustSeq(t, s, batch(rec("a"), rec("bb"), rec("")), 100)
	b := mustSeq(t, s, batch(rec("c")), 100)
	var seqs []uint64
	for _, r := range append(a.Records, b.Records...) {
		seqs = append(seqs, r.SeqNum)
	}
	if want := []uint64{42, 43, 44, 45}; !reflect.DeepEqual(seqs, want) {
		t.Fatalf("seqs %v, want %v", seqs, want)
	}
	if a.Start != (Position{42, 100}) || a.End != (Position{45, 100}) {
		t.Fatalf("a: start %+v end %+v", a.Start, a.End)
	}
	if b.Start != (Position{45, 100}) || b.End != (Position{46, 100}) {
		t.Fatalf("b: start %+v end %+v", b.Start, b.End)
	}
	if a.Metered != 9+10+8 {
		t.Fatalf("metered %d, want 27", a.Metered)
	}
	if !bytes.Equal(a.Records[1].Body, []byte("bb")) {
		t.Fatalf("body not carried: %q", a.Records[1].Body)
	}
	if s.Next() != 46 {
		t.Fatalf("Next %d, want 46", s.Next())
	}
	// Nothing acked yet: the durable tail has not moved.
	if got := s.Tail(); got != (Position{42, 7}) {
		t.Fatalf("tail moved before ack: %+v", got)
	}
}

func TestMeteredCountsHeaders(t *testing.T) {
	s := New(Config{}, State{})
	in := Input{Headers: []format.Header{{Name: []byte("ab"), Value: []byte("cde")}, {Name: []byte("f"), Value: nil}}, Body: []byte("0123")}
	out := mustSeq(t, s, batch(in), 1)
	// 8 + 2·2 + (2+3) + (1+0) + 4
	if out.Metered != 22 {
		t.Fatalf("metered %d, want 22", out.Metered)
	}
}

func TestBatchLimits(t *testing.T) {
	s := New(Config{}, State{})
	wantInvalid(t, mustReject(t, s, batch(), 1), "1 to 1000")

	max := make([]Input, MaxBatchRecords)
	mustSeq(t, s, Request{Records: max}, 1)
	over := make([]Input, MaxBatchRecords+1)
	wantInvalid(t, mustReject(t, s, Request{Records: over}, 1), "1 to 1000")

	// Two records of exactly 1 MiB metered in total pass; one byte more fails.
	body := MaxBatchMeteredBytes/2 - 8
	exact := batch(Input{Body: make([]byte, body)}, Input{Body: make([]byte, body)})
	out := mustSeq(t, s, exact, 1)
	if out.Metered != MaxBatchMeteredBytes {
		t.Fatalf("metered %d, want %d", out.Metered, MaxBatchMeteredBytes)
	}
	tooBig := batch(Input{Body: make([]byte, body)}, Input{Body: make([]byte, body+1)})
	wantInvalid(t, mustReject(t, s, tooBig, 1), "metered")
	// Header bytes count too.
	hdr := batch(Input{Body: make([]byte, body)}, Input{Body: make([]byte, body-2), Headers: []format.Header{{Name: []byte("h")}}})
	wantInvalid(t, mustReject(t, s, hdr, 1), "metered")
}

func TestFencing(t *testing.T) {
	s := New(Config{}, State{})
	// The token starts empty; supplying it passes.
	mustSeq(t, s, Request{Records: []Input{rec("a")}, FencingToken: str("")}, 1)
	wantFenceMismatch(t, mustReject(t, s, Request{Records: []Input{rec("a")}, FencingToken: str("w1")}, 1), "")

	// A fence applies to later batches only: its own batch is checked against
	// the old token, and the batch after it in the same call sees the old one.
	out := mustSeq(t, s, Request{Records: []Input{fence("w1"), rec("b")}, FencingToken: str("")}, 1)
	if out.FencingToken != "w1" {
		t.Fatalf("token after fence %q, want w1", out.FencingToken)
	}
	mustSeq(t, s, Request{Records: []Input{rec("c")}, FencingToken: str("w1")}, 1)
	wantFenceMismatch(t, mustReject(t, s, Request{Records: []Input{rec("d")}, FencingToken: str("w2")}, 1), "w1")
	wantFenceMismatch(t, mustReject(t, s, Request{Records: []Input{rec("d")}, FencingToken: str("")}, 1), "w1")
	// No token always passes, and the reported token is carried.
	out = mustSeq(t, s, batch(rec("e")), 1)
	if out.FencingToken != "w1" {
		t.Fatalf("token %q, want w1", out.FencingToken)
	}
	// Later fences in a batch win; an empty fence clears.
	out = mustSeq(t, s, Request{Records: []Input{fence("w2"), fence("")}, FencingToken: str("w1")}, 1)
	if out.FencingToken != "" {
		t.Fatalf("token %q after clearing fence", out.FencingToken)
	}
	mustSeq(t, s, Request{Records: []Input{rec("f")}, FencingToken: str("")}, 1)

	// A new leader opens with the durable token.
	s2 := New(Config{}, State{FencingToken: "tok"})
	wantFenceMismatch(t, mustReject(t, s2, Request{Records: []Input{rec("a")}, FencingToken: str("")}, 1), "tok")
}

func wantFenceMismatch(t *testing.T, err error, current string) {
	t.Helper()
	var fe FencingTokenMismatchError
	if !errors.As(err, &fe) {
		t.Fatalf("want FencingTokenMismatchError, got %T %v", err, err)
	}
	if fe.Current != current {
		t.Fatalf("current token %q, want %q", fe.Current, current)
	}
}

func TestFencingTokenLimits(t *testing.T) {
	s := New(Config{}, State{})
	tok36 := strings.Repeat("é", 18) // 36 bytes of UTF-8
	mustSeq(t, s, batch(fence(tok36)), 1)
	wantInvalid(t, mustReject(t, s, batch(fence(tok36+"x")), 1), "at most 36")
	wantInvalid(t, mustReject(t, s, batch(Input{Headers: fence("").Headers, Body: []byte{0xff, 0xfe}}), 1), "UTF-8")
	// A supplied token longer than any token can be is malformed, not a
	// mismatch.
	wantInvalid(t, mustReject(t, s, Request{Records: []Input{rec("a")}, FencingToken: str(strings.Repeat("a", 37))}, 1), "at most 36")
}

func TestMatchSeqNumCountsPending(t *testing.T) {
	s := New(Config{}, State{NextSeq: 10})
	mustSeq(t, s, Request{Records: []Input{rec("a"), rec("b")}, MatchSeqNum: u64(10)}, 1)
	// Pipelined: the first batch is still pending, the match is against 12.
	mustSeq(t, s, Request{Records: []Input{rec("c")}, MatchSeqNum: u64(12)}, 1)
	err := mustReject(t, s, Request{Records: []Input{rec("d")}, MatchSeqNum: u64(12)}, 1)
	var se SeqNumMismatchError
	if !errors.As(err, &se) || se.Expected != 13 {
		t.Fatalf("want SeqNumMismatchError{13}, got %#v", err)
	}
	mustReject(t, s, Request{Records: []Input{rec("d")}, MatchSeqNum: u64(14)}, 1)
	if s.Tail().SeqNum != 10 {
		t.Fatalf("tail %d, want 10", s.Tail().SeqNum)
	}
}

func TestFencingCheckedBeforeSeqNum(t *testing.T) {
	s := New(Config{}, State{NextSeq: 5, FencingToken: "a"})
	err := mustReject(t, s, Request{Records: []Input{rec("x")}, MatchSeqNum: u64(0), FencingToken: str("b")}, 1)
	wantFenceMismatch(t, err, "a")
	// With the right token the seq condition is what fails.
	err = mustReject(t, s, Request{Records: []Input{rec("x")}, MatchSeqNum: u64(0), FencingToken: str("a")}, 1)
	var se SeqNumMismatchError
	if !errors.As(err, &se) || se.Expected != 5 {
		t.Fatalf("want SeqNumMismatchError{5}, got %#v", err)
	}
	// Validation comes first of all.
	err = mustReject(t, s, Request{Records: []Input{{Headers: []format.Header{{Value: []byte("nope")}}}}, MatchSeqNum: u64(0), FencingToken: str("b")}, 1)
	wantInvalid(t, err, "unknown command")
}

func TestInvalidCommands(t *testing.T) {
	cmdHdr := format.Header{Value: []byte("fence")}
	cases := []struct {
		name   string
		in     Input
		reason string
	}{
		{"unknown command", Input{Headers: []format.Header{{Value: []byte("truncate")}}}, "unknown command"},
		{"empty command", Input{Headers: []format.Header{{}}}, "unknown command"},
		{"empty name after a normal header", Input{Headers: []format.Header{{Name: []byte("a"), Value: []byte("b")}, cmdHdr}}, "exactly one header"},
		{"command with an extra header", Input{Headers: []format.Header{cmdHdr, {Name: []byte("a")}}}, "exactly one header"},
		{"two command headers", Input{Headers: []format.Header{cmdHdr, cmdHdr}}, "exactly one header"},
		{"trim short", Input{Headers: trim(0).Headers, Body: make([]byte, 7)}, "8-byte"},
		{"trim long", Input{Headers: trim(0).Headers, Body: make([]byte, 9)}, "8-byte"},
		{"trim empty", Input{Headers: trim(0).Headers}, "8-byte"},
		{"command name case", Input{Headers: []format.Header{{Value: []byte("Fence")}}}, "unknown command"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := New(Config{}, State{NextSeq: 3})
			mustSeq(t, s, batch(rec("before")), 1)
			// The bad record is second, so a partial application would show.
			err := mustReject(t, s, batch(fence("x"), c.in), 2)
			wantInvalid(t, err, c.reason)
			wantInvalid(t, err, "record 1")
		})
	}
}

func TestTrimCommand(t *testing.T) {
	s := New(Config{}, State{NextSeq: 5})
	// A point past the command is clamped to the command's seq + 1.
	out := mustSeq(t, s, batch(trim(100)), 1)
	if out.TrimPoint != 6 {
		t.Fatalf("trim point %d, want 6", out.TrimPoint)
	}
	// It only moves forward.
	out = mustSeq(t, s, batch(trim(3)), 1)
	if out.TrimPoint != 6 {
		t.Fatalf("trim point %d, want 6 (never backward)", out.TrimPoint)
	}
	out = mustSeq(t, s, batch(rec("a"), rec("b"), trim(8), rec("c")), 1)
	if out.TrimPoint != 8 {
		t.Fatalf("trim point %d, want 8", out.TrimPoint)
	}
	// Within a batch the max wins regardless of order.
	out = mustSeq(t, s, batch(trim(11), trim(9)), 1)
	if out.TrimPoint != 11 {
		t.Fatalf("trim point %d, want 11", out.TrimPoint)
	}
	// Ordinary batches carry it along, as does the pending state.
	out = mustSeq(t, s, batch(rec("d")), 1)
	if out.TrimPoint != 11 || s.Pending().TrimPoint != 11 {
		t.Fatalf("trim point %d / %d, want 11", out.TrimPoint, s.Pending().TrimPoint)
	}
	// Commands are stored like ordinary records.
	if got := out.Records[0].SeqNum; got != 13 {
		t.Fatalf("seq %d after commands, want 13", got)
	}
	// A new leader opens with the durable trim point.
	if got := mustSeq(t, New(Config{}, State{NextSeq: 50, TrimPoint: 40}), batch(trim(2)), 1).TrimPoint; got != 40 {
		t.Fatalf("trim point %d, want 40", got)
	}
}

func timestamps(recs []format.Record) []uint64 {
	out := make([]uint64, len(recs))
	for i, r := range recs {
		out[i] = r.Timestamp
	}
	return out
}

func TestTimestamps(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		in   []Input
		now  uint64
		want []uint64
	}{
		{"prefer uses client", Config{}, []Input{recAt(50), recAt(60)}, 100, []uint64{50, 60}},
		{"prefer falls back to arrival", Config{}, []Input{recAt(50), rec("x")}, 100, []uint64{50, 100}},
		{"prefer capped to now", Config{}, []Input{recAt(150)}, 100, []uint64{100}},
		{"prefer uncapped", Config{Uncapped: true}, []Input{recAt(150), rec("x")}, 100, []uint64{150, 150}},
		{"prefer raised to previous", Config{}, []Input{recAt(80), recAt(20), recAt(90)}, 100, []uint64{80, 80, 90}},
		{"require uses client", Config{Mode: ClientRequire}, []Input{recAt(10), recAt(5)}, 100, []uint64{10, 10}},
		{"require capped", Config{Mode: ClientRequire}, []Input{recAt(500)}, 100, []uint64{100}},
		{"require uncapped", Config{Mode: ClientRequire, Uncapped: true}, []Input{recAt(500)}, 100, []uint64{500}},
		{"arrival ignores client", Config{Mode: Arrival}, []Input{recAt(10), recAt(500), rec("x")}, 100, []uint64{100, 100, 100}},
		{"arrival uncapped still arrival", Config{Mode: Arrival, Uncapped: true}, []Input{recAt(500)}, 100, []uint64{100}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := New(c.cfg, State{})
			out := mustSeq(t, s, Request{Records: c.in}, c.now)
			if got := timestamps(out.Records); !reflect.DeepEqual(got, c.want) {
				t.Fatalf("timestamps %v, want %v", got, c.want)
			}
			if out.Start.Timestamp != c.want[0] || out.End.Timestamp != c.want[len(c.want)-1] {
				t.Fatalf("start %+v end %+v", out.Start, out.End)
			}
		})
	}
}

func TestTimestampsNonDecreasingAcrossBatches(t *testing.T) {
	// The previous max comes from the opening state...
	s := New(Config{}, State{NextSeq: 1, LastTimestamp: 1000})
	out := mustSeq(t, s, batch(recAt(5)), 2000)
	if out.Records[0].Timestamp != 1000 {
		t.Fatalf("ts %d, want raised to 1000", out.Records[0].Timestamp)
	}
	// ...and from pending batches, even when the clock steps back below it.
	s = New(Config{}, State{})
	mustSeq(t, s, batch(rec("a")), 500)
	out = mustSeq(t, s, batch(rec("b")), 400)
	if out.Records[0].Timestamp != 500 {
		t.Fatalf("ts %d, want 500 after the clock stepped back", out.Records[0].Timestamp)
	}
	// Non-decreasing wins over the cap: after uncapped future stamps, a
	// capped stream keeps its order.
	s = New(Config{Uncapped: true}, State{})
	mustSeq(t, s, batch(recAt(900)), 100)
	s.Reconfigure(Config{})
	out = mustSeq(t, s, batch(recAt(950), rec("x")), 200)
	if got := timestamps(out.Records); !reflect.DeepEqual(got, []uint64{900, 900}) {
		t.Fatalf("timestamps %v, want [900 900]", got)
	}
	if s.Pending().LastTimestamp != 900 {
		t.Fatalf("pending last ts %d", s.Pending().LastTimestamp)
	}
}

func TestClientRequireRejectsMissingTimestamp(t *testing.T) {
	s := New(Config{Mode: ClientRequire}, State{})
	wantInvalid(t, mustReject(t, s, batch(recAt(1), rec("no ts")), 10), "requires client timestamps")
	// Reconfiguring relaxes it for later batches.
	s.Reconfigure(Config{Mode: ClientPrefer})
	if s.Config().Mode != ClientPrefer {
		t.Fatalf("config not applied")
	}
	mustSeq(t, s, batch(recAt(1), rec("no ts")), 10)
}

func TestAcked(t *testing.T) {
	s := New(Config{}, State{NextSeq: 3, LastTimestamp: 9})
	a := mustSeq(t, s, batch(rec("a"), rec("b")), 10)
	b := mustSeq(t, s, batch(rec("c")), 20)
	s.Acked(a.End)
	if s.Tail() != (Position{5, 10}) {
		t.Fatalf("tail %+v, want {5 10}", s.Tail())
	}
	// A duplicate or stale ack is ignored.
	s.Acked(Position{4, 1})
	s.Acked(a.End)
	if s.Tail() != (Position{5, 10}) {
		t.Fatalf("tail %+v after stale ack", s.Tail())
	}
	s.Acked(b.End)
	if s.Tail() != (Position{6, 20}) || s.Next() != 6 {
		t.Fatalf("tail %+v next %d", s.Tail(), s.Next())
	}
	if got := s.Pending(); got != (State{NextSeq: 6, LastTimestamp: 20}) {
		t.Fatalf("pending %+v", got)
	}
	defer func() {
		if recover() == nil {
			t.Fatalf("ack beyond Next did not panic")
		}
	}()
	s.Acked(Position{7, 20})
}

func TestRecordsAliasInput(t *testing.T) {
	s := New(Config{}, State{})
	body := []byte("payload")
	hdrs := []format.Header{{Name: []byte("k"), Value: []byte("v")}}
	out := mustSeq(t, s, batch(Input{Headers: hdrs, Body: body}), 1)
	if &out.Records[0].Body[0] != &body[0] || &out.Records[0].Headers[0] != &hdrs[0] {
		t.Fatalf("records were copied, documented to alias")
	}
}

func TestSeqSpaceExhausted(t *testing.T) {
	s := New(Config{}, State{NextSeq: ^uint64(0) - 1})
	mustSeq(t, s, batch(rec("a")), 1)
	wantInvalid(t, mustReject(t, s, batch(rec("b")), 1), "exhausted")
}

func TestMode(t *testing.T) {
	for _, m := range []Mode{ClientPrefer, ClientRequire, Arrival} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Fatalf("round trip %v: %v %v", m, got, err)
		}
	}
	if m, err := ParseMode(""); err != nil || m != ClientPrefer {
		t.Fatalf("empty mode: %v %v", m, err)
	}
	if _, err := ParseMode("wallclock"); err == nil {
		t.Fatalf("unknown mode parsed")
	}
	if Mode(9).String() != "Mode(9)" {
		t.Fatalf("unknown mode string %q", Mode(9).String())
	}
}

func TestErrorMessages(t *testing.T) {
	for _, err := range []error{SeqNumMismatchError{Expected: 7}, FencingTokenMismatchError{Current: "t"}, InvalidError{Reason: "r"}} {
		if !strings.HasPrefix(err.Error(), "facade: ") {
			t.Fatalf("message %q", err.Error())
		}
	}
	if !strings.Contains(SeqNumMismatchError{Expected: 7}.Error(), "7") {
		t.Fatalf("expected seq missing from message")
	}
}
