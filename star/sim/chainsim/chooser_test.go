package chainsim

import (
	"fmt"
	"testing"
)

// The odometer visits every path of a choice tree exactly once, including
// trees whose shape depends on earlier choices.
func TestOdometerEnumerates(t *testing.T) {
	od := &Odometer{}
	seen := map[string]bool{}
	for runs := 0; ; runs++ {
		if runs > 100 {
			t.Fatal("odometer does not end")
		}
		a := od.Pick(3)
		path := fmt.Sprint(a)
		if a != 1 { // only a != 1 has a second level: 2 or 3 alternatives
			path += fmt.Sprint(od.Pick(2 + a/2))
		}
		if od.Chance(0) {
			t.Fatal("Chance(0) must never branch")
		}
		if od.Chance(0.5) {
			path += "!"
		}
		if seen[path] {
			t.Fatalf("path %s visited twice", path)
		}
		seen[path] = true
		if !od.Next() {
			break
		}
	}
	// a=0: 2 × 2, a=1: 1 × 2, a=2: 3 × 2.
	if len(seen) != 12 {
		t.Fatalf("visited %d paths, want 12: %v", len(seen), seen)
	}
}

func TestRandomChooserReplays(t *testing.T) {
	a, b := NewRandom(7), NewRandom(7)
	for i := range 100 {
		if a.Pick(10) != b.Pick(10) || a.Chance(0.3) != b.Chance(0.3) {
			t.Fatalf("draw %d differs", i)
		}
	}
}

func TestAbbrev(t *testing.T) {
	for in, want := range map[string]string{
		"chains/s1/express/00000000000000000001/00000000000000000013": "e1/13",
		"chain#s1/express head": "head",
		"chain#s1/express m#00000000000000000002/00000000000000000100": "m#2/100",
		"stream#st0 r#00000000000000000000":                            "st0 r#0",
	} {
		if got := abbrev(in); got != want {
			t.Errorf("abbrev(%q) = %q, want %q", in, got, want)
		}
	}
}
