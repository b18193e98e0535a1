package plan

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// TestPlanScenarios runs the planner's pure part (PlanOf, CutEras,
// settle.DueTrim) over the scenarios in testdata/plan.txt. Commands:
//
//	plan now=<ms> [class=express] [grace=<dur>] [gather=<dur>] [max-slots=<n>] [max-bytes=<n>] [decommissioned]
//	eras now=<ms> checkpoint=<slot> [gather=<dur>] max-slots=<n> [max-bytes=<n>]
//	due-trim now=<ms> grace=<dur>
//
// Input lines: `epoch <n> [checkpoint=<slot>] [rewritten=<slot>]
// [trimmed=<slot>] [cut=<slot>] [settled] [reaped] [rewrite=<upto>@<ms>]…
// [scanned]` (an epoch is scanned when it says so or markers follow it),
// and `marker <from> <end> ripen=<ms> [cause=cap|linger] [bytes=<n>]`.
func TestPlanScenarios(t *testing.T) {
	datadriven.RunTest(t, "testdata/plan.txt", func(t *testing.T, d *datadriven.TestData) string {
		args := map[string]string{}
		for _, a := range d.CmdArgs {
			args[a.Key] = strings.Join(a.Vals, ",")
		}
		now := time.UnixMilli(num(t, args, "now", 0))
		v := ChainView{Chain: settle.ChainRef{Star: "star1", Class: meta.Standard}}
		if c, ok := args["class"]; ok {
			v.Chain.Class = meta.Class(c)
		}
		readView(t, d.Input, &v)
		var out strings.Builder
		switch d.Cmd {
		case "plan":
			cfg := settle.Config{EraMaxSlots: int(num(t, args, "max-slots", 0)), EraMaxBytes: uint64(num(t, args, "max-bytes", 0)),
				ReadGrace: dur(t, args, "grace", 0)}
			if g, ok := args["gather"]; ok {
				cfg.Standard.Gather, cfg.Express.Gather = parseDur(t, g), parseDur(t, g)
				if cfg.Standard.Gather == 0 {
					cfg.Standard.Gather, cfg.Express.Gather = -1, -1 // gather=0s: off
				}
			}
			_, v.Decommissioned = args["decommissioned"]
			p := PlanOf(v, cfg, now)
			for _, j := range p.Jobs {
				fmt.Fprintln(&out, j)
			}
			if p.AskDecommissioned {
				fmt.Fprintln(&out, "asks whether the star is decommissioned")
			}
			fmt.Fprintf(&out, "lag %v trim-lag %v unsettled %d\n", p.Lag, p.TrimLag, p.Unsettled)
		case "eras":
			if len(v.Epochs) != 1 {
				t.Fatalf("eras takes one epoch's markers")
			}
			maxBytes := uint64(num(t, args, "max-bytes", math.MaxInt64))
			for _, e := range CutEras(v.Epochs[0].Markers, uint64(num(t, args, "checkpoint", 0)), now, dur(t, args, "gather", 0), int(num(t, args, "max-slots", 0)), maxBytes) {
				fmt.Fprintf(&out, "[%d,%d) markers=%d slots=%d\n", e.From, e.End, e.Markers, e.Slots)
			}
		case "due-trim":
			for _, ev := range v.Epochs {
				upto, ok := settle.DueTrim(ev.Epoch, now, dur(t, args, "grace", 0))
				fmt.Fprintf(&out, "epoch %d: upto %d due %v\n", ev.Epoch.Epoch, upto, ok)
			}
		default:
			t.Fatalf("unknown command %q", d.Cmd)
		}
		if out.Len() == 0 {
			return "none\n"
		}
		return out.String()
	})
}

// readView parses a scenario's epoch and marker lines into v.
func readView(t *testing.T, input string, v *ChainView) {
	for line := range strings.Lines(input) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		switch f[0] {
		case "epoch":
			e := meta.Epoch{Epoch: parseUint(t, f[1])}
			ev := EpochView{}
			for _, kv := range f[2:] {
				k, val, _ := strings.Cut(kv, "=")
				switch k {
				case "checkpoint":
					e.Checkpoint = parseUint(t, val)
				case "rewritten":
					e.Rewritten = parseUint(t, val)
				case "trimmed":
					e.Trimmed = parseUint(t, val)
				case "cut":
					c := parseUint(t, val)
					e.Cut = &c
				case "settled":
					e.Settled = true
				case "reaped":
					e.Reaped = true
				case "scanned":
					ev.Scanned = true
				case "rewrite":
					upto, at, _ := strings.Cut(val, "@")
					e.Rewrites = append(e.Rewrites, meta.Rewrite{Upto: parseUint(t, upto), At: int64(parseUint(t, at))})
				default:
					t.Fatalf("epoch: unknown field %q", kv)
				}
			}
			ev.Epoch = e
			v.Epochs = append(v.Epochs, ev)
		case "marker":
			if len(v.Epochs) == 0 {
				t.Fatalf("marker before any epoch")
			}
			ev := &v.Epochs[len(v.Epochs)-1]
			m := meta.Marker{Epoch: ev.Epoch.Epoch, FromSlot: parseUint(t, f[1]), EndSlot: parseUint(t, f[2])}
			for _, kv := range f[3:] {
				k, val, _ := strings.Cut(kv, "=")
				switch k {
				case "ripen":
					m.Ripen = int64(parseUint(t, val))
				case "never":
					m.Ripen = math.MaxInt64
				case "cause":
					m.Cause = val
				case "bytes":
					m.Bytes = parseUint(t, val)
				default:
					t.Fatalf("marker: unknown field %q", kv)
				}
			}
			ev.Scanned = true
			ev.Markers = append(ev.Markers, m)
		default:
			t.Fatalf("unknown line %q", line)
		}
	}
}

func num(t *testing.T, args map[string]string, k string, def int64) int64 {
	s, ok := args[k]
	if !ok {
		return def
	}
	return int64(parseUint(t, s))
}

func dur(t *testing.T, args map[string]string, k string, def time.Duration) time.Duration {
	s, ok := args[k]
	if !ok {
		return def
	}
	return parseDur(t, s)
}

func parseDur(t *testing.T, s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func parseUint(t *testing.T, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
