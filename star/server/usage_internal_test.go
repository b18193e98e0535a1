package server

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/starlog/starlog/shared/api"
)

// The usage rings keep 60 minutes and 168 hours: a count lands in its
// minute and hour, an old minute is forgotten once its slot is reused,
// days sum hours, and the basin bound drops the least recently active.
func TestUsageRings(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_800_000_000, 0).UTC()
	u := newUsage(func() time.Time { return now })
	u.record("b", useAppendOps, 2)
	now = now.Add(90 * time.Second)
	u.record("b", useAppendOps, 3)
	total := func(ps []api.Point) (v float64) {
		for _, p := range ps {
			v += p[1]
		}
		return v
	}
	for _, iv := range []string{api.IntervalMinute, api.IntervalHour, api.IntervalDay} {
		from, to := usageWindow(now, iv, nil, nil)
		if got := total(u.basinPoints("b", useAppendOps, iv, from, to)); got != 5 {
			t.Fatalf("%s: total %v, want 5", iv, got)
		}
	}
	from, to := usageWindow(now, api.IntervalMinute, nil, nil)
	if ps := u.basinPoints("b", useAppendOps, api.IntervalMinute, from, to); len(ps) < 60 || len(ps) > 61 {
		t.Fatalf("a minute window has %d points", len(ps))
	}
	// An hour and more later the minutes are gone, the hours are not.
	now = now.Add(61 * time.Minute)
	u.record("b", useAppendOps, 1)
	from, to = usageWindow(now, api.IntervalMinute, nil, nil)
	if got := total(u.basinPoints("b", useAppendOps, api.IntervalMinute, from, to)); got != 1 {
		t.Fatalf("minutes after an hour: %v, want 1", got)
	}
	from, to = usageWindow(now, api.IntervalHour, nil, nil)
	if got := total(u.basinPoints("b", useAppendOps, api.IntervalHour, from, to)); got != 6 {
		t.Fatalf("hours: %v, want 6", got)
	}
	// A window asked for is clamped to what is kept.
	start := uint32(now.Add(-30 * 24 * time.Hour).Unix())
	from, _ = usageWindow(now, api.IntervalDay, &start, nil)
	if from < now.Add(-7*24*time.Hour).Unix() {
		t.Fatalf("a day window from %d reaches past the week kept", from)
	}
	// The basin bound.
	for i := range maxUsageBasins + 1 {
		now = now.Add(time.Second)
		u.record(string(rune('a'+i%26))+string(rune(i)), useReadOps, 1)
	}
	if len(u.basins) != maxUsageBasins {
		t.Fatalf("%d basins tracked, bound %d", len(u.basins), maxUsageBasins)
	}
	if _, ok := u.basins["b"]; ok {
		t.Fatal("the least recently active basin was kept")
	}
}

// The Prometheus counters carry the same append and read counts, every
// basin together, and nothing else (basin operations are not data).
func TestUsageCounters(t *testing.T) {
	u := newUsage(time.Now)
	u.record("b1", useAppendOps, 1)
	u.record("b1", useAppendBytes, 100)
	u.record("b2", useAppendOps, 1)
	u.record("b2", useAppendBytes, 50)
	u.record("b1", useReadOps, 1)
	u.record("b1", useReadBytes, 70)
	u.record("b1", useBasinOps, 1)
	for _, c := range []struct {
		vec  *prometheus.CounterVec
		op   string
		want float64
	}{{u.ops, "append", 2}, {u.bytes, "append", 150}, {u.ops, "read", 1}, {u.bytes, "read", 70}} {
		if got := testutil.ToFloat64(c.vec.WithLabelValues(c.op)); got != c.want {
			t.Errorf("%s: %v, want %v", c.op, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(u.ops); n != 2 {
		t.Errorf("served_operations_total has %d series, want append and read only", n)
	}
}
