package verify

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"net"
	"slices"
	"strings"
	"testing"

	"github.com/anishathalye/porcupine"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// hb builds a history by hand: each op has explicit call/return times.
type hb struct{ ops []porcupine.Operation }

func rec(body string) uint64 { return RecordHash(&api.Record{Body: []byte(body)}) }

func recs(bodies ...string) []uint64 {
	out := make([]uint64, len(bodies))
	for i, b := range bodies {
		out[i] = rec(b)
	}
	return out
}

func (h *hb) add(client int, call, ret int64, in *Input, out *Output) *hb {
	h.ops = append(h.ops, porcupine.Operation{ClientId: client, Call: call, Return: ret, Input: in, Output: out})
	return h
}

func (h *hb) appendOK(c int, call, ret int64, bodies []string, start uint64) *hb {
	return h.add(c, call, ret, &Input{Stream: "s", Kind: KindAppend, Records: recs(bodies...)},
		&Output{Outcome: OutOK, Start: start, End: start + uint64(len(bodies))})
}

func (h *hb) appendUnknown(c int, call int64, in *Input) *hb {
	in.Stream, in.Kind = "s", KindAppend
	return h.add(c, call, math.MaxInt64, in, &Output{Outcome: OutUnknown})
}

func (h *hb) read(c int, call, ret int64, from, count uint64, bodies ...string) *hb {
	return h.add(c, call, ret, &Input{Stream: "s", Kind: KindRead, From: from, Count: count},
		&Output{Outcome: OutOK, Records: recs(bodies...)})
}

func (h *hb) read416(c int, call, ret int64, from, tail uint64) *hb {
	return h.add(c, call, ret, &Input{Stream: "s", Kind: KindRead, From: from, Count: 10},
		&Output{Outcome: OutRangeNotSatisfiable, Tail: tail})
}

func (h *hb) tail(c int, call, ret int64, tail uint64) *hb {
	return h.add(c, call, ret, &Input{Stream: "s", Kind: KindCheckTail}, &Output{Outcome: OutOK, Tail: tail})
}

func check(t *testing.T, h *hb) porcupine.CheckResult {
	t.Helper()
	return porcupine.CheckOperationsTimeout(Model(), h.ops, 0)
}

