package settle

import (
	"testing"
	"time"

	"pgregory.net/rapid"

	"github.com/starlog/starlog/shared/meta"
)

// The extension bound: the tail plus its revisions superseded within the
// window fit the output cap; older revisions no longer count.
func TestExtendable(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	at := func(ago time.Duration) int64 { return millis(now.Add(-ago)) }
	s := &meta.Settled{Bytes: 40, Recent: []meta.Superseded{{Rev: 0, Bytes: 20, At: at(9 * time.Minute)}, {Rev: 1, Bytes: 30, At: at(time.Minute)}}}
	for _, c := range []struct {
		window time.Duration
		cap    uint64
		want   bool
	}{
		{10 * time.Minute, 90, true},  // 40 + 20 + 30
		{10 * time.Minute, 89, false}, // one byte over
		{5 * time.Minute, 70, true},   // the 9-minute-old revision no longer counts
		{30 * time.Second, 40, true},  // nothing recent: the tail alone
		{30 * time.Second, 39, false},
	} {
		if got := extendable(s, now, c.window, c.cap, 0); got != c.want {
			t.Errorf("window %v cap %d: extendable %v, want %v", c.window, c.cap, got, c.want)
		}
	}
	if got := recent(s, now, 5*time.Minute); len(got) != 1 || got[0].Rev != 1 {
		t.Errorf("recent within 5 min: %v", got)
	}
}

// Whatever the history of extensions, a stream that extends only when
// extendable says so never has more than one output cap of revisions
// superseded within the window: the bound the reclaim then keeps.
func TestExtendableBoundsSuperseded(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		const outputCap, window = 1000, 10 * time.Minute
		now := time.UnixMilli(1 << 40)
		tail := &meta.Settled{Bytes: uint64(rapid.IntRange(1, 100).Draw(t, "first"))}
		for i := range rapid.IntRange(1, 60).Draw(t, "rounds") {
			now = now.Add(time.Duration(rapid.IntRange(1, 300).Draw(t, "gap")) * time.Second)
			add := uint64(rapid.IntRange(1, 200).Draw(t, "add"))
			if tail.Bytes >= outputCap || !extendable(tail, now, window, outputCap, 0) {
				tail = &meta.Settled{Bytes: add} // a new object
				continue
			}
			rec := append(recent(tail, now, window), meta.Superseded{Rev: uint64(i), Bytes: tail.Bytes, At: millis(now)})
			tail = &meta.Settled{Bytes: tail.Bytes + add, Recent: rec}
			var pending uint64
			for _, r := range rec {
				pending += r.Bytes
			}
			if pending > outputCap {
				t.Fatalf("round %d: %d superseded bytes within the window, over the cap %d", i, pending, outputCap)
			}
		}
	})
}
