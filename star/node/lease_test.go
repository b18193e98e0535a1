package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/node"
)

func clusterConfig(id string) node.Config {
	c := testConfig()
	c.StarID, c.Address = id, id+".test:7480"
	c.HeartbeatEvery = 20 * time.Millisecond
	c.DeadAfter = 300 * time.Millisecond
	return c
}

func notLeader(t *testing.T, err error) *node.NotLeaderError {
	t.Helper()
	var nl *node.NotLeaderError
	if !errors.As(err, &nl) {
		t.Fatalf("want a NotLeaderError, got %v", err)
	}
	apiErr(t, err, 503, api.CodeUnavailable)
	return nl
}

// appendUntil appends in to stream through n until it is acknowledged.
func appendUntil(t *testing.T, n *node.Node, stream string, in *api.AppendInput) api.AppendAck {
	t.Helper()
	var ack api.AppendAck
	poll.UntilErr(t, 10*time.Second, "append to "+stream+" through "+n.StarID(), func() (err error) {
		ack, err = n.Append(context.Background(), "basin-one", stream, in, nil)
		return err
	})
	return ack
}

// Two stars on one metastore and object store: the first to serve a
// stream leads it and the other is told where to forward; once the
// leader stops, the other takes the lease over and continues every
// stream at its tail. A graceful close released the leases with their
// frontiers, so the successor settles nothing; a close whose releases did
// not land (simulated by un-releasing the rows) makes it settle the old
// leader's chains first.
func TestLeaseTakeoverAfterStop(t *testing.T) {
	t.Run("released", func(t *testing.T) { testTakeoverAfterStop(t, true) })
	t.Run("unreleased", func(t *testing.T) { testTakeoverAfterStop(t, false) })
}

func testTakeoverAfterStop(t *testing.T, released bool) {
	st := newStores(t)
	a := open(t, st, clusterConfig("a"))
	b := open(t, st, clusterConfig("b"))
	ctx := context.Background()
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true, CreateStreamOnRead: true}}, ""); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		if _, err := a.Append(ctx, "basin-one", s, records(s, 10), nil); err != nil {
			t.Fatal(err)
		}
	}
	_, err := b.Append(ctx, "basin-one", "s1", records("b", 1), nil)
	nl := notLeader(t, err)
	if nl.Leader.Star != "a" || nl.Leader.Incarnation != a.Incarnation() || nl.Address != "a.test:7480" {
		t.Fatalf("forward target %+v", nl)
	}
	_, err = b.CheckTail(ctx, "basin-one", "s2", nil)
	notLeader(t, err)
	// s3 is unled: b takes it.
	if _, err := b.Append(ctx, "basin-one", "s3", records("s3", 5), nil); err != nil {
		t.Fatal(err)
	}
	_, err = a.CheckTail(ctx, "basin-one", "s3", nil)
	notLeader(t, err)

	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		id := streamID(t, st, s)
		l, ver, ok, err := leader.ReadLease(ctx, st.meta, id)
		if err != nil || !ok || !l.Released || l.Frontier != 10 || l.Star != "a" || l.To != "" {
			t.Fatalf("%s: lease after a's graceful close %+v ok %v err %v", s, l, ok, err)
		}
		if !released {
			l.Released, l.Frontier = false, 0
			if _, err := leader.Acquire(ctx, st.meta, id, l, ver); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, s := range []string{"s1", "s2"} {
		ack := appendUntil(t, b, s, records("after", 3))
		if ack.Start.SeqNum != 10 || ack.End.SeqNum != 13 {
			t.Fatalf("%s: first append on the successor at [%d, %d), want [10, 13)", s, ack.Start.SeqNum, ack.End.SeqNum)
		}
		got := readAll(t, b, "basin-one", s)
		if len(got) != 13 || string(got[9].Body) != s+"-9" || string(got[10].Body) != "after-0" {
			t.Fatalf("%s: read back %d records", s, len(got))
		}
		l, _, ok, err := leader.ReadLease(ctx, st.meta, streamID(t, st, s))
		if err != nil || !ok || l.Star != "b" || l.Version != 2 || len(l.Pending) != 0 {
			t.Fatalf("%s: lease after takeover %+v ok %v err %v", s, l, ok, err)
		}
	}
	if released {
		if got := gateSettles(t, b); got != 0 {
			t.Fatalf("%v gate settle runs after a graceful close released the leases, want 0", got)
		}
		return
	}
	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		if h := chainHead(t, st, "a", class); h.State != meta.HeadSettled {
			t.Fatalf("a's %s chain after takeover: %+v", class, h)
		}
	}
	// Both streams' gates needed a's two chains settled: one run each.
	if got := gateSettles(t, b); got != 2 {
		t.Fatalf("%v gate settle runs for two streams of one dead star, want 2 (one per chain)", got)
	}
}

