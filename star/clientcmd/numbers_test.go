package clientcmd

import (
	"strconv"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// --retention takes any u64 of seconds, and any u32 of days, as the age
// it sends: never through a time.Duration, whose product wraps (bare
// seconds of 36,028,797,018,963,969 became an age of 1 s; 200,000 days
// an error). The API applies an age past api.MaxDurationSecs as that
// maximum (docs/api.md, "Numbers").
func TestParseRetentionNumbers(t *testing.T) {
	for _, n := range []uint64{1, 1 << 31, 1 << 53, api.MaxDurationSecs, api.MaxDurationSecs + 1, 18_446_744_074,
		36_028_797_018_963_969, 1<<63 - 1, 1<<64 - 1} {
		s := strconv.FormatUint(n, 10)
		if got, err := parseRetention(s); err != nil || got != (api.RetentionPolicy{AgeSecs: n}) {
			t.Errorf("--retention %s: %+v %v, want age %d", s, got, err, n)
		}
	}
	for _, n := range []uint64{1, 106_752, 200_000, 1<<32 - 1} {
		s := strconv.FormatUint(n, 10) + "d"
		if got, err := parseRetention(s); err != nil || got != (api.RetentionPolicy{AgeSecs: n * 86400}) {
			t.Errorf("--retention %s: %+v %v, want age %d", s, got, err, n*86400)
		}
	}
	for _, bad := range []string{"-1", "18446744073709551616", "4294967296d", "-1d", "2562048h"} {
		if got, err := parseRetention(bad); err == nil {
			t.Errorf("--retention %s accepted: %+v", bad, got)
		}
	}
}

// --expires-in never wraps: a count of days or weeks a Duration cannot
// hold is refused (31,000 weeks once became a token of about 3.5 days),
// and any it takes is exactly that many units, never negative.
func TestParseExpiresInNumbers(t *testing.T) {
	for _, s := range []string{"15250w", "15251w", "31000w", "65535w"} {
		n, _ := strconv.ParseUint(s[:len(s)-1], 10, 64)
		d, err := parseExpiresIn(s)
		if n*7*24*3600 <= api.MaxDurationSecs {
			if err != nil || d != time.Duration(n)*7*24*time.Hour {
				t.Errorf("--expires-in %s: %v %v, want %d weeks", s, d, err, n)
			}
			continue
		}
		if err == nil {
			t.Errorf("--expires-in %s: %v, want refused (past a Duration's range)", s, d)
		}
	}
	for _, s := range []string{"1d", "65535d", "1w"} {
		if d, err := parseExpiresIn(s); err != nil || d <= 0 {
			t.Errorf("--expires-in %s: %v %v", s, d, err)
		}
	}
}
