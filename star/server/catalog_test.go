package server_test

import (
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// Issue 26 defect 2, served: a basin delete is served where it lands, so
// it tells the stars leading the basin's streams before it answers. a
// leads s; the delete through b answers once a stopped leading it, and a
// acknowledges nothing into the deleted basin afterwards.
func TestBasinDeleteReachesLeaders(t *testing.T) {
	t.Parallel()
	a, b := starPair(t)
	a.setupBasin("del-basin")
	want(t, a.appendJSON("del-basin", "s", textRecords("a", 2)), 200, "")
	want(t, b.call("DELETE", "basins/del-basin", nil), 202, "")
	r := a.appendJSON("del-basin", "s", textRecords("late", 1))
	if r.status == 200 {
		t.Fatalf("a acknowledged an append into the basin b deleted: %s", r)
	}
	want(t, r, 409, api.CodeBasinDeletionPending)
}
