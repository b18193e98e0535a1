package server

import (
	"math"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// The metrics API's window: whatever u32 start and end a client sends
// (0, 2^31, 2^32−1), the window stays within what the interval keeps,
// and the points it asks for are at most that history's intervals, so a
// range never wraps into a huge or negative walk.
func FuzzUsageWindowNumbers(f *testing.F) {
	for _, s := range []uint32{0, 1, 1 << 31, math.MaxUint32 - 1, math.MaxUint32, 1_800_000_000} {
		for _, e := range []uint32{0, 1, 1 << 31, math.MaxUint32, 1_800_000_000} {
			for iv := range uint8(3) {
				f.Add(s, e, iv, true, true)
				f.Add(s, e, iv, false, true)
				f.Add(s, e, iv, true, false)
			}
		}
	}
	f.Fuzz(func(t *testing.T, start, end uint32, iv uint8, hasStart, hasEnd bool) {
		interval := []string{api.IntervalMinute, api.IntervalHour, api.IntervalDay}[iv%3]
		kw := map[string][2]int64{api.IntervalMinute: {3600, 60}, api.IntervalHour: {24 * 3600, 3600}, api.IntervalDay: {7 * 24 * 3600, 24 * 3600}}[interval]
		keep, width := kw[0], kw[1]
		now := time.Unix(1_800_000_000, 0)
		var sp, ep *uint32
		if hasStart {
			sp = &start
		}
		if hasEnd {
			ep = &end
		}
		from, to := usageWindow(now, interval, sp, ep)
		if from < now.Unix()-keep || to > now.Unix()+1 {
			t.Fatalf("start %d end %d (%s): window [%d, %d) outside the kept [%d, %d)", start, end, interval, from, to, now.Unix()-keep, now.Unix()+1)
		}
		var s series
		if n := int64(len(s.points(interval, from, to))); n > keep/width+2 {
			t.Fatalf("start %d end %d (%s): %d points", start, end, interval, n)
		}
	})
}

// A unary read's request budget adds its wait, capped at maxWait, for
// every wait a client may send: a u32 (2^32−1 s) never wraps the sum,
// and a malformed one (−1, 2^64) adds nothing (the read answers 400).
func TestRequestBudgetWait(t *testing.T) {
	t.Parallel()
	s := &Server{opts: Options{RequestTimeout: DefaultRequestTimeout}}
	for _, w := range []uint64{0, 1, 60, 61, 1 << 31, math.MaxUint32, math.MaxUint32 + 1, math.MaxUint64} {
		r := httptest.NewRequest("GET", "/v1/streams/s/records?wait="+strconv.FormatUint(w, 10), nil)
		d, ok := s.requestBudget(r, route{kind: routeRecords})
		want := DefaultRequestTimeout + min(time.Duration(min(w, 120))*time.Second, maxWait)
		if w > math.MaxUint32 {
			want = DefaultRequestTimeout
		}
		if !ok || d != want {
			t.Errorf("wait=%d: budget %v %v, want %v", w, d, ok, want)
		}
	}
	r := httptest.NewRequest("GET", "/v1/streams/s/records?wait=-1", nil)
	if d, _ := s.requestBudget(r, route{kind: routeRecords}); d != DefaultRequestTimeout {
		t.Errorf("wait=-1: budget %v", d)
	}
}
