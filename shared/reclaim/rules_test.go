package reclaim

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
	"pgregory.net/rapid"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// TestTrimScenarios runs the retention and trim rule (PlanTrim) over the
// scenarios in testdata/trim.txt:
//
//	trim [point=<seq>] [cut=<ms>] [cap=<bytes>] [superseded=<bytes>] [dropped=<bytes>]
//
// with one input line per row of the stream, in seq order: `row <first>
// <end> [bytes=<n>] [max-ts=<ms>] [span] [marked] [trimmed]` (span: a
// span ref, not a catalog row; marked: its object's reclaim entry is
// already marked Drop, a reservation, and counts in what waits; trimmed: a
// greatest catalog row an earlier trim marked Trimmed, its entry marked
// too). The output is the rows that go, the row reserved or the greatest
// catalog row marked Trimmed, if any.
func TestTrimScenarios(t *testing.T) {
	datadriven.RunTest(t, "testdata/trim.txt", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd != "trim" {
			t.Fatalf("unknown command %q", d.Cmd)
		}
		args := map[string]uint64{}
		for _, a := range d.CmdArgs {
			args[a.Key] = atou(t, strings.Join(a.Vals, ","))
		}
		outputCap := args["cap"]
		if outputCap == 0 {
			outputCap = settle.DefaultConfig().OutputCap
		}
		w := settle.Waiting{Superseded: args["superseded"], Dropped: args["dropped"], Drops: map[string]uint64{}}
		var rows []meta.Ref
		for line := range strings.Lines(d.Input) {
			f := strings.Fields(line)
			if len(f) < 3 || f[0] != "row" {
				t.Fatalf("bad row line %q", line)
			}
			r := meta.Ref{FirstSeq: atou(t, f[1]), EndSeq: atou(t, f[2])}
			var bytes uint64
			span, marked, trimmed := false, false, false
			for _, kv := range f[3:] {
				k, v, _ := strings.Cut(kv, "=")
				switch k {
				case "bytes":
					bytes = atou(t, v)
				case "max-ts":
					r.MaxTimestamp = atou(t, v)
				case "span":
					span = true
				case "marked":
					marked = true
				case "trimmed":
					trimmed, marked = true, true
				default:
					t.Fatalf("row: unknown field %q", kv)
				}
			}
			if span {
				r.Span = &meta.Span{Class: meta.Express, Star: "c1", Epoch: 1}
			} else {
				r.Settled = &meta.Settled{Epoch: 1, FirstSeq: r.FirstSeq, Bytes: bytes, Sealed: trimmed, Trimmed: trimmed}
			}
			if marked {
				w.Drops[meta.ReclaimKey("s", 1, r.FirstSeq, 0).SK] = bytes
				w.Dropped += bytes
			}
			rows = append(rows, r)
		}
		p := PlanTrim("s", rows, args["point"], args["cut"], w, outputCap)
		var out strings.Builder
		for _, r := range rows[:p.Drop] {
			fmt.Fprintf(&out, "drop [%d,%d) %d B\n", r.FirstSeq, r.EndSeq, r.Settled.Bytes)
		}
		if p.Reserve {
			r := rows[p.Drop]
			fmt.Fprintf(&out, "reserve [%d,%d) %d B\n", r.FirstSeq, r.EndSeq, r.Settled.Bytes)
		}
		if p.MarkTrimmed {
			r := rows[p.Drop]
			fmt.Fprintf(&out, "mark trimmed [%d,%d) %d B\n", r.FirstSeq, r.EndSeq, r.Settled.Bytes)
		}
		if out.Len() == 0 {
			return "keep all\n"
		}
		return out.String()
	})
}

