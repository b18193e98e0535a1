package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
)

func head(t *testing.T, st stores, star string, class meta.Class) meta.Head {
	t.Helper()
	h, _, ok, err := chain.New(star, class, "test", st.meta, st.objects).Head(context.Background())
	if err != nil || !ok {
		t.Fatalf("head of %s/%s: %v %v", star, class, ok, err)
	}
	return h
}

func settleMarker(t *testing.T, st stores, star string, class meta.Class) (meta.SettleDue, bool) {
	t.Helper()
	k := meta.SettleDueKey(star, class)
	it, err := st.meta.Get(context.Background(), k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return meta.SettleDue{}, false
	}
	if err != nil {
		t.Fatal(err)
	}
	var d meta.SettleDue
	if err := meta.Decode(it.Val, &d); err != nil {
		t.Fatal(err)
	}
	return d, true
}

// A graceful close leaves a durable settle marker for each chain whose
// head it leaves unsettled and says stopped; a nudged peer settles both
// chains (head included: the marker's owner never writes again) and
// clears the markers, and the stream it took over reads back whole.
func TestCloseLeavesSettleMarkers(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	a := open(t, st, clusterConfig("a"))
	b := open(t, st, clusterConfig("b"))
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("a", 5), nil); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		h := head(t, st, "a", class)
		d, ok := settleMarker(t, st, "a", class)
		if !ok || d.Owner != "a:1" || d.Epoch != h.Epoch || h.State != meta.HeadOpen {
			t.Fatalf("%s after a's close: marker %+v (%v), head %+v", class, d, ok, h)
		}
	}
	if reg, _, _, err := leader.ReadRegistration(ctx, st.meta, "a"); err != nil || reg.State != meta.StarStopped {
		t.Fatalf("a's registration after close: %+v %v", reg, err)
	}

	if err := b.SettleFor("a", 1); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "a's chains settled and markers cleared", func() bool {
		for _, class := range []meta.Class{meta.Standard, meta.Express} {
			if _, ok := settleMarker(t, st, "a", class); ok || head(t, st, "a", class).State != meta.HeadSettled {
				return false
			}
		}
		return true
	})
	if err := b.SettleFor("b", 1); err == nil {
		t.Fatal("a star settled its own chains on request")
	}
	ack := appendUntil(t, b, "s1", records("b", 1))
	if ack.Start.SeqNum != 5 {
		t.Fatalf("b's first append at %d, want 5", ack.Start.SeqNum)
	}
	if got := readAll(t, b, "basin-one", "s1"); len(got) != 6 {
		t.Fatalf("read back %d records, want 6", len(got))
	}
}
