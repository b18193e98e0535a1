package subs

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"pgregory.net/rapid"
)

// TestOwnerOf: every subscription has exactly one owner among the live
// stars, whatever order they are listed in; a star leaving moves only the
// subscriptions it owned, and a star joining takes only subscriptions for
// itself.
func TestOwnerOf(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		stars := rapid.SliceOfNDistinct(rapid.StringMatching(`[a-z0-9-]{1,12}`), 1, 8, rapid.ID).Draw(t, "stars")
		k := subKey("b", rapid.StringMatching(`[a-z/]{0,8}`).Draw(t, "root"), rapid.StringMatching(`[a-z0-9]{1,8}`).Draw(t, "id"))
		owner := ownerOf(stars, k)
		if !slices.Contains(stars, owner) {
			t.Fatalf("owner %q is not one of %v", owner, stars)
		}
		shuffled := rapid.Permutation(stars).Draw(t, "order")
		if got := ownerOf(shuffled, k); got != owner {
			t.Fatalf("owner %q in one order, %q in another", owner, got)
		}
		gone := rapid.SampledFrom(stars).Draw(t, "leaves")
		rest := slices.DeleteFunc(slices.Clone(stars), func(s string) bool { return s == gone })
		if gone != owner && ownerOf(rest, k) != owner {
			t.Fatalf("%q left and the owner moved from %q to %q", gone, owner, ownerOf(rest, k))
		}
		joins := rapid.StringMatching(`[A-Z]{1,4}`).Draw(t, "joins")
		if got := ownerOf(append(slices.Clone(stars), joins), k); got != owner && got != joins {
			t.Fatalf("%q joined and the owner moved from %q to %q", joins, owner, got)
		}
	})
	if got := ownerOf(nil, subKey("b", "", "s")); got != "" {
		t.Fatalf("owner among no stars: %q", got)
	}
}

// TestOwnerOfSpreads: 3,000 subscriptions over three stars, each owns a
// third within 10 %.
func TestOwnerOfSpreads(t *testing.T) {
	stars := []string{"star-a", "star-b", "star-c"}
	count := map[string]int{}
	for i := range 3000 {
		count[ownerOf(stars, subKey("durable-streams", "", fmt.Sprintf("sub-%d", i)))]++
	}
	for _, s := range stars {
		if count[s] < 900 || count[s] > 1100 {
			t.Fatalf("ownership %v: want about 1,000 each", count)
		}
	}
}

// TestSubDue: the transitions the clock brings, decided from the row
// alone (the timer pass's test).
func TestSubDue(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	cases := []struct {
		name string
		row  subRow
		want bool
	}{
		{"idle", subRow{}, false},
		{"wake, lease running", subRow{WakeID: "w", LeaseUntil: now.Add(time.Second)}, false},
		{"wake, lease ran out", subRow{WakeID: "w", LeaseUntil: now}, true},
		{"unclaimed pull-wake wake (no lease)", subRow{WakeID: "w"}, false},
		{"retry, backoff running", subRow{Failed: true, NotBefore: now.Add(time.Second)}, false},
		{"retry, backoff ended", subRow{Failed: true, NotBefore: now}, true},
		{"retry backoff ended under a wake", subRow{Failed: true, NotBefore: now, WakeID: "w", LeaseUntil: now.Add(time.Second)}, false},
	}
	for _, c := range cases {
		if got := c.row.due(now); got != c.want {
			t.Errorf("%s: due %v, want %v", c.name, got, c.want)
		}
	}
}

// TestSubAdvanceOnAClone: the driver decides on a clone of the cached
// row; advancing the clone (linking, waking) leaves the cached row as it
// was, and an idle row with nothing pending does not change.
func TestSubAdvanceOnAClone(t *testing.T) {
	now := time.Unix(1_000_000, 0)
	s := subRow{ID: "s", Config: subConfig{Type: subWebhook, Pattern: "a/*", LeaseTTLms: 1000},
		Links: []subLink{{Path: "a/x", Explicit: true, Acked: 3}}}
	t3 := tails{at: map[string]uint64{"a/x": 3, "a/y": 5}, present: map[string]bool{"a/x": true, "a/y": true}}
	idle := s.clone()
	if w, changed := idle.advance(now, "w1", nil, t3); w != nil || changed {
		t.Fatalf("nothing pending: wake %v, changed %v", w, changed)
	}
	c := s.clone()
	w, changed := c.advance(now, "w1", []string{"a/y"}, t3)
	if !changed || w == nil || w.Stream != "a/y" || c.link("a/y") == nil || c.Snapshot["a/y"] != 5 {
		t.Fatalf("appended a/y: wake %+v, changed %v, row %+v", w, changed, c)
	}
	if len(s.Links) != 1 || s.WakeID != "" || s.Snapshot != nil || s.Generation != 0 {
		t.Fatalf("the cached row changed with its clone: %+v", s)
	}
	// A wake in flight is not woken again by more data.
	t9 := tails{at: map[string]uint64{"a/x": 9, "a/y": 5}, present: map[string]bool{"a/x": true, "a/y": true}}
	if w, changed := c.advance(now, "w2", nil, t9); w != nil || changed {
		t.Fatalf("in flight: wake %v, changed %v", w, changed)
	}
	// tails cover only what they hold.
	if !t9.cover([]string{"a/x", "a/y"}) || t9.cover([]string{"a/x", "a/z"}) {
		t.Fatal("cover")
	}
	var none tails
	if none.cover([]string{"a/x"}) || !none.cover(nil) {
		t.Fatal("cover of empty tails")
	}
}
