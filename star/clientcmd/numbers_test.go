package clientcmd

import (
	"strconv"
	"testing"

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
