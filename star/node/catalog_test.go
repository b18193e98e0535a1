package node_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/auditjob"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/star/node"
)

// recreateBasin re-creates basin-one through n once its deletion is no
// longer pending.
func recreateBasin(t *testing.T, n *node.Node, cfg *api.BasinConfig) {
	t.Helper()
	poll.UntilErr(t, 5*time.Second, "re-create basin-one through "+n.StarID(), func() error {
		_, err := n.CreateBasin(context.Background(), api.CreateBasinRequest{Basin: "basin-one", Config: cfg}, "")
		return err
	})
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

// A star that saw a basin deleted must not keep answering "not found"
// from that cached row once the basin is created again elsewhere: a
// deleted row is never trusted from the cache (found by star/e2e/verify's
// Recreate nemesis: a create of a stream in the re-created basin answered
// 404 basin_not_found through a star that had seen the delete).
func TestDeletedBasinCacheSeesRecreatedBasin(t *testing.T) {
	st := newStores(t)
	a := open(t, st, clusterConfig("a"))
	b := open(t, st, clusterConfig("b"))
	ctx := context.Background()
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one"}, ""); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteBasin(ctx, "basin-one"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.BasinConfig(ctx, "basin-one"); err == nil { // b caches the deleted row
		t.Fatal("b serves a deleted basin")
	}
	recreateBasin(t, a, nil)
	if _, err := b.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "s"}, ""); err != nil {
		t.Fatalf("create a stream in the re-created basin through b: %v", err)
	}
}

// Issue 26 defect 2: a peer leads basin-one/s1 while another star deletes
// it (the basin, served where it lands; or the stream, when the leader
// lookup found nobody) and re-creates it. Nothing the old leader
// acknowledges once the name holds the new stream may go into the old
// stream's id: each of its acks must read back under the name.
func TestDeleteStopsPeerLeader(t *testing.T) {
	for _, what := range []string{"basin", "stream"} {
		t.Run(what, func(t *testing.T) { testDeleteStopsPeerLeader(t, what) })
	}
}

func testDeleteStopsPeerLeader(t *testing.T, what string) {
	st := newStores(t)
	a := open(t, st, clusterConfig("a"))
	b := open(t, st, clusterConfig("b"))
	ctx := context.Background()
	cfg := &api.BasinConfig{CreateStreamOnAppend: true}
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: cfg}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("old", 2), nil); err != nil {
		t.Fatal(err)
	}
	old := streamID(t, st, "s1")
	switch what {
	case "basin":
		if err := b.DeleteBasin(ctx, "basin-one"); err != nil {
			t.Fatal(err)
		}
		recreateBasin(t, b, cfg)
	case "stream":
		if err := b.DeleteStream(ctx, "basin-one", "s1"); err != nil {
			t.Fatal(err)
		}
	}
	poll.UntilErr(t, 5*time.Second, "b re-creates s1", func() error {
		_, err := b.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "s1"}, "")
		return err
	})
	if id := streamID(t, st, "s1"); id == old {
		t.Fatal("s1 was not re-created with a new id")
	}
	// Through a, which led the old s1: forwarded, refused, or acknowledged
	// into the new stream.
	var acked []api.AppendAck
	for i := range 3 {
		ack, err := a.Append(ctx, "basin-one", "s1", records(fmt.Sprintf("a%d", i), 1), nil)
		if err == nil {
			acked = append(acked, ack)
		}
	}
	// Read back through b, after a hands over whatever it leads.
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	got := readRetrying(t, b, "basin-one", "s1")
	for i, ack := range acked {
		want := fmt.Sprintf("a%d-0", i)
		if ack.Start.SeqNum >= uint64(len(got)) || string(got[ack.Start.SeqNum].Body) != want {
			t.Fatalf("a acknowledged %q at seq %d after s1 was re-created, but s1 reads %d records: acknowledged into the deleted stream %s", want, ack.Start.SeqNum, len(got), old)
		}
	}
}

// The delete fence holds for a leader cut off from the metastore, which
// keeps acknowledging by design (its row check cannot read): the name is
// not re-created until that leader is presumed dead and its chain fenced,
// and from then on it acknowledges nothing into the deleted stream.
func TestDeleteFencesCutOffLeader(t *testing.T) {
	t.Run("re-created at once", func(t *testing.T) { testDeleteFencesCutOffLeader(t, false) })
	// The janitor's reclamation of the deleted id meets the cut-off
	// leader's lease first: it must not free it for the create.
	t.Run("janitor first", func(t *testing.T) { testDeleteFencesCutOffLeader(t, true) })
}

func testDeleteFencesCutOffLeader(t *testing.T, janitor bool) {
	ctx := context.Background()
	st := newStores(t)
	aMeta := mfaults.New(st.meta, 1)
	ca := clusterConfig("a")
	ca.DeadAfter = 3 * time.Hour // a's clock runs slow: its own guard never stops it
	a, err := node.Open(ctx, ca, node.Deps{Meta: aMeta, Objects: st.objects, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		aMeta.SetUnavailable(false)
		a.Close(context.Background())
	})
	b := open(t, st, clusterConfig("b"))
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("old", 2), nil); err != nil {
		t.Fatal(err)
	}
	aMeta.SetUnavailable(true)
	if err := b.DeleteStream(ctx, "basin-one", "s1"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("cut-off", 1), nil); err != nil {
		t.Fatalf("a, cut off, stopped acknowledging before any fence: %v", err)
	}
	if janitor {
		js := &settle.Stores{Meta: st.meta, Objects: st.objects, SettledBucket: "standard", Streams: settle.MetaStreams{Meta: st.meta},
			Config: settle.Config{ScratchDir: t.TempDir()}, Logger: testLog()}
		if _, err := auditjob.Janitor(ctx, js); err != nil {
			t.Logf("janitor: %v", err)
		}
	}
	poll.UntilErr(t, 10*time.Second, "b re-creates s1", func() error {
		_, err := b.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "s1"}, "")
		return err
	})
	for i := range 3 {
		actx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
		ack, err := a.Append(actx, "basin-one", "s1", records("late", 1), nil)
		cancel()
		if err == nil {
			t.Fatalf("append %d: a acknowledged seq %d into the deleted stream after s1 was re-created", i, ack.Start.SeqNum)
		}
	}
}
