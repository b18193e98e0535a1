package node_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/node"
)

// balanceConfig is a cluster star whose balancer runs only when asked
// (every > 0: every that often).
func balanceConfig(id string, every time.Duration) node.Config {
	c := clusterConfig(id)
	c.BalanceEvery = every
	return c
}

// leadStreams creates basin-one through n and appends recs records to
// each of count streams s00…, so n leads them all.
func leadStreams(t *testing.T, n *node.Node, count, recs int) []string {
	t.Helper()
	ctx := context.Background()
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	var names []string
	for i := range count {
		s := fmt.Sprintf("s%02d", i)
		if _, err := n.Append(ctx, "basin-one", s, records(s, recs), nil); err != nil {
			t.Fatal(err)
		}
		names = append(names, s)
	}
	if got := n.DrainStatus().Leading; got != count {
		t.Fatalf("%s leads %d streams, want %d", n.StarID(), got, count)
	}
	return names
}

// movedTo reads each stream's lease: the streams still held by from are
// left out, the others (released by from to a target) are mapped to the
// target.
func movedTo(t *testing.T, st stores, from string, names []string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, s := range names {
		l, _, ok, err := leader.ReadLease(context.Background(), st.meta, streamID(t, st, s))
		if err != nil || !ok {
			t.Fatalf("%s: lease %+v ok %v err %v", s, l, ok, err)
		}
		switch {
		case l.Star == from && !l.Released:
		case l.Star == from && l.Released && l.To != "" && l.To != from:
			out[s] = l.To
		default:
			t.Fatalf("%s: lease after the balance %+v", s, l)
		}
	}
	return out
}

// checkMoved appends through each moved stream's new leader (it takes the
// released lease and continues at the tail) and reads every record back.
func checkMoved(t *testing.T, stars map[string]*node.Node, moved map[string]string, recs int) {
	t.Helper()
	for s, to := range moved {
		n := stars[to]
		ack := appendUntil(t, n, s, records("after", 2))
		if ack.Start.SeqNum != uint64(recs) || ack.End.SeqNum != uint64(recs+2) {
			t.Fatalf("%s: first append on %s at [%d, %d), want [%d, %d)", s, to, ack.Start.SeqNum, ack.End.SeqNum, recs, recs+2)
		}
		got := readAll(t, n, "basin-one", s)
		if len(got) != recs+2 {
			t.Fatalf("%s: read back %d records through %s, want %d", s, len(got), to, recs+2)
		}
		for i := range recs {
			if want := fmt.Sprintf("%s-%d", s, i); string(got[i].Body) != want {
				t.Fatalf("%s: record %d is %q, want %q", s, i, got[i].Body, want)
			}
		}
		if string(got[recs].Body) != "after-0" || string(got[recs+1].Body) != "after-1" {
			t.Fatalf("%s: records after the move %q %q", s, got[recs].Body, got[recs+1].Body)
		}
	}
}

func countTargets(moved map[string]string) map[string]int {
	c := map[string]int{}
	for _, to := range moved {
		c[to]++
	}
	return c
}

// One star leads 9 streams, two more join: a round on the loaded star
// hands 6 off, 3 to each, and stops at the fair share; every stream reads
// back every acknowledged record and takes appends through its new
// leader, without a gate settle; then nobody is above the share+1 bound
// and further rounds move nothing.
func TestBalanceSpreadsLeadership(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	a := open(t, st, balanceConfig("a", 0))
	names := leadStreams(t, a, 9, 5)
	stars := map[string]*node.Node{
		"a": a,
		"b": open(t, st, balanceConfig("b", 0)),
		"c": open(t, st, balanceConfig("c", 0)),
	}

	n, err := a.Balance(ctx)
	if err != nil || n != 6 {
		t.Fatalf("balance moved %d streams, err %v; want 6", n, err)
	}
	if got := a.DrainStatus().Leading; got != 3 {
		t.Fatalf("a leads %d streams after the balance, want 3", got)
	}
	moved := movedTo(t, st, "a", names)
	if c := countTargets(moved); len(moved) != 6 || c["b"] != 3 || c["c"] != 3 {
		t.Fatalf("streams moved %v, want 3 to b and 3 to c", moved)
	}
	if got := balanceHandoffs(t, a); got != 6 {
		t.Fatalf("a's balance handoff counter %v, want 6", got)
	}
	checkMoved(t, stars, moved, 5)
	for id, n := range stars {
		if got := n.DrainStatus().Leading; got != 3 {
			t.Errorf("%s leads %d streams, want 3", id, got)
		}
		if got := gateSettles(t, n); got != 0 {
			t.Errorf("%s ran %v gate settles, want 0 (every move was a release)", id, got)
		}
	}
	// Every star advertises its count, and a balanced cluster stays put.
	waitLeads(t, st, map[string]int{"a": 3, "b": 3, "c": 3})
	for id, n := range stars {
		if moved, err := n.Balance(ctx); err != nil || moved != 0 {
			t.Errorf("%s: a round on a balanced cluster moved %d streams, err %v", id, moved, err)
		}
	}
}

