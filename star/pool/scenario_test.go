package pool

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
)

// TestCutScenarios runs the cut policy over testdata/cut.txt: when the
// flusher cuts the pool into a flight (CutPolicy.Due) and what a cut takes
// (takeHead). Times are milliseconds. Commands:
//
//	policy interval=<dur> target=<bytes> [fixed-delay] [when-idle]
//	due now=<ms> bytes=<n> oldest=<ms> [last=<ms>] [idle]
//	take max=<bytes> sizes=<n>,<n>,…
//
// due prints "cut", "wait <d> (at <ms>)" or "nothing" (no bytes); last
// absent is a chain that never cut. take prints how many entries the cut
// takes from the head and their bytes.
func TestCutScenarios(t *testing.T) {
	var pol CutPolicy
	datadriven.RunTest(t, "testdata/cut.txt", func(t *testing.T, d *datadriven.TestData) string {
		ms := func(key string) (time.Time, bool) {
			a, ok := d.Arg(key)
			if !ok {
				return time.Time{}, false
			}
			n, err := strconv.ParseInt(a.SingleVal(t), 10, 64)
			if err != nil {
				d.Fatalf(t, "%s: %v", key, err)
			}
			return time.UnixMilli(n), true
		}
		switch d.Cmd {
		case "policy":
			var iv string
			d.ScanArgs(t, "interval", &iv)
			dur, err := time.ParseDuration(iv)
			if err != nil {
				d.Fatalf(t, "interval: %v", err)
			}
			pol = CutPolicy{Interval: dur, FixedDelay: d.HasArg("fixed-delay"), WhenIdle: d.HasArg("when-idle")}
			d.ScanArgs(t, "target", &pol.Target)
			return fmt.Sprintf("%+v\n", pol)
		case "due":
			now, _ := ms("now")
			oldest, _ := ms("oldest")
			last, _ := ms("last")
			var bytes int64
			d.ScanArgs(t, "bytes", &bytes)
			due, at := pol.Due(now, bytes, oldest, last, d.HasArg("idle"))
			switch {
			case due:
				return "cut\n"
			case at.IsZero():
				return "nothing\n"
			}
			return fmt.Sprintf("wait %v (at %d)\n", at.Sub(now), at.UnixMilli())
		case "take":
			var maxBytes int64
			d.ScanArgs(t, "max", &maxBytes)
			var live []Entry[int]
			if a, ok := d.Arg("sizes"); ok {
				for i, v := range strings.Split(a.SingleVal(t), ",") {
					n, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						d.Fatalf(t, "sizes: %v", err)
					}
					live = append(live, Entry[int]{Value: i, Size: n})
				}
			}
			n, total := takeHead(live, maxBytes)
			var took []string
			for _, e := range live[:n] {
				took = append(took, strconv.FormatInt(e.Size, 10))
			}
			return fmt.Sprintf("take %d [%s] = %d bytes, leave %d\n", n, strings.Join(took, " "), total, len(live)-n)
		}
		d.Fatalf(t, "unknown command %q", d.Cmd)
		return ""
	})
}