// No trim removes a record its policy still keeps, nor the stream's
// greatest catalog row; what goes is a prefix, and the rows left chain
// from a catalog row. The greatest catalog row is marked Trimmed only
// when every row before it goes and its own records are all below the
// trim point or older than the cut, and then always (unless the storage
// bound reserves it): retention forgets an idle stream's records too.
func TestTrimKeepsWhatThePolicyKeeps(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 8).Draw(t, "rows")
		var rows []meta.Ref
		seq, ts := uint64(0), uint64(0)
		for i := range n {
			r := meta.Ref{FirstSeq: seq}
			seq += uint64(rapid.IntRange(1, 10).Draw(t, fmt.Sprint("len", i)))
			if rapid.IntRange(0, 9).Draw(t, fmt.Sprint("hole", i)) == 0 {
				r.FirstSeq++ // a row that does not chain from the one before
			}
			r.EndSeq = max(seq, r.FirstSeq+1)
			seq = r.EndSeq
			ts += uint64(rapid.IntRange(0, 100).Draw(t, fmt.Sprint("ts", i)))
			r.MaxTimestamp = ts
			if i == n-1 && rapid.Bool().Draw(t, "span tail") {
				r.Span = &meta.Span{Class: meta.Express, Star: "c1", Epoch: 1}
			} else {
				r.Settled = &meta.Settled{Epoch: 1, FirstSeq: r.FirstSeq, Bytes: uint64(rapid.IntRange(1, 1000).Draw(t, fmt.Sprint("bytes", i)))}
				if i == 0 && rapid.IntRange(0, 3).Draw(t, "trimmed first") == 0 {
					// An earlier pass marked it Trimmed as the greatest row.
					r.Settled.Sealed, r.Settled.Trimmed = true, true
				}
			}
			rows = append(rows, r)
		}
		trim := uint64(rapid.IntRange(0, int(seq)+1).Draw(t, "trim point"))
		cut := uint64(rapid.IntRange(0, int(ts)+1).Draw(t, "cut"))
		w := settle.Waiting{Superseded: uint64(rapid.IntRange(0, 2000).Draw(t, "superseded")), Drops: map[string]uint64{}}
		outputCap := uint64(rapid.IntRange(1, 2000).Draw(t, "cap"))
		p := PlanTrim("s", rows, trim, cut, w, outputCap)
		greatest := -1
		for i, r := range rows {
			if r.Settled != nil {
				greatest = i
			}
		}
		if p.Drop > 0 && p.Drop > greatest {
			t.Fatalf("dropped %d rows, the greatest catalog row is row %d", p.Drop, greatest)
		}
		kept := func(r meta.Ref) bool { return r.EndSeq > trim && (cut == 0 || r.MaxTimestamp >= cut) }
		for i, r := range rows[:p.Drop] {
			if !r.Settled.Trimmed && kept(r) {
				t.Fatalf("row %d [%d,%d) at %d dropped: below neither the trim point %d nor the cut %d", i, r.FirstSeq, r.EndSeq, r.MaxTimestamp, trim, cut)
			}
			if next := rows[i+1]; next.Settled == nil || next.FirstSeq != r.EndSeq {
				t.Fatalf("row %d dropped without a catalog row chained after it", i)
			}
		}
		if p.Reserve && p.MarkTrimmed {
			t.Fatalf("row %d both reserved and marked Trimmed", p.Drop)
		}
		if p.Reserve && p.Drop != greatest && !trimmable(rows[p.Drop], rows[p.Drop+1], trim, cut) {
			t.Fatalf("reserved row %d may not go by its policy", p.Drop)
		}
		if p.Reserve && p.Drop == greatest && (kept(rows[greatest]) || rows[greatest].Settled.Trimmed) {
			t.Fatalf("greatest catalog row %d reserved though its policy keeps it or it is marked already", greatest)
		}
		if p.MarkTrimmed {
			r := rows[p.Drop]
			if p.Drop != greatest || r.Settled.Trimmed || kept(r) {
				t.Fatalf("row %d [%d,%d) at %d marked Trimmed (greatest catalog row %d, trim point %d, cut %d)", p.Drop, r.FirstSeq, r.EndSeq, r.MaxTimestamp, greatest, trim, cut)
			}
		}
		// Forgets: every row before the greatest catalog row went, and its
		// own records are past the policy: it is marked (or reserved).
		if greatest >= 0 && p.Drop == greatest && !p.Reserve && !p.MarkTrimmed && !rows[greatest].Settled.Trimmed && !kept(rows[greatest]) {
			t.Fatalf("greatest catalog row %d [%d,%d) at %d is past its policy (trim point %d, cut %d) and keeps its records", greatest,
				rows[greatest].FirstSeq, rows[greatest].EndSeq, rows[greatest].MaxTimestamp, trim, cut)
		}
	})
}

// The trim rule keeps stored ≤ 1.1 × retained + cap: an object moves from
// retained to waiting only while everything waiting fits a tenth of what
// is retained after it plus one cap, or when nothing else waits.
func TestTrimFits(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		outputCap := uint64(rapid.IntRange(1, 1000).Draw(t, "cap"))
		retained := uint64(rapid.IntRange(0, 100_000).Draw(t, "retained"))
		waiting := uint64(rapid.IntRange(0, 2000).Draw(t, "waiting"))
		if waiting > outputCap+retained/10 {
			return // already beyond the bound: not a state the rules reach
		}
		b := uint64(rapid.IntRange(0, int(retained)).Draw(t, "b"))
		if waiting > 0 && trimFits(waiting, b, retained, outputCap) {
			stored, kept := retained+waiting, retained-b
			if stored > kept+kept/10+outputCap {
				t.Fatalf("trim of %d B: %d stored > 1.1 × %d + %d", b, stored, kept, outputCap)
			}
		}
	})
}

func atou(t *testing.T, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
