package catalog

import (
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// RowsLive keeps a led stream only while its basin is alive and its name
// row names it, undeleted, in that basin.
func TestRowsLive(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	const pending = 30 * time.Second
	deleted := now.Add(-time.Second)
	basin := func(id string, del *time.Time) *BasinEntry {
		return &BasinEntry{Row: meta.BasinRow{ID: id, DeletedAt: del}}
	}
	stream := func(id, basinID string, del *time.Time) *StreamEntry {
		return &StreamEntry{Row: meta.StreamRow{ID: id, BasinID: basinID, DeletedAt: del}}
	}
	for _, c := range []struct {
		name string
		b    *BasinEntry
		e    *StreamEntry
		want bool
	}{
		{"live", basin("b1", nil), stream("s1", "b1", nil), true},
		{"stream deleted", basin("b1", nil), stream("s1", "b1", &deleted), false},
		{"stream replaced", basin("b1", nil), stream("s2", "b1", nil), false},
		{"no name row", basin("b1", nil), nil, false},
		{"basin deleted", basin("b1", &deleted), stream("s1", "b1", nil), false},
		{"basin re-created", basin("b2", nil), stream("s1", "b1", nil), false},
		{"basin re-created, stream too", basin("b2", nil), stream("s2", "b2", nil), false},
		{"no basin row", nil, stream("s1", "b1", nil), false},
	} {
		if got := RowsLive(c.b, c.e, "s1", pending, now); got != c.want {
			t.Errorf("%s: RowsLive = %v, want %v", c.name, got, c.want)
		}
	}
}

func TestLifecycle(t *testing.T) {
	now := time.Now()
	del := now.Add(-time.Second)
	if LifecycleOf(nil, time.Minute, now) != Alive {
		t.Fatal("undeleted is alive")
	}
	if LifecycleOf(&del, time.Minute, now) != Deleting {
		t.Fatal("recently deleted is deleting")
	}
	if LifecycleOf(&del, time.Second, now) != Gone {
		t.Fatal("deleted past the pending time is gone")
	}
}
