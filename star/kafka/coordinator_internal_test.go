package kafka

import (
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/starlog/starlog/star/kafka/groups"
)

// A star holds at most MaxGroups groups: a join that would make one more
// is refused (the handler answers COORDINATOR_NOT_AVAILABLE); requests
// that add no member still run, on a group forgotten at once.
func TestCoordinatorBoundsItsGroups(t *testing.T) {
	c := newCoordinator()
	for i := range MaxGroups {
		g := groups.New(fmt.Sprint(i), newMemberID)
		g.Pending["m"] = time.Now().Add(time.Minute)
		c.groups[g.ID] = g
	}
	ran := false
	if c.do("one-more", true, func(*groups.Group, time.Time) { ran = true }) || ran {
		t.Fatalf("a join made group %d past the bound of %d", len(c.groups), MaxGroups)
	}
	var code int16
	if !c.do("one-more", false, func(g *groups.Group, now time.Time) { code = g.Heartbeat(now, "m", 1) }) || code != kerr.UnknownMemberID.Code {
		t.Fatalf("a heartbeat of a group not held: code %d", code)
	}
	if len(c.groups) != MaxGroups {
		t.Fatalf("%d groups held after a heartbeat of an unknown one, want %d", len(c.groups), MaxGroups)
	}
	delete(c.groups, "0")
	if !c.do("one-more", true, func(*groups.Group, time.Time) {}) {
		t.Fatal("a join refused below the bound")
	}
}
