package api

import (
	"math"
	"time"
)

// A client's number becomes a time.Duration here, never by a bare
// time.Duration(n) * unit: that product wraps past math.MaxInt64 ns
// (about 292 years), negative or tiny, and a retention age of 1,000
// years (a natural way to say "forever") then trims everything
// (issue 26). These conversions saturate at the largest Duration, so the
// result is never negative and never decreases as the number grows. They
// serve stored values too: a config written before a bound was checked
// still converts safely.

// MaxDurationSecs is the most whole seconds a time.Duration holds:
// 9,223,372,036 s, about 292 years. A number of seconds above it
// (retention_policy.age, delete_on_empty.min_age_secs) is kept as the
// client gave it and acts as this maximum (docs/api.md, "Numbers").
const MaxDurationSecs = uint64(math.MaxInt64 / int64(time.Second))

// MaxDurationMillis is the most whole milliseconds a time.Duration holds.
const MaxDurationMillis = uint64(math.MaxInt64 / int64(time.Millisecond))

// Seconds is n seconds as a Duration, saturating at the largest one.
func Seconds(n uint64) time.Duration {
	if n > MaxDurationSecs {
		return math.MaxInt64
	}
	return time.Duration(n) * time.Second
}

// Millis is n milliseconds as a Duration, saturating at the largest one.
func Millis(n uint64) time.Duration {
	if n > MaxDurationMillis {
		return math.MaxInt64
	}
	return time.Duration(n) * time.Millisecond
}

// AddSat is a+b saturating at the largest uint64: a unix-ms timestamp
// (a client's, which an uncapped stream takes up to 2^64−1) plus a span.
func AddSat(a, b uint64) uint64 {
	if b > math.MaxUint64-a {
		return math.MaxUint64
	}
	return a + b
}

// DurationMillis is d in whole milliseconds for unix-ms arithmetic; a
// negative d is 0.
func DurationMillis(d time.Duration) uint64 {
	return uint64(max(d.Milliseconds(), 0))
}
