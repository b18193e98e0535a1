package kafka

import (
	"testing"
	"time"
)

// A produce's own timeout bounds its wait, capped at RequestTimeout.
func TestProduceWait(t *testing.T) {
	for ms, want := range map[int32]time.Duration{
		-1: 0, 0: 0, 200: 200 * time.Millisecond, 30_000: RequestTimeout, 1 << 30: RequestTimeout,
	} {
		if got := produceWait(ms); got != want {
			t.Errorf("produceWait(%d) = %v, want %v", ms, got, want)
		}
	}
}
