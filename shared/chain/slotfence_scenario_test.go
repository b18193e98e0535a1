package chain

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/cockroachdb/datadriven"
)

// TestSlotFenceScenarios steps the slot fence (slotFence) by hand through
// the scenarios in testdata/slotfence/*.txt: what it asks of its buckets,
// and what it makes of each answer. Commands:
//
//	new k=<K> w=<W>
//	plan [write]        the requests made now (write: writes allowed)
//	observe             one answer a line: <op> <bucket> <answer>
//	retry <bucket>      the bucket's backoff ends
//
// Answers: to read, absent | flight | poison | unreadable; to fetch, ok |
// bad; to copy and poison, won | taken; to any, err. Every command prints
// the fence's view after it: each bucket's knowledge (unread, absent, or
// its occupant; busy: a request in flight; wait: backing off; bad: its
// copy failed verification), then whether a verified copy is held and
// whether a writer raced the fence.
func TestSlotFenceScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/slotfence", func(t *testing.T, path string) {
		var f *slotFence
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			var out strings.Builder
			if d.Cmd != "new" && f == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			switch d.Cmd {
			case "new":
				var k, w int
				d.ScanArgs(t, "k", &k)
				d.ScanArgs(t, "w", &w)
				f = newSlotFence(k, w)
			case "plan":
				reqs, fate, stuck := f.plan(d.HasArg("write"))
				var asks []string
				for _, r := range reqs {
					asks = append(asks, fmt.Sprintf("%v %d", r.op, r.bucket))
				}
				switch {
				case len(reqs) > 0:
					fmt.Fprintf(&out, "ask: %s\n", strings.Join(asks, ", "))
				case stuck:
					fmt.Fprintln(&out, "stuck")
				case fate != Undecided:
					fmt.Fprintf(&out, "fate: %v\n", fate)
				default:
					fmt.Fprintln(&out, "wait")
				}
			case "observe":
				for line := range strings.Lines(d.Input) {
					if strings.TrimSpace(line) == "" {
						continue
					}
					f.observe(parseObs(t, d, line))
				}
			case "retry":
				if len(d.CmdArgs) != 1 {
					d.Fatalf(t, "retry <bucket>")
				}
				i, err := strconv.Atoi(d.CmdArgs[0].Key)
				if err != nil {
					d.Fatalf(t, "retry: %v", err)
				}
				f.retry(i)
			default:
				d.Fatalf(t, "unknown command %q", d.Cmd)
			}
			fmt.Fprintln(&out, describeFence(f))
			return out.String()
		})
	})
}

var errScenario = errors.New("the request failed")

// parseObs reads one answer: <op> <bucket> <answer>.
func parseObs(t *testing.T, d *datadriven.TestData, line string) fenceObs {
	f := strings.Fields(line)
	if len(f) != 3 {
		d.Fatalf(t, "answer %q: want <op> <bucket> <answer>", line)
	}
	ops := map[string]fenceOp{"read": opRead, "fetch": opFetch, "copy": opCopy, "poison": opPoison}
	op, ok := ops[f[0]]
	if !ok {
		d.Fatalf(t, "answer %q: unknown op", line)
	}
	i, err := strconv.Atoi(f[1])
	if err != nil {
		d.Fatalf(t, "answer %q: %v", line, err)
	}
	o := fenceObs{req: fenceReq{op: op, bucket: i}}
	switch a := f[2]; {
	case a == "err":
		o.err = errScenario
	case op == opRead && a == "absent":
		o.absent = true
	case op == opRead && a == "flight":
		o.occ = Flight
	case op == opRead && a == "poison":
		o.occ = Poison
	case op == opRead && a == "unreadable":
		o.occ = Unreadable
	case op == opFetch && a == "ok":
		o.copy = []byte("verified")
	case op == opFetch && a == "bad":
		o.bad = true
	case (op == opCopy || op == opPoison) && a == "won":
		o.won = true
	case (op == opCopy || op == opPoison) && a == "taken":
		o.recheck = true
	default:
		d.Fatalf(t, "answer %q: unknown answer to %v", line, op)
	}
	return o
}

// describeFence is the fence's view of each bucket, its copy and the race.
func describeFence(f *slotFence) string {
	var b strings.Builder
	for i, k := range f.know {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%d=", i)
		switch k {
		case kUnread:
			b.WriteString("unread")
		case kAbsent:
			b.WriteString("absent")
		case kOccupied:
			b.WriteString(f.tally.Seen(i).String())
		}
		for _, m := range []struct {
			on   bool
			name string
		}{{f.busy[i], "busy"}, {f.waiting[i], "wait"}, {f.badCopy[i], "bad"}} {
			if m.on {
				b.WriteString("," + m.name)
			}
		}
	}
	fmt.Fprintf(&b, " | flights=%d poisons=%d copy=%v raced=%v", f.tally.Flights(), f.tally.Poisons(), f.copy != nil, f.raced)
	return b.String()
}
