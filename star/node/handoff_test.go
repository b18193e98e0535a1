package node_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
)

// A handoff between two stars in one process: the lease is released to
// the target with the frontier, the old leader forwards to the target
// (and never takes the lease back while the target lives), and the
// target continues at the tail with no gate settle. Bad targets and
// streams not led here are refused.
func TestHandoff(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	a := open(t, st, clusterConfig("a"))
	b := open(t, st, clusterConfig("b"))
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("s1", 7), nil); err != nil {
		t.Fatal(err)
	}
	for _, to := range []string{"a", "nobody"} {
		if _, err := a.Handoff(ctx, "basin-one", "s1", to); !isStatus(err, http.StatusUnprocessableEntity) {
			t.Fatalf("handoff to %q: %v, want 422", to, err)
		}
	}
	if _, err := b.Handoff(ctx, "basin-one", "s1", "a"); !isStatus(err, http.StatusUnprocessableEntity) {
		t.Fatalf("handoff by a star that does not lead the stream: %v, want 422", err)
	}

	res, err := a.Handoff(ctx, "basin-one", "s1", "b")
	if err != nil {
		t.Fatal(err)
	}
	if res.Frontier != 7 || res.To != "b" {
		t.Fatalf("handoff result %+v", res)
	}
	l, _, ok, err := leader.ReadLease(ctx, st.meta, streamID(t, st, "s1"))
	if err != nil || !ok || !l.Released || l.Frontier != 7 || l.To != "b" || l.Star != "a" {
		t.Fatalf("lease after the handoff %+v ok %v err %v", l, ok, err)
	}
	// a forwards to b, even to a request that bypasses its forward cache.
	_, err = a.Append(ctx, "basin-one", "s1", records("x", 1), nil)
	if nl := notLeader(t, err); nl.Leader.Star != "b" || nl.Address != "b.test:7480" {
		t.Fatalf("a's forward target after the handoff %+v", nl)
	}
	a.ForgetLeader(streamID(t, st, "s1"))
	_, err = a.Append(ctx, "basin-one", "s1", records("x", 1), nil)
	if nl := notLeader(t, err); nl.Leader.Star != "b" {
		t.Fatalf("a's forward target after the handoff %+v", nl)
	}
	ack, err := b.Append(ctx, "basin-one", "s1", records("after", 2), nil)
	if err != nil {
		t.Fatal(err)
	}
	if ack.Start.SeqNum != 7 || ack.End.SeqNum != 9 {
		t.Fatalf("first append on b at [%d, %d), want [7, 9)", ack.Start.SeqNum, ack.End.SeqNum)
	}
	if got := gateSettles(t, b); got != 0 {
		t.Fatalf("%v gate settles after a handoff, want 0", got)
	}
	if got := readAll(t, b, "basin-one", "s1"); len(got) != 9 || string(got[6].Body) != "s1-6" || string(got[7].Body) != "after-0" {
		t.Fatalf("read back %d records after the handoff", len(got))
	}
}

// A draining star takes no new lease, forwards to live leaders, and its
// terminate gate opens once it has released every stream it led.
func TestDrain(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	a := open(t, st, clusterConfig("a"))
	b := open(t, st, clusterConfig("b"))
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		if _, err := a.Append(ctx, "basin-one", s, records(s, 3), nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.Append(ctx, "basin-one", "s3", records("s3", 3), nil); err != nil {
		t.Fatal(err)
	}
	if s := a.DrainStatus(); s.Draining || s.Leading != 2 || s.TerminateGate || s.ChainsSettled {
		t.Fatalf("status before the drain %+v", s)
	}
	a.Drain()
	poll.UntilErr(t, 5*time.Second, "the terminate gate opens", func() error {
		if s := a.DrainStatus(); !s.TerminateGate {
			return fmt.Errorf("terminate gate still shut: %+v", s)
		}
		return nil
	})
	// Decommission: the drained star settled its own chains while it
	// stands, so its close leaves nothing to settle.
	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		if h := head(t, st, "a", class); h.State != meta.HeadSettled {
			t.Fatalf("%s chain of the drained star: %+v", class, h)
		}
	}
	// New streams and released ones are refused (a retryable not-leader
	// naming no one); b's stream is forwarded to b.
	for _, s := range []string{"s1", "s4"} {
		_, err := a.Append(ctx, "basin-one", s, records("x", 1), nil)
		if nl := notLeader(t, err); nl.Leader.Star != "" || !isStatus(err, http.StatusServiceUnavailable) {
			t.Fatalf("%s on the drained star: %v", s, err)
		}
	}
	_, err := a.Append(ctx, "basin-one", "s3", records("x", 1), nil)
	if nl := notLeader(t, err); nl.Leader.Star != "b" {
		t.Fatalf("s3 on the drained star: %+v", nl)
	}
	ack, err := b.Append(ctx, "basin-one", "s1", records("b", 1), nil)
	if err != nil || ack.Start.SeqNum != 3 {
		t.Fatalf("s1 on b after the drain: %+v %v", ack, err)
	}
	if got := gateSettles(t, b); got != 0 {
		t.Fatalf("%v gate settles after a drain, want 0", got)
	}
	// Its close is a decommission: the registry row says so, so the
	// janitor's trim job may collect its chain garbage; a plain close is not.
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for star, want := range map[string]bool{"a": true, "b": false} {
		k := meta.RegistryKey(star)
		it, err := st.meta.Get(ctx, k.PK, k.SK)
		if err != nil {
			t.Fatal(err)
		}
		var reg meta.Registration
		if err := meta.Decode(it.Val, &reg); err != nil {
			t.Fatal(err)
		}
		if reg.State != meta.StarStopped || reg.Decommissioned != want {
			t.Errorf("star %s after its close: %+v, want stopped, decommissioned %v", star, reg, want)
		}
	}
}

func isStatus(err error, status int) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Status == status
}