func TestModelLinearizable(t *testing.T) {
	cases := map[string]*hb{
		"sequential": new(hb).
			appendOK(0, 0, 1, []string{"a", "b"}, 0).
			read(1, 2, 3, 0, 10, "a", "b").
			appendOK(0, 4, 5, []string{"c"}, 2).
			tail(1, 6, 7, 3).
			read(1, 8, 9, 1, 1, "b").
			read416(1, 10, 11, 3, 3).
			read416(1, 10, 11, 7, 3),
		"concurrent appends in either order": new(hb).
			appendOK(0, 0, 10, []string{"a"}, 1).
			appendOK(1, 0, 10, []string{"b"}, 0).
			read(2, 11, 12, 0, 5, "b", "a"),
		"read concurrent with append sees before or after": new(hb).
			appendOK(0, 0, 10, []string{"a"}, 0).
			tail(1, 1, 2, 0).
			read416(1, 3, 4, 0, 0).
			read(2, 5, 6, 0, 5, "a").
			tail(1, 7, 8, 1),
		"indefinite append that happened": new(hb).
			appendUnknown(0, 0, &Input{Records: recs("x")}).
			read(1, 5, 6, 0, 5, "x").
			appendOK(1, 7, 8, []string{"y"}, 1),
		"indefinite append that did not happen": new(hb).
			appendUnknown(0, 0, &Input{Records: recs("x")}).
			tail(1, 5, 6, 0).
			appendOK(1, 7, 8, []string{"y"}, 0).
			read(1, 9, 10, 0, 5, "y"),
		"indefinite conditional append on a moved tail": new(hb).
			appendUnknown(0, 0, &Input{Records: recs("x"), MatchSeqNum: api.Uint64(0)}).
			appendOK(1, 1, 2, []string{"y"}, 0).
			read(1, 9, 10, 0, 5, "y"),
		"short read (a prefix of what is available)": new(hb).
			appendOK(0, 0, 1, []string{"a"}, 0).
			appendOK(0, 2, 3, []string{"b"}, 1).
			read(1, 4, 5, 0, 5, "a"),
		"match_seq_num and 412": new(hb).
			add(0, 0, 1, &Input{Stream: "s", Kind: KindAppend, Records: recs("a"), MatchSeqNum: api.Uint64(0)},
				&Output{Outcome: OutOK, Start: 0, End: 1}).
			add(0, 2, 3, &Input{Stream: "s", Kind: KindAppend, Records: recs("b"), MatchSeqNum: api.Uint64(0)},
				&Output{Outcome: OutSeqMismatch, Tail: 1}),
		"412 counting a pending append": new(hb).
			appendOK(0, 0, 10, []string{"a", "b"}, 0).
			add(1, 1, 2, &Input{Stream: "s", Kind: KindAppend, Records: recs("c"), MatchSeqNum: api.Uint64(0)},
				&Output{Outcome: OutSeqMismatch, Tail: 2}),
		"412 token counting a pending fence": new(hb).
			add(0, 0, 10, &Input{Stream: "s", Kind: KindAppend, Records: recs("f"), FenceTo: api.String("t1")},
				&Output{Outcome: OutOK, Start: 0, End: 1}).
			add(1, 1, 2, &Input{Stream: "s", Kind: KindAppend, Records: recs("a"), FencingToken: api.String("")},
				&Output{Outcome: OutTokenMismatch, Token: "t1"}).
			tail(1, 3, 4, 0),
		"fence then tokens": new(hb).
			add(0, 0, 1, &Input{Stream: "s", Kind: KindAppend, Records: recs("f"), FenceTo: api.String("t1")},
				&Output{Outcome: OutOK, Start: 0, End: 1}).
			add(1, 2, 3, &Input{Stream: "s", Kind: KindAppend, Records: recs("a"), FencingToken: api.String("t1")},
				&Output{Outcome: OutOK, Start: 1, End: 2}).
			add(1, 4, 5, &Input{Stream: "s", Kind: KindAppend, Records: recs("b"), FencingToken: api.String("")},
				&Output{Outcome: OutTokenMismatch, Token: "t1"}).
			// The token check runs before the seq check.
			add(1, 6, 7, &Input{Stream: "s", Kind: KindAppend, Records: recs("c"), FencingToken: api.String("zz"), MatchSeqNum: api.Uint64(9)},
				&Output{Outcome: OutTokenMismatch, Token: "t1"}).
			add(1, 8, 9, &Input{Stream: "s", Kind: KindAppend, Records: recs("d")},
				&Output{Outcome: OutOK, Start: 2, End: 3}),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			if got := check(t, h); got != porcupine.Ok {
				t.Fatalf("check = %v, want Ok", got)
			}
		})
	}
}