// gateSettles is n's count of successful open-gate settle runs.
func gateSettles(t *testing.T, n *node.Node) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var c float64
	for _, mf := range mfs {
		if mf.GetName() != "starlog_leader_gate_settles_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) == 1 && m.GetLabel()[0].GetValue() == "ok" {
				c += m.GetCounter().GetValue()
			}
		}
	}
	return c
}

// A star that peers presumed dead (its registry row CASed to dead while it
// still runs) is a zombie: it stops serving the streams it had open, and
// the successor's fence keeps every record it acknowledged readable and
// every seq num assigned once.
func TestZombieStopsServing(t *testing.T) {
	st := newStores(t)
	a := open(t, st, clusterConfig("a"))
	b := open(t, st, clusterConfig("b"))
	ctx := context.Background()
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("a", 7), nil); err != nil {
		t.Fatal(err)
	}
	// Peers presume a dead (as if its heartbeat had aged).
	if _, dead, err := leader.MarkDead(ctx, st.meta, "a", time.Now().Add(time.Hour), time.Second); err != nil || !dead {
		t.Fatalf("mark a dead: %v %v", dead, err)
	}
	ack := appendUntil(t, b, "s1", records("b", 2))
	if ack.Start.SeqNum != 7 {
		t.Fatalf("successor's first append at %d, want 7", ack.Start.SeqNum)
	}
	// a learns it was superseded at its next heartbeat and sheds s1.
	poll.Until(t, 5*time.Second, "the zombie reports unhealthy", func() bool { return a.Healthy() != nil })
	_, err := a.Append(ctx, "basin-one", "s1", records("zombie", 1), nil)
	apiErr(t, err, 503, api.CodeUnavailable)
	_, err = a.CheckTail(ctx, "basin-one", "s1", nil)
	apiErr(t, err, 503, api.CodeUnavailable)
	// The process is told, so `star serve` exits and restarts.
	select {
	case <-a.Zombied():
	case <-time.After(5 * time.Second):
		t.Fatal("Zombied not closed")
	}
	select {
	case <-b.Zombied():
		t.Fatal("the successor reports itself a zombie")
	default:
	}
	got := readAll(t, b, "basin-one", "s1")
	if len(got) != 9 || string(got[6].Body) != "a-6" || string(got[7].Body) != "b-0" {
		t.Fatalf("read back %d records", len(got))
	}
}

func streamID(t *testing.T, st stores, name string) string {
	t.Helper()
	k := meta.StreamNameKey("basin-one", name)
	it, err := st.meta.Get(context.Background(), k.PK, k.SK)
	if err != nil {
		t.Fatal(err)
	}
	var row node.StreamRow
	if err := meta.Decode(it.Val, &row); err != nil {
		t.Fatal(err)
	}
	return row.ID
}

func chainHead(t *testing.T, st stores, star string, class meta.Class) meta.Head {
	t.Helper()
	k := meta.HeadKey(star, class)
	it, err := st.meta.Get(context.Background(), k.PK, k.SK)
	if err != nil {
		t.Fatal(err)
	}
	var h meta.Head
	if err := meta.Decode(it.Val, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// The deposed writer: a star that does not know it was presumed dead
// (it has not heartbeat since) still holds the stream open when a
// successor takes the lease and fences its chain. Its next append is
// sequenced at the old tail but can never be acknowledged: its slot is
// poisoned, so the append fails indefinite (503) and the star sheds the
// stream. The successor acknowledges that seq num with its own record,
// and every seq num reads back once.
func TestDeposedWriterNeverAcksPastTheCut(t *testing.T) {
	st := newStores(t)
	ca := clusterConfig("a")
	ca.HeartbeatEvery, ca.DeadAfter = time.Hour, 3*time.Hour // a never learns it was presumed dead
	a := open(t, st, ca)
	b := open(t, st, clusterConfig("b"))
	ctx := context.Background()
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("a", 7), nil); err != nil {
		t.Fatal(err)
	}
	if _, dead, err := leader.MarkDead(ctx, st.meta, "a", time.Now().Add(4*time.Hour), time.Hour); err != nil || !dead {
		t.Fatalf("mark a dead: %v %v", dead, err)
	}
	ack := appendUntil(t, b, "s1", records("b", 2))
	if ack.Start.SeqNum != 7 {
		t.Fatalf("successor's first append at %d, want 7", ack.Start.SeqNum)
	}

	// a still leads s1 as far as it knows.
	_, err := a.Append(ctx, "basin-one", "s1", records("late", 1), nil)
	e := apiErr(t, err, 503, api.CodeUnavailable)
	if !strings.Contains(e.Message, "may or may not be durable") {
		t.Fatalf("the deposed writer's append failed definite: %s", e.Message)
	}
	_, err = a.Append(ctx, "basin-one", "s1", records("later", 1), nil)
	apiErr(t, err, 503, api.CodeUnavailable)
	if a.Healthy() == nil {
		t.Fatal("the deposed star reports healthy")
	}
	got := readAll(t, b, "basin-one", "s1")
	if len(got) != 9 {
		t.Fatalf("read back %d records, want 9", len(got))
	}
	for i, r := range got {
		want := fmt.Sprintf("a-%d", i)
		if i >= 7 {
			want = fmt.Sprintf("b-%d", i-7)
		}
		if r.SeqNum != uint64(i) || string(r.Body) != want {
			t.Fatalf("seq %d reads %d %q, want %q", i, r.SeqNum, r.Body, want)
		}
	}
}

// A star's cached rows never expire (the append path reads none), so a
// star taking a stream on reads them again: a stream its leader deleted
// is not reopened by a peer that cached it alive, once the leader is gone.
func TestTakeoverReadsRowsAgain(t *testing.T) {
	st := newStores(t)
	a := open(t, st, clusterConfig("a"))
	b := open(t, st, clusterConfig("b"))
	ctx := context.Background()
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("a", 3), nil); err != nil {
		t.Fatal(err)
	}
	_, err := b.Append(ctx, "basin-one", "s1", records("b", 1), nil) // b caches s1 alive
	notLeader(t, err)
	if err := a.DeleteStream(ctx, "basin-one", "s1"); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	// b forwards to a until its forward cache learns a is gone (one TTL).
	poll.UntilErr(t, 5*time.Second, "b learns that s1 was deleted", func() error {
		ack, err := b.Append(ctx, "basin-one", "s1", records("b", 1), nil)
		if err == nil {
			t.Fatalf("b reopened the deleted stream and acknowledged seq %d", ack.Start.SeqNum)
		}
		var e *api.Error
		if errors.As(err, &e) && (e.Code == api.CodeStreamDeletionPending || e.Code == api.CodeStreamNotFound) {
			return nil
		}
		return err
	})
}

