package servecmd

import (
	"math"
	"testing"

	"github.com/starlog/starlog/star/devfaults"
)

// The dev fault control's latency_ms is 0 to an hour and nothing else:
// a bare time.Duration(ms)*time.Millisecond wrapped for ms past 2^63/1e6
// (2^62 read as about −1.6 h, under the bound), so a huge latency passed
// the check.
func TestFaultLatencyNumbers(t *testing.T) {
	for _, ms := range []int64{-1, math.MinInt64, 3_600_001, 1 << 31, 1 << 53, 9_223_372_036_855, 1 << 62, math.MaxInt64} {
		if err := checkPatch("meta", &devfaults.Patch{LatencyMS: &ms}); err == nil {
			t.Errorf("latency_ms %d accepted", ms)
		}
	}
	for _, ms := range []int64{0, 1, 3_600_000} {
		if err := checkPatch("meta", &devfaults.Patch{LatencyMS: &ms}); err != nil {
			t.Errorf("latency_ms %d: %v", ms, err)
		}
	}
}
