package api

import (
	"fmt"
	"math"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// extremes are the numbers every conversion of a client's number is
// driven with (issue 26): 0, 2^31, 2^53, 2^63−1, 2^64−1 and the values
// around the wrap points of seconds and milliseconds in a time.Duration
// (−1 is a parse error everywhere: the parsers take no sign).
var extremes = []uint64{
	0, 1, 60, 1 << 31, 1<<32 - 1, 1 << 32, 1 << 53, 1<<53 - 1,
	MaxDurationSecs - 1, MaxDurationSecs, MaxDurationSecs + 1,
	MaxDurationMillis - 1, MaxDurationMillis, MaxDurationMillis + 1,
	18_446_744_074, // seconds whose nanoseconds wrap to 0.29 s
	1<<63 - 1, 1 << 63, math.MaxUint64 - 1, math.MaxUint64,
}

// Seconds and Millis never wrap: exact within a Duration's range, the
// largest Duration past it, so never negative and monotone in the input.
func FuzzSecondsMillis(f *testing.F) {
	for _, a := range extremes {
		for _, b := range extremes {
			f.Add(a, b)
		}
	}
	f.Fuzz(func(t *testing.T, a, b uint64) {
		if a > b {
			a, b = b, a
		}
		for _, c := range []struct {
			name string
			conv func(uint64) time.Duration
			max  uint64
			unit time.Duration
		}{{"Seconds", Seconds, MaxDurationSecs, time.Second}, {"Millis", Millis, MaxDurationMillis, time.Millisecond}} {
			da, db := c.conv(a), c.conv(b)
			if da < 0 || db < 0 || da > db {
				t.Fatalf("%s(%d) = %v, %s(%d) = %v: want non-negative and monotone", c.name, a, da, c.name, b, db)
			}
			want := time.Duration(math.MaxInt64)
			if a <= c.max {
				want = time.Duration(a) * c.unit
			}
			if da != want {
				t.Fatalf("%s(%d) = %v, want %v", c.name, a, da, want)
			}
		}
		s := AddSat(a, b)
		if s < a || s < b || (b <= math.MaxUint64-a && s != a+b) || (b > math.MaxUint64-a && s != math.MaxUint64) {
			t.Fatalf("AddSat(%d, %d) = %d", a, b, s)
		}
	})
}

// The read query's numbers: seq_num, timestamp, tail_offset, count,
// bytes and until take any u64 as given (they are compared, never
// converted); wait takes a u32 of seconds (400 past it), capped at 60 s
// in a unary read and exact in a session. −1, 2^64 and beyond are 400
// bad_query. The wait is never negative and monotone in the number.
func FuzzReadQueryNumbers(f *testing.F) {
	for _, n := range extremes {
		f.Add(strconv.FormatUint(n, 10), false)
		f.Add(strconv.FormatUint(n, 10), true)
	}
	for _, s := range []string{"-1", "18446744073709551616", "99999999999999999999999", "+5", " 5", "0x10", "1e3"} {
		f.Add(s, false)
	}
	f.Fuzz(func(t *testing.T, v string, session bool) {
		mode := ReadUnary
		if session {
			mode = ReadSession
		}
		n, perr := strconv.ParseUint(v, 10, 64)
		for _, name := range []string{"seq_num", "timestamp", "tail_offset", "count", "bytes", "until", "wait"} {
			r, err := ParseReadQuery(url.Values{name: {v}}, mode)
			valid := perr == nil && (name != "wait" || n <= math.MaxUint32)
			if !valid {
				if err == nil || err.Code != CodeBadQuery || err.Status != 400 {
					t.Fatalf("%s=%q: %+v %v, want 400 bad_query", name, v, r, err)
				}
				continue
			}
			if err != nil {
				t.Fatalf("%s=%q: %v", name, v, err)
			}
			var got uint64
			switch name {
			case "seq_num", "timestamp", "tail_offset":
				got = r.Value
			case "count":
				got = *r.Count
			case "bytes":
				got = *r.Bytes
			case "until":
				got = *r.Until
			case "wait":
				want := time.Duration(n) * time.Second // n < 2^32: in range
				if mode == ReadUnary {
					want = min(want, MaxUnaryReadWait)
				}
				if *r.Wait != want || *r.Wait < 0 {
					t.Fatalf("wait=%s: %v, want %v", v, *r.Wait, want)
				}
				continue
			}
			if mode == ReadUnary && name == "count" {
				n2 := min(n, MaxUnaryReadCount)
				if got != n2 {
					t.Fatalf("count=%s: %d, want %d", v, got, n2)
				}
				continue
			}
			if mode == ReadUnary && name == "bytes" {
				n2 := min(n, MaxUnaryReadBytes)
				if got != n2 {
					t.Fatalf("bytes=%s: %d, want %d", v, got, n2)
				}
				continue
			}
			if got != n {
				t.Fatalf("%s=%s: %d, want it as given", name, v, got)
			}
		}
	})
}

// A 429's wait (retry-after-ms, else Retry-After) is never negative and
// never decreases as the number grows: a hint past a Duration's range is
// the largest Duration (the SDK caps it at RetryPolicy.MaxRetryAfter), not
// "retry now" as a number past 32 bits was.
func FuzzParseRetryAfterNumbers(f *testing.F) {
	for _, a := range extremes {
		f.Add(strconv.FormatUint(a, 10), strconv.FormatUint(a, 10), true)
		f.Add(strconv.FormatUint(a, 10), strconv.FormatUint(a, 10), false)
	}
	f.Add("-1", "-1", true)
	f.Fuzz(func(t *testing.T, a, b string, ms bool) {
		x, err1 := strconv.ParseUint(a, 10, 64)
		y, err2 := strconv.ParseUint(b, 10, 64)
		if err1 != nil || err2 != nil {
			return
		}
		if x > y {
			x, y = y, x
		}
		hdr := HeaderRetryAfter
		conv := Seconds
		if ms {
			hdr, conv = HeaderRetryAfterMs, Millis
		}
		at := func(n uint64) time.Duration {
			return ParseRetryAfter(func(h string) string {
				if h == hdr {
					return strconv.FormatUint(n, 10)
				}
				return ""
			})
		}
		dx, dy := at(x), at(y)
		if dx < 0 || dx > dy || dx != conv(x) {
			t.Fatalf("%s %d → %v, %d → %v: want %v, monotone", hdr, x, dx, y, dy, conv(x))
		}
	})
}

// The metrics API's window is unix seconds in a u32: anything else (−1,
// 2^32, 2^64−1) is 400 bad_query, and a u32 is taken as given.
func FuzzMetricWindowNumbers(f *testing.F) {
	for _, n := range extremes {
		f.Add(strconv.FormatUint(n, 10))
	}
	f.Add("-1")
	f.Add("18446744073709551616")
	f.Fuzz(func(t *testing.T, v string) {
		n, perr := strconv.ParseUint(v, 10, 32)
		for _, name := range []string{"start", "end"} {
			r, err := ParseMetricSetRequest(url.Values{"set": {SetStorage}, name: {v}}, SetStorage)
			if perr != nil {
				if err == nil || err.Code != CodeBadQuery {
					t.Fatalf("%s=%q: %+v %v, want 400 bad_query", name, v, r, err)
				}
				continue
			}
			p := r.Start
			if name == "end" {
				p = r.End
			}
			if err != nil || p == nil || uint64(*p) != n {
				t.Fatalf("%s=%q: %+v %v", name, v, r, err)
			}
		}
	})
}

func ExampleSeconds() {
	fmt.Println(Seconds(60), Seconds(1<<64-1) == math.MaxInt64)
	// Output: 1m0s true
}