// Draining and stopped stars take nothing, and a draining star does not
// balance.
func TestBalanceSkipsStarsNotLive(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	a := open(t, st, balanceConfig("a", 0))
	names := leadStreams(t, a, 9, 3)
	b := open(t, st, balanceConfig("b", 0))
	c := open(t, st, balanceConfig("c", 0))
	d := open(t, st, balanceConfig("d", 0))
	if err := d.Close(ctx); err != nil {
		t.Fatal(err)
	}
	b.Drain()
	poll.UntilErr(t, 5*time.Second, "b's registration says draining", func() error {
		reg, _, _, err := leader.ReadRegistration(ctx, st.meta, "b")
		if err != nil {
			t.Fatal(err)
		}
		if reg.State != meta.StarDraining {
			return fmt.Errorf("b's registration still says %q", reg.State)
		}
		return nil
	})
	if n, err := b.Balance(ctx); err != nil || n != 0 {
		t.Fatalf("a draining star's round moved %d, err %v", n, err)
	}
	// Live: a and c, share ⌈9/2⌉ = 5: 4 streams go to c.
	n, err := a.Balance(ctx)
	if err != nil || n != 4 {
		t.Fatalf("balance moved %d streams, err %v; want 4", n, err)
	}
	moved := movedTo(t, st, "a", names)
	if cnt := countTargets(moved); len(moved) != 4 || cnt["c"] != 4 {
		t.Fatalf("streams moved %v, want 4 to c", moved)
	}
	checkMoved(t, map[string]*node.Node{"c": c}, moved, 3)
}

// The balancer loop: a star leading 6 streams alone keeps them; once a
// peer joins, its rounds hand 3 over and then stop.
func TestBalanceLoop(t *testing.T) {
	st := newStores(t)
	a := open(t, st, balanceConfig("a", 20*time.Millisecond))
	names := leadStreams(t, a, 6, 4)
	// Rounds alone (these and the loop's, one at a time) move nothing.
	for range 3 {
		if moved, err := a.Balance(context.Background()); err != nil || moved != 0 {
			t.Fatalf("a star alone handed %d streams off (%v)", moved, err)
		}
	}
	if got := a.DrainStatus().Leading; got != 6 {
		t.Fatalf("a star alone gave streams away: it leads %d of 6", got)
	}
	b := open(t, st, balanceConfig("b", 0))
	poll.UntilErr(t, 10*time.Second, "a hands 3 streams to b", func() error {
		if got := a.DrainStatus().Leading; got != 3 {
			return fmt.Errorf("a still leads %d streams, want 3", got)
		}
		return nil
	})
	moved := movedTo(t, st, "a", names)
	if cnt := countTargets(moved); len(moved) != 3 || cnt["b"] != 3 {
		t.Fatalf("streams moved %v, want 3 to b", moved)
	}
	checkMoved(t, map[string]*node.Node{"b": b}, moved, 4)
	waitLeads(t, st, map[string]int{"a": 3, "b": 3})
	for range 3 { // more rounds: nothing moves
		if moved, err := a.Balance(context.Background()); err != nil || moved != 0 {
			t.Fatalf("a round after the balance handed %d streams off (%v)", moved, err)
		}
	}
	if got, want := a.DrainStatus().Leading, 3; got != want || balanceHandoffs(t, a) != 3 {
		t.Fatalf("a leads %d streams after more rounds (handoffs %v), want %d (3)", got, balanceHandoffs(t, a), want)
	}
}

// waitLeads waits until each star's registration advertises its count.
func waitLeads(t *testing.T, st stores, want map[string]int) {
	t.Helper()
	poll.UntilErr(t, 5*time.Second, "the registrations advertise the leads", func() error {
		for id, w := range want {
			reg, _, _, err := leader.ReadRegistration(context.Background(), st.meta, id)
			if err != nil {
				t.Fatal(err)
			}
			if reg.Leads != w {
				return fmt.Errorf("%s advertises %d leads, want %d", id, reg.Leads, w)
			}
		}
		return nil
	})
}

// balanceHandoffs is n's count of balancer handoffs.
func balanceHandoffs(t *testing.T, n *node.Node) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "starlog_leader_balance_handoffs_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("no starlog_leader_balance_handoffs_total metric")
	return 0
}
