package servecmd

import (
	"strings"
	"testing"
)

func TestParseDevLatency(t *testing.T) {
	if l, err := parseDevLatency(""); l != nil || err != nil {
		t.Fatalf("empty: %v, %v", l, err)
	}
	l, err := parseDevLatency("5ms, 20ms")
	if err != nil || l.String() != "lognormal(p50=5ms, p99=20ms)" {
		t.Fatalf("5ms,20ms: %v, %v", l, err)
	}
	for _, bad := range []string{"5ms", "5ms,x", "x,5ms", "0s,5ms", "20ms,5ms", "5ms,1m"} {
		if _, err := parseDevLatency(bad); err == nil || !strings.Contains(err.Error(), "--dev-express-latency") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
