package node_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/server"
)

// Readiness (issue 11, defect 10): GET /health answers 503 with the
// reason while a loglet cannot commit for a cause other than its buckets
// (a degraded class leaves the star ready: TestHealthNamesDegradedClasses),
// and 200 again once it can. A
// metastore outage leaves the star ready: it still acknowledges, and a
// load balancer that drained every star for it would turn the outage
// into a total one.
func TestHealthFollowsCommitErr(t *testing.T) {
	st := newStores(t)
	ms := mfaults.New(st.meta, 1)
	c := clusterConfig("a")
	c.BalanceEvery = 0
	n := openOn(t, ms, st.objects, c)
	t.Cleanup(func() { ms.SetUnavailable(false) })
	var cond atomic.Pointer[error]
	n.StandInCommit(meta.Express, func() error {
		if p := cond.Load(); p != nil {
			return *p
		}
		return nil
	})
	srv, err := server.New(n, server.Options{Auth: auth.Open()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	health := func(wantStatus int, wantBody string) {
		t.Helper()
		res, err := http.Get(hs.URL + "/health")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != wantStatus || !strings.Contains(string(body), wantBody) {
			t.Fatalf("/health answered %d %s, want %d with %q", res.StatusCode, body, wantStatus, wantBody)
		}
	}
	health(200, `"status":"ok"`)

	halted := errors.New("epoch halted and not recoverable: the object store refuses writes")
	cond.Store(&halted)
	health(503, "express loglet cannot commit: epoch halted and not recoverable: the object store refuses writes")
	cond.Store(nil)
	health(200, `"status":"ok"`)

	// Through a metastore outage longer than the dead-after bound the star
	// stays ready: checked all along, until its heartbeat is that old.
	ms.SetUnavailable(true)
	poll.Until(t, 10*c.DeadAfter, "the outage outlasts the dead-after bound", func() bool {
		health(200, `"status":"ok"`)
		return n.HeartbeatAge() >= 2*c.DeadAfter
	})
	health(200, `"status":"ok"`)
	ms.SetUnavailable(false)
}
