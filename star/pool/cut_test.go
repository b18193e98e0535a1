package pool

import (
	"testing"
	"time"
)

// manualClock is advanced by hand: the policy is a pure function of it.
type manualClock struct{ now time.Time }

func (c *manualClock) Now() time.Time          { return c.now }
func (c *manualClock) Advance(d time.Duration) { c.now = c.now.Add(d) }

// A lone batch after an idle spell is cut at once; the fixed-delay policy
// (oldest + Interval) made it wait the whole interval.
func TestCutPolicySparseBatchCutsAtOnce(t *testing.T) {
	clk := &manualClock{now: time.Unix(1000, 0)}
	pol := CutPolicy{Interval: 50 * time.Millisecond, Target: 4 << 20}
	p := New[int](1<<20, clk.Now)

	// The very first batch: nothing was ever cut.
	if err := p.Admit(t.Context(), 1, 1024); err != nil {
		t.Fatal(err)
	}
	var lastCut time.Time
	oldest, _ := p.Oldest()
	_, bytes := p.Len()
	if due, at := pol.Due(clk.Now(), bytes, oldest, lastCut, false); !due {
		t.Fatalf("first batch not due; due at %v (%v from now)", at, at.Sub(clk.Now()))
	}
	p.Cut(pol.Target)
	lastCut = clk.Now()

	// Idle for longer than the interval, then one batch: cut at once.
	clk.Advance(200 * time.Millisecond)
	if err := p.Admit(t.Context(), 2, 1024); err != nil {
		t.Fatal(err)
	}
	oldest, _ = p.Oldest()
	_, bytes = p.Len()
	if due, at := pol.Due(clk.Now(), bytes, oldest, lastCut, false); !due {
		t.Fatalf("sparse batch not due; due in %v", at.Sub(clk.Now()))
	}
}

// Under load the policy cuts at most one sub-target flight per Interval:
// batches admitted every millisecond for a simulated second yield at most
// 1 s / Interval + 1 cuts, and every batch waits at most Interval.
func TestCutPolicyBoundsRateUnderLoad(t *testing.T) {
	clk := &manualClock{now: time.Unix(1000, 0)}
	pol := CutPolicy{Interval: 50 * time.Millisecond, Target: 4 << 20}
	p := New[time.Time](1<<30, clk.Now)
	var lastCut time.Time
	cuts := 0
	var worst time.Duration
	for range 1000 {
		if err := p.Admit(t.Context(), clk.Now(), 1024); err != nil {
			t.Fatal(err)
		}
		oldest, _ := p.Oldest()
		_, bytes := p.Len()
		if due, _ := pol.Due(clk.Now(), bytes, oldest, lastCut, false); due {
			for _, e := range p.Cut(pol.Target) {
				worst = max(worst, clk.Now().Sub(e.Value))
			}
			lastCut = clk.Now()
			cuts++
		}
		clk.Advance(time.Millisecond)
	}
	if limit := int(time.Second/pol.Interval) + 1; cuts > limit {
		t.Fatalf("%d cuts in 1 s at a %v interval, want at most %d", cuts, pol.Interval, limit)
	}
	if cuts < int(time.Second/pol.Interval)-1 {
		t.Fatalf("only %d cuts in 1 s at a %v interval", cuts, pol.Interval)
	}
	if worst > pol.Interval {
		t.Fatalf("a batch waited %v, more than the %v interval", worst, pol.Interval)
	}
}

// Target bytes are cut at once, and a byte left behind by a full flight is
// due Interval after its admission, not Interval after that cut.
func TestCutPolicyTargetAndLeftovers(t *testing.T) {
	clk := &manualClock{now: time.Unix(1000, 0)}
	pol := CutPolicy{Interval: 50 * time.Millisecond, Target: 4096}
	lastCut := clk.Now()
	if due, _ := pol.Due(clk.Now(), 4096, clk.Now(), lastCut, false); !due {
		t.Fatal("a full flight is not due at once")
	}
	oldest := clk.Now().Add(-40 * time.Millisecond) // left behind by the cut just made
	due, at := pol.Due(clk.Now(), 100, oldest, lastCut, false)
	if due || !at.Equal(oldest.Add(pol.Interval)) {
		t.Fatalf("leftover: due=%v at %v, want due at %v", due, at, oldest.Add(pol.Interval))
	}
	if due, _ := pol.Due(clk.Now(), 0, time.Time{}, time.Time{}, false); due {
		t.Fatal("an empty pool is due")
	}
}

// The fixed-delay policy (kept for benchmarks) makes the sparse batch wait
// the whole interval.
func TestCutPolicyFixedDelay(t *testing.T) {
	now := time.Unix(1000, 0)
	pol := CutPolicy{Interval: 50 * time.Millisecond, Target: 4 << 20, FixedDelay: true}
	due, at := pol.Due(now, 1024, now, now.Add(-time.Hour), false)
	if due || !at.Equal(now.Add(pol.Interval)) {
		t.Fatalf("fixed delay: due=%v at %v, want due at %v", due, at, now.Add(pol.Interval))
	}
}

// WhenIdle: a batch that finds nothing uploading is cut at once even just
// after a cut (the next append after an ack); one that arrives during an
// upload waits for the upload's end or the Interval, whichever is first.
// Without WhenIdle idleness changes nothing.
func TestCutPolicyWhenIdle(t *testing.T) {
	now := time.Unix(1000, 0)
	lastCut := now.Add(-100 * time.Microsecond)
	pol := CutPolicy{Interval: time.Millisecond, Target: 4 << 20, WhenIdle: true}
	if due, _ := pol.Due(now, 1024, now, lastCut, true); !due {
		t.Fatal("idle chain: a batch 100µs after the previous cut is not due")
	}
	due, at := pol.Due(now, 1024, now, lastCut, false)
	if due || !at.Equal(lastCut.Add(time.Millisecond)) {
		t.Fatalf("busy chain: due %v at %v, want due at the interval after the cut", due, at)
	}
	if due, _ := pol.Due(now.Add(time.Millisecond), 1024, now, lastCut, false); !due {
		t.Fatal("busy chain: not due once the interval passed")
	}
	if due, _ := pol.Due(now, 0, time.Time{}, lastCut, true); due {
		t.Fatal("idle chain with nothing pooled is due")
	}
	pol.WhenIdle = false
	if due, _ := pol.Due(now, 1024, now, lastCut, true); due {
		t.Fatal("without WhenIdle an idle chain cut inside the interval")
	}
}
