package node_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/node"
)

// openOn opens a star on its own view ms of the shared metastore.
func openOn(t *testing.T, ms meta.Store, objs objstore.Store, cfg node.Config) *node.Node {
	t.Helper()
	n, err := node.Open(context.Background(), cfg, node.Deps{Meta: ms, Objects: objs, Logger: testLog()})
	if err != nil {
		t.Fatalf("open node %s: %v", cfg.StarID, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Close(ctx)
	})
	return n
}

func registration(t *testing.T, st stores, star string) meta.Registration {
	t.Helper()
	r, _, ok, err := leader.ReadRegistration(context.Background(), st.meta, star)
	if err != nil || !ok {
		t.Fatalf("registration of %s: %v %v", star, ok, err)
	}
	return r
}

// A heartbeat whose write landed but whose reply was lost (what a
// metastore timeout can leave) puts the star's own row one version
// ahead of the one it knows, so its next beat's CAS fails. That is not a
// peer's verdict: the row still names this incarnation, live. The star
// adopts its row and beats on instead of deposing itself.
func TestLostHeartbeatReplyIsNotSuperseded(t *testing.T) {
	st := newStores(t)
	ms := mfaults.New(st.meta, 1)
	c := clusterConfig("a")
	c.BalanceEvery = 0
	a := openOn(t, ms, st.objects, c)
	was := registration(t, st, "a")
	// An idle star writes nothing but its heartbeats.
	ms.FailNext(1, errors.New("reply lost"), mfaults.After, mfaults.OpPut)
	// The first beat after this loses its reply, the next one's CAS fails
	// and adopts the row: wait until beats land past both.
	poll.Until(t, 100*c.HeartbeatEvery, "a beats past the lost reply", func() bool {
		return registration(t, st, "a").Heartbeat >= was.Heartbeat+4*c.HeartbeatEvery.Milliseconds()
	})
	select {
	case <-a.Zombied():
		t.Fatal("a lost heartbeat reply made the star a zombie")
	default:
	}
	r := registration(t, st, "a")
	if r.Incarnation != was.Incarnation || r.State != meta.StarLive || time.Since(time.UnixMilli(r.Heartbeat)) > c.DeadAfter/2 {
		t.Fatalf("registration after a lost heartbeat reply: %+v (was %+v)", r, was)
	}
	if err := a.Healthy(); err != nil {
		t.Fatalf("not ready after a lost heartbeat reply: %v", err)
	}
}

// The registry row says since when the star's heartbeats have landed
// without a gap: its registration at first, unchanged while beats land,
// and the first beat after failed ones once the metastore is back.
// (Peers and the janitor judge a stale star dead only on such a run
// covering a whole dead-after bound after its last beat.)
func TestHeartbeatsRecordTheirRun(t *testing.T) {
	st := newStores(t)
	ms := mfaults.New(st.meta, 1)
	c := clusterConfig("a")
	c.BalanceEvery = 0
	// A gap of half the dead-after bound between landed beats starts a new
	// run by design (a paused process): keep that far above a loaded
	// machine's scheduling stalls, so only the failed beats do.
	c.DeadAfter = 4 * time.Second
	a := openOn(t, ms, st.objects, c)
	first := registration(t, st, "a")
	// beatsPast: beats landed for n periods after the one at from.
	beatsPast := func(from, n int64) func() bool {
		return func() bool { return registration(t, st, "a").Heartbeat >= from+n*c.HeartbeatEvery.Milliseconds() }
	}
	if first.ConnectedSince == 0 || first.ConnectedSince != first.StartedAt {
		t.Fatalf("registration: %+v, want ConnectedSince at StartedAt", first)
	}
	poll.Until(t, 100*c.HeartbeatEvery, "some beats land", beatsPast(first.Heartbeat, 3))
	if r := registration(t, st, "a"); r.Heartbeat <= first.Heartbeat || r.ConnectedSince != first.ConnectedSince {
		t.Fatalf("after some beats: %+v, want the run of %d", r, first.ConnectedSince)
	}
	injected := ms.Counts().Injected
	ms.SetUnavailable(true)
	down := time.Now()
	// Beats fail: the last one written ages past a beat's period, and
	// calls were refused meanwhile (an age alone could be a stall of the
	// heartbeat's goroutine on a loaded machine, which fails no beat and
	// so, shorter than half the bound, starts no run).
	poll.Until(t, 100*c.HeartbeatEvery, "beats fail", func() bool {
		return a.HeartbeatAge() >= 2*c.HeartbeatEvery && ms.Counts().Injected >= injected+2
	})
	ms.SetUnavailable(false)
	poll.Until(t, 5*time.Second, "a beats again", func() bool {
		return registration(t, st, "a").Heartbeat > down.UnixMilli()
	})
	r := registration(t, st, "a")
	if r.ConnectedSince <= down.UnixMilli() || r.ConnectedSince > r.Heartbeat {
		t.Fatalf("after failed beats: %+v, want a run begun after %d", r, down.UnixMilli())
	}
	back := r.ConnectedSince
	poll.Until(t, 100*c.HeartbeatEvery, "more beats land", beatsPast(r.Heartbeat, 3))
	if r := registration(t, st, "a"); r.ConnectedSince != back || r.Heartbeat <= back {
		t.Fatalf("beats after the outage: %+v, want the run of %d", r, back)
	}
}
