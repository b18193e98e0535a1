package facade

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"pgregory.net/rapid"

	"github.com/starlog/starlog/shared/format"
)

var tokens = []string{"", "a", "bb"}

// genInput draws a record: ordinary or command (valid or not), with or
// without a client timestamp near now.
func genInput(t *rapid.T, now uint64) Input {
	var in Input
	if rapid.Bool().Draw(t, "hasTS") {
		ts := now + rapid.Uint64Range(0, 40).Draw(t, "tsOff") - 20
		in.Timestamp = &ts
	}
	switch rapid.IntRange(0, 9).Draw(t, "kind") {
	case 0:
		in.Headers = []format.Header{{Value: []byte("fence")}}
		in.Body = []byte(rapid.SampledFrom(tokens).Draw(t, "fenceTok"))
	case 1:
		in.Headers = []format.Header{{Value: []byte("trim")}}
		in.Body = binary.BigEndian.AppendUint64(nil, rapid.Uint64Range(0, 200).Draw(t, "trimPt"))
	case 2:
		// Invalid: an unknown command, or a command with a second header.
		if rapid.Bool().Draw(t, "badKind") {
			in.Headers = []format.Header{{Value: []byte("nope")}}
		} else {
			in.Headers = []format.Header{{Value: []byte("fence")}, {Name: []byte("x")}}
		}
	default:
		in.Headers = []format.Header{{Name: []byte("k"), Value: []byte("v")}}
		in.Body = rapid.SliceOfN(rapid.Byte(), 0, 8).Draw(t, "body")
	}
	return in
}

// model is an independent, simple statement of the append semantics.
type model struct {
	cfg    Config
	next   uint64
	lastTS uint64
	token  string
	trim   uint64
}

// expect returns the outcome the model predicts: "" (accepted), "invalid",
// "fence" or "seq".
func (m *model) expect(req Request) string {
	if len(req.Records) == 0 {
		return "invalid"
	}
	for _, in := range req.Records {
		if m.cfg.Mode == ClientRequire && in.Timestamp == nil {
			return "invalid"
		}
		if len(in.Headers) > 0 && len(in.Headers[0].Name) == 0 {
			v := string(in.Headers[0].Value)
			if len(in.Headers) != 1 || (v != "fence" && v != "trim") {
				return "invalid"
			}
		}
	}
	if req.FencingToken != nil && *req.FencingToken != m.token {
		return "fence"
	}
	if req.MatchSeqNum != nil && *req.MatchSeqNum != m.next {
		return "seq"
	}
	return ""
}

func (m *model) apply(req Request, now uint64) (ts []uint64) {
	for _, in := range req.Records {
		var t uint64
		switch {
		case m.cfg.Mode == Arrival || in.Timestamp == nil:
			t = now
		case m.cfg.Uncapped || *in.Timestamp <= now:
			t = *in.Timestamp
		default:
			t = now
		}
		if t < m.lastTS {
			t = m.lastTS
		}
		m.lastTS = t
		ts = append(ts, t)
		if len(in.Headers) == 1 && len(in.Headers[0].Name) == 0 {
			switch string(in.Headers[0].Value) {
			case "fence":
				m.token = string(in.Body)
			case "trim":
				p := min(binary.BigEndian.Uint64(in.Body), m.next+1)
				m.trim = max(m.trim, p)
			}
		}
		m.next++
	}
	return ts
}

func kindOf(err error) string {
	var ie InvalidError
	var fe FencingTokenMismatchError
	var se SeqNumMismatchError
	switch {
	case err == nil:
		return ""
	case errors.As(err, &ie):
		return "invalid"
	case errors.As(err, &fe):
		return "fence"
	case errors.As(err, &se):
		return "seq"
	}
	return "other: " + err.Error()
}

func genConfig(t *rapid.T) Config {
	return Config{
		Mode:     Mode(rapid.IntRange(0, 2).Draw(t, "mode")),
		Uncapped: rapid.Bool().Draw(t, "uncapped"),
	}
}

