package facade

import (
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"

	"github.com/starlog/starlog/shared/format"
)

// TestSequenceScenarios runs the sequencer over the scenarios in
// testdata/sequence/*.txt, one Stream a file. Commands:
//
//	new [next=<seq>] [ts=<ms>] [token=<t>] [trim=<seq>] [mode=<m>] [uncapped]
//	append now=<ms> [match=<seq>] [token=<t>]
//	ack seq=<seq> ts=<ms>
//	reconfigure [mode=<m>] [uncapped]
//
// An append's input is its records, one a line: `-` (a plain record
// without a client timestamp), or `ts=<ms>` (the client's timestamp)
// and optionally `fence=<token>` (`fence=` clears it), `trim=<seq>`, `cmd=<name>` (an unknown command), `headers=<n>`
// (a command record with n headers), `bytes=<n>` (the body's size). An
// append prints the batch it sequenced (each record's seq@ts, the token,
// the trim point, the metered size) or the error, then the stream: next
// (pending), tail (durable), and the pending state.
func TestSequenceScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/sequence", func(t *testing.T, path string) {
		var s *Stream
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			u := func(key string) (uint64, bool) {
				a, ok := d.Arg(key)
				if !ok {
					return 0, false
				}
				n, err := strconv.ParseUint(a.SingleVal(t), 10, 64)
				if err != nil {
					d.Fatalf(t, "%s: %v", key, err)
				}
				return n, true
			}
			cfg := func() Config {
				var c Config
				if a, ok := d.Arg("mode"); ok {
					m, err := ParseMode(a.SingleVal(t))
					if err != nil {
						d.Fatalf(t, "%v", err)
					}
					c.Mode = m
				}
				c.Uncapped = d.HasArg("uncapped")
				return c
			}
			if d.Cmd != "new" && s == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			var out strings.Builder
			switch d.Cmd {
			case "new":
				var st State
				st.NextSeq, _ = u("next")
				st.LastTimestamp, _ = u("ts")
				st.TrimPoint, _ = u("trim")
				if a, ok := d.Arg("token"); ok && len(a.Vals) > 0 {
					st.FencingToken = a.Vals[0]
				}
				s = New(cfg(), st)
			case "reconfigure":
				s.Reconfigure(cfg())
			case "append":
				now, ok := u("now")
				if !ok {
					d.Fatalf(t, "append needs now")
				}
				req := Request{Records: readRecords(t, d)}
				if m, ok := u("match"); ok {
					req.MatchSeqNum = &m
				}
				if a, ok := d.Arg("token"); ok {
					tok := ""
					if len(a.Vals) > 0 {
						tok = a.Vals[0]
					}
					req.FencingToken = &tok
				}
				before := s.Pending()
				seq, err := s.Sequence(req, now)
				if err != nil {
					fmt.Fprintln(&out, describeErr(err))
					if s.Pending() != before {
						fmt.Fprintf(&out, "BUG: a rejected batch moved the stream from %+v\n", before)
					}
					break
				}
				var recs []string
				for _, r := range seq.Records {
					recs = append(recs, fmt.Sprintf("%d@%d", r.SeqNum, r.Timestamp))
				}
				fmt.Fprintf(&out, "ok [%s] end=%d@%d token=%q trim=%d metered=%d\n",
					strings.Join(recs, " "), seq.End.SeqNum, seq.End.Timestamp, seq.FencingToken, seq.TrimPoint, seq.Metered)
			case "ack":
				seq, _ := u("seq")
				ts, _ := u("ts")
				func() {
					defer func() {
						if r := recover(); r != nil {
							fmt.Fprintf(&out, "panic: %v\n", r)
						}
					}()
					s.Acked(Position{SeqNum: seq, Timestamp: ts})
				}()
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			p := s.Pending()
			fmt.Fprintf(&out, "next=%d tail=%d@%d ts=%d token=%q trim=%d\n",
				s.Next(), s.Tail().SeqNum, s.Tail().Timestamp, p.LastTimestamp, p.FencingToken, p.TrimPoint)
			return out.String()
		})
	})
}

// readRecords parses an append's input lines into records.
func readRecords(t *testing.T, d *datadriven.TestData) []Input {
	var recs []Input
	for line := range strings.Lines(d.Input) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		in := Input{Body: []byte("x")}
		for _, kv := range f {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "-":
			case "ts":
				ts := parseU(t, d, v)
				in.Timestamp = &ts
			case "fence":
				in.Headers = []format.Header{{Value: []byte("fence")}}
				in.Body = []byte(v)
			case "trim":
				in.Headers = []format.Header{{Value: []byte("trim")}}
				in.Body = binary.BigEndian.AppendUint64(nil, parseU(t, d, v))
			case "cmd":
				in.Headers = []format.Header{{Value: []byte(v)}}
			case "headers":
				in.Headers = nil
				for range parseU(t, d, v) {
					in.Headers = append(in.Headers, format.Header{Value: []byte("fence")})
				}
			case "bytes":
				in.Body = make([]byte, parseU(t, d, v))
			default:
				d.Fatalf(t, "record: unknown field %q", kv)
			}
		}
		recs = append(recs, in)
	}
	return recs
}

func parseU(t *testing.T, d *datadriven.TestData, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		d.Fatalf(t, "%q: %v", s, err)
	}
	return n
}

// describeErr names an error as the API answers it.
func describeErr(err error) string {
	var sm SeqNumMismatchError
	var fm FencingTokenMismatchError
	var ie InvalidError
	switch {
	case errors.As(err, &sm):
		return fmt.Sprintf("412 seq_num_mismatch expected=%d", sm.Expected)
	case errors.As(err, &fm):
		return fmt.Sprintf("412 fencing_token_mismatch current=%q", fm.Current)
	case errors.As(err, &ie):
		return "422 invalid: " + ie.Reason
	}
	return "error: " + err.Error()
}
