package plan

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
)

// TestCutEras checks CutEras' properties over random markers; its cases
// are scenarios in testdata/plan.txt (TestPlanScenarios).
func TestCutEras(t *testing.T) {
	now := time.UnixMilli(100)
	mk := func(from, end uint64, ripen int64) meta.Marker {
		return meta.Marker{Epoch: 1, FromSlot: from, EndSlot: end, Ripen: ripen}
	}
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(0, 20).Draw(t, "n")
		var ms []meta.Marker
		slot := uint64(0)
		for i := range n {
			slot += uint64(rapid.IntRange(0, 2).Draw(t, fmt.Sprint("gap", i)))
			end := slot + uint64(rapid.IntRange(1, 5).Draw(t, fmt.Sprint("len", i)))
			m := mk(slot, end, int64(rapid.IntRange(0, 200).Draw(t, fmt.Sprint("ripen", i))))
			m.Cause = rapid.SampledFrom([]string{"cap", "linger"}).Draw(t, fmt.Sprint("cause", i))
			m.Bytes = uint64(rapid.IntRange(0, 10).Draw(t, fmt.Sprint("bytes", i)))
			ms = append(ms, m)
			slot = end
		}
		cp := uint64(rapid.IntRange(0, int(slot)+1).Draw(t, "checkpoint"))
		maxSlots := rapid.IntRange(1, 8).Draw(t, "max")
		maxBytes := uint64(rapid.IntRange(0, 30).Draw(t, "maxBytes"))
		gather := time.Duration(rapid.IntRange(0, 100).Draw(t, "gather")) * time.Millisecond
		eras := CutEras(ms, cp, now, gather, maxSlots, maxBytes)
		inEra := map[int]int{}
		for ei, e := range eras {
			slots, ripe := 0, 0
			var bytes uint64
			for i, m := range ms {
				if m.FromSlot >= e.From && m.EndSlot <= e.End {
					if !settle.Due(m, cp, now, gather) {
						t.Fatalf("era %v holds marker %v, not due", e, m)
					}
					if m.Cause != "cap" && !settle.Ripe(m, cp, now) {
						t.Fatalf("era %v gathered linger marker %v before it ripened", e, m)
					}
					if settle.Ripe(m, cp, now) {
						ripe++
					}
					inEra[i] = ei
					slots += int(m.EndSlot - m.FromSlot)
					bytes += m.Bytes
				}
			}
			if ripe == 0 || !settle.Ripe(ms[slices.IndexFunc(ms, func(m meta.Marker) bool { return m.FromSlot == e.From })], cp, now) {
				t.Fatalf("era %v does not start at a ripe marker", e)
			}
			if slots != e.Slots || (e.Markers > 1 && (e.Slots > maxSlots || bytes > maxBytes)) {
				t.Fatalf("era %v: %d slots, %d bytes, max %d, %d", e, slots, bytes, maxSlots, maxBytes)
			}
		}
		for i, m := range ms {
			_, ok := inEra[i]
			if settle.Ripe(m, cp, now) && !ok {
				t.Fatalf("ripe marker %v in no era", m)
			}
			if !settle.Due(m, cp, now, gather) && ok {
				t.Fatalf("marker %v not due but in an era", m)
			}
		}
		// Gathering off is the ripe-only cut.
		for _, e := range CutEras(ms, cp, now, 0, maxSlots, maxBytes) {
			for _, m := range ms {
				if m.FromSlot >= e.From && m.EndSlot <= e.End && !settle.Ripe(m, cp, now) {
					t.Fatalf("gather 0: era %v holds unripe %v", e, m)
				}
			}
		}
	})
}
