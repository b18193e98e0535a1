package chainsettle

import "testing"

func TestWalkPassBounds(t *testing.T) {
	for _, c := range []struct {
		slots, extents, need, most int
		want                       bool
	}{
		{1024, 1024 * 200, 0, 6144, false},                     // S3-sized flights: not yet
		{1311, 1311 * 200, 0, 6144, true},                      // their extents fill a pass
		{6143, 6143, 0, 6144, false},                           // one-stream flights: the epoch's bound
		{6144, 6144, 0, 6144, true},                            //
		{6144, 6144, 0, 0, true},                               // a record without one: 6,144
		{6144, 6144, 0, 65536, false},                          // a directory store's epoch passes more
		{65536, 65536, 0, 65536, true},                         //
		{6144, 6144, 9000, 6144, false},                        // a recorded marker asks for more
		{9000, 9000, 9000, 6144, true},                         // and gets them
		{walkPassSlots, walkPassExtents, 1 << 20, 6144, false}, // however long it is
	} {
		if got := passFull(c.slots, c.extents, c.need, c.most); got != c.want {
			t.Errorf("passFull(%d slots, %d extents, need %d, most %d) = %v, want %v", c.slots, c.extents, c.need, c.most, got, c.want)
		}
	}
}