// A star that cached a stream's row deleted still finds the stream a peer
// re-creates under the name (the soak's finding: such a star answered 404
// stream_not_found, or 409 within the pending window, until restarted, and
// a stream handed to it was unreachable through it).
func TestDeletedRowCacheSeesRecreatedStream(t *testing.T) {
	st := newStores(t)
	a := open(t, st, clusterConfig("a"))
	b := open(t, st, clusterConfig("b"))
	ctx := context.Background()
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "s1"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("old", 2), nil); err != nil {
		t.Fatal(err)
	}
	if err := a.DeleteStream(ctx, "basin-one", "s1"); err != nil {
		t.Fatal(err)
	}
	// A request in the pending window reads the row and caches it deleted.
	if _, err := a.CheckTail(ctx, "basin-one", "s1", nil); err == nil {
		t.Fatal("check-tail of a stream being deleted succeeded")
	}
	poll.UntilErr(t, 5*time.Second, "b re-creates s1 after the deletion-pending window", func() error {
		_, err := b.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "s1"}, "")
		return err
	})
	// Within the pending window or after it, a must answer for the new
	// stream, not from its cached row of the old one (409 or 404).
	if _, err := a.CheckTail(ctx, "basin-one", "s1", nil); err != nil {
		t.Fatalf("a answers for the deleted stream, not the re-created one: %v", err)
	}
}

// A deleted stream's id is registered for reclamation by the delete
// itself, so a stream re-created under the name before the janitor's next
// run does not hide the old id (whose rows and objects would then stay);
// deleting a basin registers each of its streams.
func TestDeleteRegistersReclamation(t *testing.T) {
	st := newStores(t)
	n := open(t, st, testConfig())
	ctx := context.Background()
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one"}, ""); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2", "s3"} {
		if _, err := n.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: s}, ""); err != nil {
			t.Fatal(err)
		}
	}
	registered := func(id string) bool {
		k := meta.ReclaimStreamKey(id)
		it, err := st.meta.Get(ctx, k.PK, k.SK)
		if errors.Is(err, meta.ErrNotFound) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		var rs meta.ReclaimStream
		if err := meta.Decode(it.Val, &rs); err != nil || rs.Stream != id || rs.Basin != "basin-one" {
			t.Fatalf("reclamation row of %s: %+v, %v", id, rs, err)
		}
		return true
	}
	old := streamID(t, st, "s1")
	if registered(old) {
		t.Fatal("a live stream is registered for reclamation")
	}
	if err := n.DeleteStream(ctx, "basin-one", "s1"); err != nil {
		t.Fatal(err)
	}
	if !registered(old) {
		t.Fatal("the deleted stream's id is not registered for reclamation")
	}
	ids := []string{streamID(t, st, "s2"), streamID(t, st, "s3")}
	if err := n.DeleteBasin(ctx, "basin-one"); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if !registered(id) {
			t.Fatalf("stream %s of the deleted basin is not registered for reclamation", id)
		}
	}
}
