package ratelimit

import (
	"fmt"
	"testing"
	"time"
)

func TestTakeRefusesPastTheRateAndSaysHowLong(t *testing.T) {
	k := NewKeyed(10, 5, 0) // 10/s, burst 5
	now := time.Unix(1000, 0)
	for i := range 5 {
		if _, ok := k.Take("a", 1, now); !ok {
			t.Fatalf("take %d within the burst refused", i)
		}
	}
	wait, ok := k.Take("a", 1, now)
	if ok || wait != 100*time.Millisecond {
		t.Fatalf("past the burst: ok=%v wait=%v, want refused for 100ms", ok, wait)
	}
	// A refusal takes nothing: after the wait one token is there.
	if _, ok := k.Take("a", 1, now.Add(100*time.Millisecond)); !ok {
		t.Fatal("refused after the wait")
	}
	// Keys are independent.
	if _, ok := k.Take("b", 5, now); !ok {
		t.Fatal("another key was limited")
	}
	// More than the burst is clamped, not refused forever.
	if _, ok := k.Take("c", 50, now); !ok {
		t.Fatal("a take above the burst on a full bucket refused")
	}
}

func TestReserveBorrowsAndCancelGivesBack(t *testing.T) {
	k := NewKeyed(10, 1, 0)
	now := time.Unix(1000, 0)
	if d, _ := k.Reserve("a", 1, now); d != 0 {
		t.Fatalf("first reserve waits %v", d)
	}
	d, cancel := k.Reserve("a", 1, now)
	if d != 100*time.Millisecond {
		t.Fatalf("second reserve waits %v, want 100ms", d)
	}
	cancel()
	if d, _ := k.Reserve("a", 1, now); d > 100*time.Millisecond {
		t.Fatalf("after cancel the wait is %v", d)
	}
}

// However many keys a client invents, the set stays bounded, and idle
// buckets go first.
func TestKeyedIsBounded(t *testing.T) {
	k := NewKeyed(1, 1, 100)
	now := time.Unix(1000, 0)
	for i := range 10000 {
		k.Take(fmt.Sprint(i), 1, now)
		if k.Len() > 100 {
			t.Fatalf("%d buckets after %d keys", k.Len(), i+1)
		}
	}
	// A busy key survives a flood of new keys once the others are idle.
	later := now.Add(time.Hour)
	k.Take("busy", 1, later)
	for i := range 99 {
		k.Take(fmt.Sprint("new", i), 1, later)
	}
	if _, ok := k.Take("busy", 1, later); ok {
		t.Fatal("the busy key's bucket was dropped while idle ones remained")
	}
}

func TestNilLimitsNothing(t *testing.T) {
	var k *Keyed = NewKeyed(0, 1, 0)
	if k != nil {
		t.Fatal("a zero rate must be off")
	}
	if _, ok := k.Take("a", 1<<30, time.Now()); !ok {
		t.Fatal("nil refused")
	}
}

// The cost a limit adds to an append: one take from a held bucket, and one
// from a full set of 65 536 that must evict.
func BenchmarkKeyedTake(b *testing.B) {
	k := NewKeyed(1e9, 1e9, 0)
	now := time.Now()
	b.Run("held", func(b *testing.B) {
		for range b.N {
			k.Take("s", 1, now)
		}
	})
	full := NewKeyed(1, 1, 0)
	for i := range DefaultMaxKeys {
		full.Take(fmt.Sprint(i), 1, now)
	}
	b.Run("evicting", func(b *testing.B) {
		for i := range b.N {
			full.Take(fmt.Sprint("n", i), 1, now)
		}
	})
}
