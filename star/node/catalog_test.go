package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/node"
)

// recreateBasin re-creates basin-one through n once its deletion is no
// longer pending.
func recreateBasin(t *testing.T, n *node.Node, cfg *api.BasinConfig) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		_, err := n.CreateBasin(context.Background(), api.CreateBasinRequest{Basin: "basin-one", Config: cfg}, "")
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("re-create basin-one through %s: %v", n.StarID(), err)
		}
	}
}

// Issue 26 defect 1: star b caches basin-one as its first incarnation; the
// basin is deleted and re-created through a, and stream s is created in
// the new basin with acknowledged appends. A request for s through b (an
// append that creates on append) must not take s's live row for a stream
// of an earlier basin and replace it: the name keeps its id, and every
// acknowledged record reads back through a star that never saw s.
func TestStaleBasinCacheKeepsLiveStream(t *testing.T) {
	st := newStores(t)
	a := open(t, st, clusterConfig("a"))
	b := open(t, st, clusterConfig("b"))
	ctx := context.Background()
	cfg := &api.BasinConfig{CreateStreamOnAppend: true}
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: cfg}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.BasinConfig(ctx, "basin-one"); err != nil { // b caches the first basin
		t.Fatal(err)
	}
	if err := a.DeleteBasin(ctx, "basin-one"); err != nil {
		t.Fatal(err)
	}
	recreateBasin(t, a, cfg)
	ack, err := a.Append(ctx, "basin-one", "s", records("a", 3), nil)
	if err != nil {
		t.Fatal(err)
	}
	id := streamID(t, st, "s")

	// Through b: a forward to a (a leads s) or an ack are both fine; a new
	// stream in the name's place is not.
	_, err = b.Append(ctx, "basin-one", "s", records("b", 1), nil)
	if nl := (*node.NotLeaderError)(nil); err != nil && !errors.As(err, &nl) {
		t.Logf("append through b: %v", err)
	}
	if got := streamID(t, st, "s"); got != id {
		t.Fatalf("b replaced live stream %s with %s: a's %d acknowledged records are under no name", id, got, ack.End.SeqNum)
	}
	c := open(t, st, clusterConfig("c"))
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := readRetrying(t, c, "basin-one", "s")
	if len(got) < 3 || string(got[0].Body) != "a-0" || string(got[2].Body) != "a-2" {
		t.Fatalf("a fresh star reads %d records of s, want a's 3 acknowledged ones first", len(got))
	}
}
