package quota

import (
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
)

func TestOthersSumsFreshRowsOfTheBasin(t *testing.T) {
	now := time.Unix(1000, 0)
	stale := 6 * time.Second
	rows := map[string]meta.QuotaUsageRow{
		"self":   {BasinID: "b1", AppendBytesPerSec: 1000, StoredBytes: 50, At: now.Add(-time.Second)},
		"star-a": {BasinID: "b1", AppendBytesPerSec: 300, StoredBytes: 40, At: now.Add(-2 * time.Second)},
		"star-b": {BasinID: "b1", AppendBytesPerSec: 200, At: now.Add(-stale)},
		"star-c": {BasinID: "b1", AppendBytesPerSec: 7000, StoredBytes: 99, At: now.Add(-stale - time.Millisecond)}, // stopped
		"star-d": {BasinID: "b0", AppendBytesPerSec: 9000, StoredBytes: 98, At: now},                                // an earlier incarnation
	}
	u, at := Others("self", "b1", rows, now, stale)
	if u.AppendBytesPerSec != 500 {
		t.Errorf("append rate %d, want 500 (star-a and star-b: not self, not stale, not another incarnation)", u.AppendBytesPerSec)
	}
	if u.StoredBytes != 50 || !at.Equal(now.Add(-time.Second)) {
		t.Errorf("stored %d at %v, want the newest reading, 50 (self's own)", u.StoredBytes, at)
	}
	rows["star-e"] = meta.QuotaUsageRow{BasinID: "b1", AppendBytesPerSec: ^uint64(0), At: now}
	if u, _ := Others("self", "b1", rows, now, stale); u.AppendBytesPerSec != ^uint64(0) {
		t.Errorf("an overflowing sum is %d, want saturated", u.AppendBytesPerSec)
	}
}

func TestDecide(t *testing.T) {
	q := func(stored, rate, streams *uint64) api.BasinQuotas {
		return api.BasinQuotas{StoredBytes: stored, AppendBytesPerSec: rate, Streams: streams}
	}
	for _, c := range []struct {
		name string
		q    api.BasinQuotas
		u    Usage
		dim  string
	}{
		{"no quota", q(nil, nil, nil), Usage{AppendBytesPerSec: 1 << 40, StoredBytes: 1 << 50}, ""},
		{"under both", q(api.Uint64(100), api.Uint64(10), nil), Usage{9, 99}, ""},
		{"rate at", q(nil, api.Uint64(10), nil), Usage{AppendBytesPerSec: 10}, DimAppendRate},
		{"stored at", q(api.Uint64(100), nil, nil), Usage{StoredBytes: 100}, DimStoredBytes},
		{"stored first", q(api.Uint64(100), api.Uint64(10), nil), Usage{20, 200}, DimStoredBytes},
		{"zero freezes", q(nil, api.Uint64(0), nil), Usage{}, DimAppendRate},
	} {
		dim, err := DecideAppend(c.q, c.u)
		if dim != c.dim || (err != nil) != (c.dim != "") {
			t.Errorf("%s: dimension %q err %v, want %q", c.name, dim, err, c.dim)
		}
		if err != nil && (err.Status != 403 || err.Code != api.CodeQuotaExhausted) {
			t.Errorf("%s: %v, want 403 quota_exhausted", c.name, err)
		}
	}
	if err := DecideCreate(q(nil, nil, api.Uint64(3)), 2); err != nil {
		t.Errorf("2 of 3 streams: %v", err)
	}
	if err := DecideCreate(q(nil, nil, api.Uint64(3)), 3); err == nil || err.Code != api.CodeQuotaExhausted {
		t.Errorf("3 of 3 streams: %v, want quota_exhausted", err)
	}
	if err := DecideCreate(q(nil, nil, nil), 1<<40); err != nil {
		t.Errorf("no stream quota: %v", err)
	}
}

func TestWindowRate(t *testing.T) {
	w := newWindow(5 * time.Second)
	t0 := time.Unix(2000, 0)
	for i := range 10 {
		w.add(t0.Add(time.Duration(i)*500*time.Millisecond), 1000)
	}
	at := t0.Add(4900 * time.Millisecond)
	if r := w.rate(at); r != 2000 {
		t.Errorf("10 KB over 5 s: %d B/s, want 2000", r)
	}
	// A bucket at a time the window forgets the oldest.
	if r := w.rate(t0.Add(5100 * time.Millisecond)); r != 1800 {
		t.Errorf("after the first bucket left: %d B/s, want 1800", r)
	}
	if r := w.rate(t0.Add(11 * time.Second)); r != 0 {
		t.Errorf("a window later: %d B/s, want 0", r)
	}
	// A bucket reused a window later starts from zero.
	w.add(t0.Add(20*time.Second), 500)
	if r := w.rate(t0.Add(20 * time.Second)); r != 100 {
		t.Errorf("one add after a gap: %d B/s, want 100", r)
	}
}
