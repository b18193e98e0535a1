package loglet_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"

	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/pool"
)

// TestCoreScenarios runs the scenarios of testdata/core/*.txt against the
// loglet's step function (loglet.Core), flights named by strings. Each
// command prints the effects it asks for; `go test -run TestCoreScenarios
// ./star/loglet -rewrite` rewrites the expected output (review the diff).
//
//	new epoch=E window=N          a Core writing epoch E
//	claim NAME...                 cut flights, each claiming the next slot
//	commit SLOT... [epoch=E]      those uploads committed
//	fail SLOT... [epoch=E] [err=] those uploads failed (default err: timeout)
//	recovered cut=C next=E        the halted epoch fenced at C, E minted
//	depose [cause=]               a failed recovery or render
//	stop                          the loglet closes
//	cut pooled=N bytes=B [now= oldest= last=] [interval= target=] [when-idle]
//	                              the cut verdict (times in ms from 0)
//	state                         phase, epoch, in-flight, waiting flights
func TestCoreScenarios(t *testing.T) {
	datadriven.Walk(t, "testdata/core", func(t *testing.T, path string) {
		var c *loglet.Core[string]
		datadriven.RunTest(t, path, func(t *testing.T, d *datadriven.TestData) string {
			if d.Cmd != "new" && c == nil {
				d.Fatalf(t, "%s before new", d.Cmd)
			}
			switch d.Cmd {
			case "new":
				var epoch uint64
				window := 2
				d.ScanArgs(t, "epoch", &epoch)
				d.MaybeScanArgs(t, "window", &window)
				c = loglet.NewCore[string](epoch, window)
				return state(c)
			case "claim":
				var out []string
				for _, a := range d.CmdArgs {
					eff, err := c.Claim(a.Key)
					if err != nil {
						out = append(out, fmt.Sprintf("%s: %v", a.Key, err))
						continue
					}
					out = append(out, effects(eff))
				}
				return strings.Join(out, "")
			case "commit", "fail":
				epoch := c.Epoch()
				d.MaybeScanArgs(t, "epoch", &epoch)
				cause := "timeout"
				d.MaybeScanArgs(t, "err", &cause)
				var out []string
				for _, a := range d.CmdArgs {
					if a.Key == "epoch" || a.Key == "err" {
						continue
					}
					var slot uint64
					if _, err := fmt.Sscan(a.Key, &slot); err != nil {
						d.Fatalf(t, "slot %q: %v", a.Key, err)
					}
					var err error
					if d.Cmd == "fail" {
						err = errors.New(cause)
					}
					out = append(out, effects(c.Uploaded(epoch, slot, err)))
				}
				return strings.Join(out, "")
			case "recovered":
				var cut, next uint64
				d.ScanArgs(t, "cut", &cut)
				d.ScanArgs(t, "next", &next)
				return effects(c.Recovered(cut, next))
			case "depose":
				cause := "deposed"
				d.MaybeScanArgs(t, "cause", &cause)
				return effects(c.Depose(errors.New(cause)))
			case "stop":
				return fmt.Sprintf("fail %s\n", names(c.Stop()))
			case "cut":
				return cutVerdict(t, d, c)
			case "state":
				return state(c)
			}
			d.Fatalf(t, "unknown command %q", d.Cmd)
			return ""
		})
	})
}

func cutVerdict(t *testing.T, d *datadriven.TestData, c *loglet.Core[string]) string {
	var pooled int
	var bytes int64
	now, oldest, last := 0, 0, -1
	p := pool.CutPolicy{Interval: 50 * time.Millisecond, Target: 1000}
	d.ScanArgs(t, "pooled", &pooled)
	d.MaybeScanArgs(t, "bytes", &bytes)
	d.MaybeScanArgs(t, "now", &now)
	d.MaybeScanArgs(t, "oldest", &oldest)
	d.MaybeScanArgs(t, "last", &last)
	d.MaybeScanArgs(t, "interval", &p.Interval)
	d.MaybeScanArgs(t, "target", &p.Target)
	p.WhenIdle = d.HasArg("when-idle")
	ms := func(n int) time.Time { return time.Unix(1000, 0).Add(time.Duration(n) * time.Millisecond) }
	lastCut := time.Time{} // none yet
	if last >= 0 {
		lastCut = ms(last)
	}
	v, wait := c.Cut(p, ms(now), pooled, bytes, ms(oldest), lastCut)
	if v == loglet.CutWait {
		return fmt.Sprintf("%s %v\n", v, wait)
	}
	return v.String() + "\n"
}

// effects prints what one event asks of the driver, in its order.
func effects(e loglet.Effects[string]) string {
	var b strings.Builder
	if h := e.Halt; h != nil {
		fmt.Fprintf(&b, "halt e%d/%d: %v\n", h.Epoch, h.Slot, h.Err)
	}
	if f := e.Fence; f != nil {
		var committed []string
		for s := f.Known.Released; s < f.Known.Released+64; s++ {
			if f.Known.Committed(s) {
				committed = append(committed, fmt.Sprint(s))
			}
		}
		fmt.Fprintf(&b, "fence e%d released=%d committed=[%s] first-halt=%d (%v)\n",
			f.Epoch, f.Known.Released, strings.Join(committed, " "), f.FirstHalt, f.HaltErr)
	}
	if len(e.Committed) > 0 {
		fmt.Fprintf(&b, "committed %s\n", names(e.Committed))
	}
	if len(e.Release) > 0 {
		fmt.Fprintf(&b, "release %s", names(e.Release))
		if e.Late > 0 {
			fmt.Fprintf(&b, " (%d late)", e.Late)
		}
		b.WriteString("\n")
	}
	if e.Healed {
		b.WriteString("healed\n")
	}
	if e.Install {
		b.WriteString("install\n")
	}
	for _, c := range e.Upload {
		fmt.Fprintf(&b, "upload %s e%d/%d", c.Flight, c.Epoch, c.Slot)
		if c.Republished {
			b.WriteString(" republished")
		}
		b.WriteString("\n")
	}
	if e.Deposed != nil {
		fmt.Fprintf(&b, "deposed: %v\nfail %s\n", e.Deposed, names(e.Fail))
	}
	if b.Len() == 0 {
		return "ok\n"
	}
	return b.String()
}

func state(c *loglet.Core[string]) string {
	return fmt.Sprintf("%s e%d in-flight=%d can-claim=%t waiting=%s\n", c.Phase(), c.Epoch(), c.Inflight(), c.CanClaim(), names(c.Waiting()))
}

func names(fs []string) string { return "[" + strings.Join(fs, " ") + "]" }