func TestModelRejects(t *testing.T) {
	cases := map[string]*hb{
		"lost ack": new(hb).
			appendOK(0, 0, 1, []string{"a", "b"}, 0).
			tail(1, 2, 3, 0),
		"lost ack seen by a read": new(hb).
			appendOK(0, 0, 1, []string{"a", "b"}, 0).
			read416(1, 2, 3, 0, 0),
		"duplicated seq": new(hb).
			appendOK(0, 0, 1, []string{"a"}, 0).
			appendOK(1, 2, 3, []string{"b"}, 0),
		"duplicated seq, concurrent": new(hb).
			appendOK(0, 0, 10, []string{"a"}, 0).
			appendOK(1, 0, 10, []string{"b"}, 0),
		"read of a record never appended": new(hb).
			appendOK(0, 0, 1, []string{"a"}, 0).
			read(1, 2, 3, 0, 5, "z"),
		"read of a definitely failed append": new(hb).
			appendOK(0, 0, 1, []string{"a"}, 0).
			add(0, 2, 3, &Input{Stream: "s", Kind: KindAppend, Records: recs("b"), MatchSeqNum: api.Uint64(0)},
				&Output{Outcome: OutSeqMismatch, Tail: 1}).
			read(1, 4, 5, 0, 5, "a", "b"),
		"read before the append was called": new(hb).
			read(1, 0, 1, 0, 5, "a").
			appendOK(0, 2, 3, []string{"a"}, 0),
		"read past the tail": new(hb).
			appendOK(0, 0, 1, []string{"a"}, 0).
			read(1, 4, 5, 0, 5, "a", "b"),
		"empty read below the tail": new(hb).
			appendOK(0, 0, 1, []string{"a"}, 0).
			read(1, 4, 5, 0, 5),
		"read beyond its count": new(hb).
			appendOK(0, 0, 1, []string{"a", "b"}, 0).
			read(1, 4, 5, 0, 1, "a", "b"),
		"records out of order": new(hb).
			appendOK(0, 0, 1, []string{"a", "b"}, 0).
			read(1, 4, 5, 0, 5, "b", "a"),
		"wrong 412: the seq matched": new(hb).
			add(0, 0, 1, &Input{Stream: "s", Kind: KindAppend, Records: recs("a"), MatchSeqNum: api.Uint64(0)},
				&Output{Outcome: OutSeqMismatch, Tail: 0}),
		"wrong 412: expected seq below the tail": new(hb).
			appendOK(0, 0, 1, []string{"a", "b"}, 0).
			add(0, 2, 3, &Input{Stream: "s", Kind: KindAppend, Records: recs("c"), MatchSeqNum: api.Uint64(5)},
				&Output{Outcome: OutSeqMismatch, Tail: 1}),
		"wrong 412: expected seq is the match": new(hb).
			appendOK(0, 0, 1, []string{"a"}, 0).
			add(0, 2, 3, &Input{Stream: "s", Kind: KindAppend, Records: recs("b"), MatchSeqNum: api.Uint64(3)},
				&Output{Outcome: OutSeqMismatch, Tail: 3}),
		"wrong 412: token matched": new(hb).
			add(0, 0, 1, &Input{Stream: "s", Kind: KindAppend, Records: recs("a"), FencingToken: api.String("")},
				&Output{Outcome: OutTokenMismatch, Token: ""}),
		"ack despite a token mismatch": new(hb).
			add(0, 0, 1, &Input{Stream: "s", Kind: KindAppend, Records: recs("f"), FenceTo: api.String("t1")},
				&Output{Outcome: OutOK, Start: 0, End: 1}).
			add(1, 2, 3, &Input{Stream: "s", Kind: KindAppend, Records: recs("a"), FencingToken: api.String("t0")},
				&Output{Outcome: OutOK, Start: 1, End: 2}),
		"ack despite a seq mismatch": new(hb).
			add(0, 0, 1, &Input{Stream: "s", Kind: KindAppend, Records: recs("a"), MatchSeqNum: api.Uint64(3)},
				&Output{Outcome: OutOK, Start: 0, End: 1}),
		"416 below the tail": new(hb).
			appendOK(0, 0, 1, []string{"a"}, 0).
			read416(1, 2, 3, 0, 1),
		"indefinite append seen, then lost": new(hb).
			appendUnknown(0, 0, &Input{Records: recs("x")}).
			read(1, 5, 6, 0, 5, "x").
			tail(1, 7, 8, 0),
	}
	for name, h := range cases {
		t.Run(name, func(t *testing.T) {
			if got := check(t, h); got != porcupine.Illegal {
				t.Fatalf("check = %v, want Illegal", got)
			}
		})
	}
}

// Streams are independent: a violation in one is found next to a good
// other, and ops of two streams never constrain each other.
func TestModelPartitions(t *testing.T) {
	ops := []porcupine.Operation{
		{ClientId: 0, Call: 0, Return: 1, Input: &Input{Stream: "a", Kind: KindAppend, Records: recs("x")}, Output: &Output{Outcome: OutOK, Start: 0, End: 1}},
		{ClientId: 1, Call: 2, Return: 3, Input: &Input{Stream: "b", Kind: KindCheckTail}, Output: &Output{Outcome: OutOK, Tail: 0}},
	}
	if got := porcupine.CheckOperationsTimeout(Model(), ops, 0); got != porcupine.Ok {
		t.Fatalf("two streams: %v, want Ok", got)
	}
	ops = append(ops, porcupine.Operation{ClientId: 1, Call: 4, Return: 5, Input: &Input{Stream: "a", Kind: KindCheckTail}, Output: &Output{Outcome: OutOK, Tail: 0}})
	if got := porcupine.CheckOperationsTimeout(Model(), ops, 0); got != porcupine.Illegal {
		t.Fatalf("lost ack on a: %v, want Illegal", got)
	}
}

