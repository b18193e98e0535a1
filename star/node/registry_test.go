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
	time.Sleep(10 * c.HeartbeatEvery)
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
