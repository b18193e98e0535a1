package node

import (
	"testing"
	"time"
)

// rowsLive keeps a led stream only while its basin is alive and its name
// row names it, undeleted, in that basin.
func TestRowsLive(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	const pending = 30 * time.Second
	deleted := now.Add(-time.Second)
	basin := func(id string, del *time.Time) *basinEntry { return &basinEntry{row: BasinRow{ID: id, DeletedAt: del}} }
	stream := func(id, basinID string, del *time.Time) *streamEntry {
		return &streamEntry{row: StreamRow{ID: id, BasinID: basinID, DeletedAt: del}}
	}
	for _, c := range []struct {
		name string
		b    *basinEntry
		e    *streamEntry
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
		if got := rowsLive(c.b, c.e, "s1", pending, now); got != c.want {
			t.Errorf("%s: rowsLive = %v, want %v", c.name, got, c.want)
		}
	}
}