func TestRecordHash(t *testing.T) {
	a := api.Record{Body: []byte("ab")}
	b := api.Record{Headers: []api.Header{{Name: []byte("a"), Value: []byte("b")}}}
	c := api.Record{Headers: []api.Header{{Name: []byte("ab")}}}
	f := api.FenceRecord("ab")
	hs := map[uint64]string{}
	for name, r := range map[string]*api.Record{"body": &a, "header": &b, "name only": &c, "fence": &f} {
		h := RecordHash(r)
		if other, dup := hs[h]; dup {
			t.Fatalf("%s and %s hash alike", name, other)
		}
		hs[h] = name
	}
}

func TestClassify(t *testing.T) {
	seq := &api.Error{Status: 412, Body: api.AppendConditionFailed{SeqNumMismatch: api.Uint64(7)}}
	tok := &api.Error{Status: 412, Body: api.AppendConditionFailed{FencingTokenMismatch: api.String("t")}}
	rng := &api.Error{Status: 416, Body: api.TailResponse{Tail: api.StreamPosition{SeqNum: 3}}}
	unavailable := &api.Error{Status: 503, Code: api.CodeUnavailable}
	refused := &sdk.TransportError{Op: "POST", Err: &net.OpError{Op: "dial", Err: errors.New("refused")}}
	reset := &sdk.TransportError{Op: "POST", Err: errors.New("connection reset")}
	for _, tc := range []struct {
		name string
		kind Kind
		err  error
		want Outcome
		ok   bool
	}{
		{"ok", KindAppend, nil, OutOK, true},
		{"412 seq", KindAppend, seq, OutSeqMismatch, true},
		{"412 token", KindAppend, tok, OutTokenMismatch, true},
		{"416", KindRead, rng, OutRangeNotSatisfiable, true},
		{"503 append", KindAppend, unavailable, OutUnknown, true},
		{"reset append", KindAppend, reset, OutUnknown, true},
		{"refused append: no effect", KindAppend, refused, 0, false},
		{"422: no effect", KindAppend, &api.Error{Status: 422, Code: api.CodeInvalid}, 0, false},
		{"failed read: no information", KindRead, reset, 0, false},
		{"412 after an indefinite failure", KindAppend, &sdk.AfterIndefiniteError{Earlier: reset, Err: seq}, OutUnknown, true},
	} {
		got, ok := Classify(tc.kind, tc.err)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("%s: Classify = %v, %v; want %v, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
	out := outputFromError(OutSeqMismatch, seq)
	if out.Tail != 7 {
		t.Errorf("412 seq output tail = %d, want 7", out.Tail)
	}
	if out := outputFromError(OutTokenMismatch, tok); out.Token != "t" {
		t.Errorf("412 token output = %q, want t", out.Token)
	}
	if out := outputFromError(OutRangeNotSatisfiable, rng); out.Tail != 3 {
		t.Errorf("416 output tail = %d, want 3", out.Tail)
	}
}

// Pruning the appends no free seq could hold (pruneUnplaceable) never
// changes the verdict: on small histories of one stream, drawn from an
// execution of the model (indefinite appends applied or not) and some
// then corrupted, the check with and without them agrees.
func TestPruneUnplaceableKeepsVerdicts(t *testing.T) {
	rng := rand.New(rand.NewPCG(28, 2))
	verdicts, prunedIn := map[porcupine.CheckResult]int{}, 0
	for range 3000 {
		ops := drawHistory(rng)
		kept, n := pruneUnplaceable(slices.Clone(ops), map[string]bool{"s": true})
		want := porcupine.CheckOperationsTimeout(Model(), ops, 0)
		got := porcupine.CheckOperationsTimeout(Model(), kept, 0)
		if got != want {
			var b strings.Builder
			for _, op := range ops {
				fmt.Fprintf(&b, "  [%d, %d] %s\n", op.Call, op.Return, describeOperation(op.Input, op.Output))
			}
			t.Fatalf("%d appends pruned: %v, want %v, history:\n%s", n, got, want, b.String())
		}
		verdicts[want]++
		if n > 0 {
			prunedIn++
		}
	}
	t.Logf("verdicts %v; appends pruned in %d histories", verdicts, prunedIn)
	if verdicts[porcupine.Ok] < 100 || verdicts[porcupine.Illegal] < 100 || prunedIn < 100 {
		t.Fatalf("the draw is too narrow: verdicts %v, pruned in %d", verdicts, prunedIn)
	}
}

// drawHistory runs one stream's model with up to ten concurrent
// operations and records what each saw; a third of the histories then
// get one result corrupted.
func drawHistory(rng *rand.Rand) []porcupine.Operation {
	type pending struct {
		op   porcupine.Operation
		at   int64 // when it takes effect
		kind int
	}
	n := 4 + rng.IntN(7)
	ps := make([]pending, n)
	for i := range ps {
		call := rng.Int64N(100)
		at := call + rng.Int64N(20)
		ps[i] = pending{op: porcupine.Operation{ClientId: i, Call: call, Return: at + rng.Int64N(10)}, at: at, kind: rng.IntN(10)}
	}
	slices.SortFunc(ps, func(a, b pending) int { return int(a.at - b.at) })
	var log []uint64
	token, next := "", uint64(1)
	records := func() []uint64 {
		out := []uint64{next}
		next++
		if rng.IntN(2) == 0 {
			out = append(out, next)
			next++
		}
		return out
	}
	ops := make([]porcupine.Operation, 0, n)
	for _, p := range ps {
		op := p.op
		tail := uint64(len(log))
		switch {
		case p.kind < 3: // an acknowledged or refused append
			in := &Input{Stream: "s", Kind: KindAppend, Records: records()}
			if rng.IntN(4) == 0 {
				in.MatchSeqNum = api.Uint64(tail + uint64(rng.IntN(2)))
			}
			if in.MatchSeqNum != nil && *in.MatchSeqNum != tail {
				op.Input, op.Output = in, &Output{Outcome: OutSeqMismatch, Tail: tail}
			} else {
				log = append(log, in.Records...)
				op.Input, op.Output = in, &Output{Outcome: OutOK, Start: tail, End: uint64(len(log))}
			}
		case p.kind < 6: // indefinite: applied or not; some fence
			in := &Input{Stream: "s", Kind: KindAppend, Records: records()}
			if rng.IntN(3) == 0 {
				tok := fmt.Sprint(rng.IntN(3))
				in.Records, in.FenceTo = append([]uint64{1 << 40}, in.Records...), &tok
			}
			if rng.IntN(2) == 0 {
				log = append(log, in.Records...)
				if in.FenceTo != nil {
					token = *in.FenceTo
				}
			}
			op.Input, op.Output, op.Return = in, &Output{Outcome: OutUnknown}, math.MaxInt64
		case p.kind < 9: // a read
			from, count := uint64(rng.IntN(len(log)+2)), uint64(1+rng.IntN(3))
			in := &Input{Stream: "s", Kind: KindRead, From: from, Count: count}
			if from >= tail {
				op.Input, op.Output = in, &Output{Outcome: OutRangeNotSatisfiable, Tail: tail}
			} else {
				op.Input, op.Output = in, &Output{Outcome: OutOK, Records: slices.Clone(log[from:min(from+count, tail)])}
			}
		default: // a check-tail, or a 412 of a stale token
			if rng.IntN(2) == 0 {
				op.Input, op.Output = &Input{Stream: "s", Kind: KindCheckTail}, &Output{Outcome: OutOK, Tail: tail}
			} else {
				stale := token + "x"
				op.Input = &Input{Stream: "s", Kind: KindAppend, Records: records(), FencingToken: &stale}
				op.Output = &Output{Outcome: OutTokenMismatch, Token: token}
			}
		}
		ops = append(ops, op)
	}
	if rng.IntN(3) == 0 {
		i := rng.IntN(len(ops))
		switch out := *ops[i].Output.(*Output); {
		case len(out.Records) > 0:
			out.Records = slices.Clone(out.Records)
			out.Records[rng.IntN(len(out.Records))] = next + 7
			ops[i].Output = &out
		case out.Outcome == OutOK:
			out.Start, out.End, out.Tail = out.Start+1, out.End+1, out.Tail+1
			ops[i].Output = &out
		}
	}
	return ops
}
