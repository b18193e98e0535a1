package chainsettle

import "testing"

func TestWalkPassBounds(t *testing.T) {
	for _, c := range []struct {
		slots, extents, need int
		want                 bool
	}{
		{1024, 1024 * 200, 0, false},                     // S3-sized flights: not yet
		{1311, 1311 * 200, 0, true},                      // their extents fill a pass
		{6143, 6143, 0, false},                           // one-stream flights: slots bound
		{6144, 6144, 0, true},                            //
		{6144, 6144, 9000, false},                        // a recorded marker asks for more
		{9000, 9000, 9000, true},                         // and gets them
		{walkPassSlots, walkPassExtents, 1 << 20, false}, // however long it is
	} {
		if got := passFull(c.slots, c.extents, c.need); got != c.want {
			t.Errorf("passFull(%d slots, %d extents, need %d) = %v, want %v", c.slots, c.extents, c.need, got, c.want)
		}
	}
}
