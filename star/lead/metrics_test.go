package lead

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/sqlite"
)

// testLeadership is a Leadership of me/4 on a fresh SQLite metastore,
// with its metrics in reg.
func testLeadership(t *testing.T, wrap func(meta.Store) meta.Store) (*Leadership, meta.Store, *prometheus.Registry) {
	t.Helper()
	ms, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ms.Close() })
	var store meta.Store = ms
	if wrap != nil {
		store = wrap(ms)
	}
	reg := prometheus.NewRegistry()
	ls, err := New(Config{Me: meta.LeaseHolder{Star: "me", Incarnation: 4}, Meta: store, Registry: reg,
		Registered: time.Now(), DeadAfter: 30 * time.Second, RowCheckEvery: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ls.Close)
	return ls, ms, reg
}

// counterValue reads a counter of reg by name and labels (0 when absent).
func counterValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetCounter().GetValue(), true
		}
		return 0, true
	}
	return 0, false
}

// An open refused because the lease is no longer this star's is counted
// by reason: deleted (retired) or moved (released, emptied, taken, none).
func TestStillHeldRefusalsCounted(t *testing.T) {
	ctx := context.Background()
	ls, ms, reg := testLeadership(t, nil)
	put := func(id string, l meta.Lease) {
		if _, err := leader.Acquire(ctx, ms, id, l, 0); err != nil {
			t.Fatal(err)
		}
	}
	put("held", meta.Lease{LeaseHolder: ls.Me()})
	put("taken", meta.Lease{LeaseHolder: meta.LeaseHolder{Star: "b", Incarnation: 1}})
	put("released", meta.Lease{LeaseHolder: ls.Me(), Released: true})
	put("deleted", meta.Lease{LeaseHolder: meta.LeaseHolder{Star: meta.DeletedBy}, Deleted: true})
	if err := ls.StillHeld(ctx, "held", "s"); err != nil {
		t.Fatalf("held lease refused: %v", err)
	}
	for _, id := range []string{"taken", "released", "unleased", "deleted"} {
		if err := ls.StillHeld(ctx, id, "s"); err == nil {
			t.Fatalf("%s lease: open not refused", id)
		}
	}
	const name = "starlog_leader_opens_refused_total"
	for reason, want := range map[string]float64{"moved": 3, "deleted": 1} {
		got, ok := counterValue(t, reg, name, map[string]string{"reason": reason})
		if !ok || got != want {
			t.Fatalf("%s{reason=%q} = %v (exported %v), want %v", name, reason, got, ok, want)
		}
	}
}

// loseFirstLeasePut makes the first conditional write of a lease lose its
// CAS: a racing writer puts the same lease just before it.
type loseFirstLeasePut struct {
	meta.Store
	raced atomic.Bool
}

func (s *loseFirstLeasePut) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	if sk == meta.LeaseKey("").SK && s.raced.CompareAndSwap(false, true) {
		if _, err := s.Store.Put(ctx, pk, sk, val, meta.Always()); err != nil {
			return 0, err
		}
	}
	return s.Store.Put(ctx, pk, sk, val, cond)
}

// A retire whose CAS of the lease lost to another writer is counted, and
// the retire goes on from the lease it finds.
func TestRetireLostCounted(t *testing.T) {
	ctx := context.Background()
	ls, ms, reg := testLeadership(t, func(s meta.Store) meta.Store { return &loseFirstLeasePut{Store: s} })
	if err := ls.Retire(ctx, "gone", "s", func(string) {}); err != nil {
		t.Fatalf("retire: %v", err)
	}
	l, _, ok, err := leader.ReadLease(ctx, ms, "gone")
	if err != nil || !ok || !l.Deleted {
		t.Fatalf("lease after the retire: %+v ok %v err %v, want retired", l, ok, err)
	}
	const name = "starlog_leader_lease_retires_lost_total"
	if got, ok := counterValue(t, reg, name, nil); !ok || got != 1 {
		t.Fatalf("%s = %v (exported %v), want 1", name, got, ok)
	}
}