func TestPropertySequencing(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		start := rapid.Uint64Range(0, 1000).Draw(t, "start")
		st := State{
			NextSeq:       start,
			LastTimestamp: rapid.Uint64Range(0, 1000).Draw(t, "lastTS"),
			FencingToken:  rapid.SampledFrom(tokens).Draw(t, "token"),
			TrimPoint:     rapid.Uint64Range(0, start).Draw(t, "trim"),
		}
		cfg := genConfig(t)
		s := New(cfg, st)
		m := &model{cfg: cfg, next: st.NextSeq, lastTS: st.LastTimestamp, token: st.FencingToken, trim: st.TrimPoint}

		now := rapid.Uint64Range(500, 1500).Draw(t, "now0")
		wantSeq := start // every seq from start up is assigned exactly once, in order
		prevTS := st.LastTimestamp
		var pending []Position
		tail := Position{SeqNum: st.NextSeq, Timestamp: st.LastTimestamp}

		steps := rapid.IntRange(1, 40).Draw(t, "steps")
		for range steps {
			switch rapid.IntRange(0, 9).Draw(t, "op") {
			case 0:
				// The clock may step back as well as forward.
				now = now + rapid.Uint64Range(0, 60).Draw(t, "dt") - 20
			case 1:
				if len(pending) > 0 {
					s.Acked(pending[0])
					tail, pending = pending[0], pending[1:]
				}
			case 2:
				cfg = genConfig(t)
				s.Reconfigure(cfg)
				m.cfg = cfg
			default:
				n := rapid.IntRange(0, 6).Draw(t, "n")
				req := Request{Records: make([]Input, n)}
				for i := range req.Records {
					req.Records[i] = genInput(t, now)
				}
				switch rapid.IntRange(0, 3).Draw(t, "match") {
				case 1:
					req.MatchSeqNum = u64(m.next)
				case 2:
					req.MatchSeqNum = u64(m.next + rapid.Uint64Range(0, 3).Draw(t, "off") - 1)
				}
				if rapid.Bool().Draw(t, "hasTok") {
					req.FencingToken = str(rapid.SampledFrom(tokens).Draw(t, "reqTok"))
				}

				want := m.expect(req)
				before := *s
				out, err := s.Sequence(req, now)
				if got := kindOf(err); got != want {
					t.Fatalf("outcome %q, model says %q (err %v)", got, want, err)
				}
				if err != nil {
					if !reflect.DeepEqual(before, *s) {
						t.Fatalf("rejection changed the stream: %+v -> %+v", before, *s)
					}
					var se SeqNumMismatchError
					if errors.As(err, &se) && se.Expected != m.next {
						t.Fatalf("expected seq %d, want %d", se.Expected, m.next)
					}
					var fe FencingTokenMismatchError
					if errors.As(err, &fe) && fe.Current != m.token {
						t.Fatalf("current token %q, want %q", fe.Current, m.token)
					}
					break
				}
				wantTS := m.apply(req, now)
				for i, r := range out.Records {
					if r.SeqNum != wantSeq {
						t.Fatalf("seq %d, want %d (dense, assigned once)", r.SeqNum, wantSeq)
					}
					wantSeq++
					if r.Timestamp < prevTS {
						t.Fatalf("timestamp %d decreased below %d", r.Timestamp, prevTS)
					}
					prevTS = r.Timestamp
					if r.Timestamp != wantTS[i] {
						t.Fatalf("timestamp %d, model says %d", r.Timestamp, wantTS[i])
					}
				}
				if out.Start.SeqNum != out.Records[0].SeqNum || out.End.SeqNum != wantSeq || out.End.Timestamp != prevTS {
					t.Fatalf("bad bounds %+v %+v", out.Start, out.End)
				}
				if out.FencingToken != m.token || out.TrimPoint != m.trim {
					t.Fatalf("token/trim %q/%d, model %q/%d", out.FencingToken, out.TrimPoint, m.token, m.trim)
				}
				pending = append(pending, out.End)
			}
			if s.Next() != m.next || s.Next() != wantSeq {
				t.Fatalf("Next %d, model %d, assigned up to %d", s.Next(), m.next, wantSeq)
			}
			if s.Tail() != tail {
				t.Fatalf("Tail %+v, want %+v", s.Tail(), tail)
			}
			if s.Tail().SeqNum > s.Next() {
				t.Fatalf("Tail %d beyond Next %d", s.Tail().SeqNum, s.Next())
			}
			if got := s.Pending(); got != (State{NextSeq: m.next, LastTimestamp: m.lastTS, FencingToken: m.token, TrimPoint: m.trim}) {
				t.Fatalf("pending state %+v, model %+v", got, *m)
			}
		}
	})
}

// Every batch the facade accepts renders: the format's limits (records per
// block, block size, fencing token, dense seqs, non-decreasing timestamps)
// are never tighter than the facade's, so no failure can strike a batch
// after it was sequenced (a seq hole for its stream). Bodies and headers
// are drawn up to and past the batch limits.
func TestAcceptedBatchesRender(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		now := uint64(1_000_000)
		s := New(Config{Mode: Mode(rapid.IntRange(0, 2).Draw(t, "mode")), Uncapped: rapid.Bool().Draw(t, "uncapped")}, State{NextSeq: rapid.Uint64Range(0, 1<<40).Draw(t, "next")})
		var batches []format.Batch
		for i := range rapid.IntRange(1, 4).Draw(t, "batches") {
			var req Request
			n := rapid.IntRange(1, 1001).Draw(t, "records")
			big := rapid.IntRange(0, 3000).Draw(t, "bodyMax")
			for range n {
				in := genInput(t, now)
				if rapid.IntRange(0, 3).Draw(t, "big") == 0 {
					in.Body = make([]byte, rapid.IntRange(0, big).Draw(t, "bodyLen"))
				}
				if rapid.IntRange(0, 9).Draw(t, "manyHeaders") == 0 {
					for range rapid.IntRange(1, 40).Draw(t, "headers") {
						in.Headers = append(in.Headers, format.Header{Name: []byte("h"), Value: make([]byte, rapid.IntRange(0, 64).Draw(t, "hv"))})
					}
				}
				req.Records = append(req.Records, in)
			}
			if rapid.Bool().Draw(t, "token") {
				tok := string(make([]byte, rapid.IntRange(0, 40).Draw(t, "tokLen")))
				req.FencingToken = &tok
			}
			seq, err := s.Sequence(req, now+uint64(i))
			if err != nil {
				continue
			}
			batches = append(batches, format.Batch{StreamID: "0123456789abcdef0123456789abcdef", FencingToken: seq.FencingToken, Records: seq.Records})
		}
		if len(batches) == 0 {
			return
		}
		if _, err := format.EncodeBundle(1, 0, format.Nonce{}, batches); err != nil {
			t.Fatalf("an accepted batch does not render: %v", err)
		}
	})
}
