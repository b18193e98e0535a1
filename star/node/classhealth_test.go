package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	s3store "github.com/starlog/starlog/shared/objstore/s3"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/expressfront"
	svcstores "github.com/starlog/starlog/shared/testsvc/stores"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// Issue 26 defect 9: a star started against Express buckets that refuse
// every request (a failed CreateSession, a 403: definite refusals) left an
// append to an express stream unanswered for over 20 s: each halted epoch
// recovered at once (the own fence gives up on the buckets, the mint needs
// only the metastore) and the next halted in turn. Now the express append
// is answered 503 within the flight deadline plus the recovery deadline
// while a Standard stream on the same star acks throughout; new express
// appends are refused at once (nothing sequenced); /health stays 200 and
// names the class; starlog_storage_class_degraded{class="express"} is 1;
// and once the buckets answer again the class heals without a restart.
func TestRefusingExpressBucketsDegradeTheClass(t *testing.T) {
	ctx := context.Background()
	inner, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	objs := faults.Wrap(inner)
	refusing := []string{"express-a", "express-b", "express-c"}
	for _, b := range refusing { // refusing before the star starts
		objs.FailRate(b, 1, faults.Definite)
	}
	// A flight deadline (and so a recovery deadline) above the own
	// fence's 1 s wait for unanswering buckets, as in production (5 s):
	// every recovery ends within it.
	const flight = 1500 * time.Millisecond
	cfg := testConfig()
	cfg.Express.FlightDeadline = flight
	n := openOn(t, testsvc.SQLite(t), objs, cfg)
	srv, err := server.New(n, server.Options{Auth: auth.Open()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one"}, ""); err != nil {
		t.Fatal(err)
	}
	express := api.StorageExpress
	if _, err := n.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "exp", Config: &api.StreamConfig{StorageClass: &express}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "std"}, ""); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = n.Append(actx, "basin-one", "exp", records("held", 2), nil)
	took := time.Since(start)
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(actx.Err(), context.DeadlineExceeded) {
		t.Fatalf("express append unanswered after %v", took)
	}
	e := apiErr(t, err, 503, api.CodeUnavailable)
	if !strings.Contains(e.Message, "may or may not become durable") {
		t.Fatalf("a sequenced append's answer must be indefinite: %q", e.Message)
	}
	if bound := 2 * flight; took > bound+2*time.Second {
		t.Fatalf("express append answered after %v, bound %v", took, bound)
	}
	t.Logf("express append answered 503 after %v (bound %v)", took, 2*flight)

	// The Standard class on the same star is unaffected.
	if _, err := n.Append(ctx, "basin-one", "std", records("std", 3), nil); err != nil {
		t.Fatalf("standard append while express is degraded: %v", err)
	}
	// A new express append is refused at once, before it is sequenced.
	t0 := time.Now()
	_, err = n.Append(ctx, "basin-one", "exp", records("new", 1), nil)
	e = apiErr(t, err, 503, api.CodeUnavailable)
	if !strings.Contains(e.Message, "nothing was sequenced") || !strings.Contains(e.Message, "express") {
		t.Fatalf("a refused new append must say nothing was sequenced and name the class: %q", e.Message)
	}
	if d := time.Since(t0); d > 500*time.Millisecond {
		t.Fatalf("new express append refused after %v, want at once", d)
	}
	status, body := getHealth(t, hs.URL)
	if status != 200 || !strings.Contains(body["degraded"], "express") || strings.Contains(body["degraded"], "standard") {
		t.Fatalf("/health while express is degraded: %d %v (want 200 naming express only)", status, body)
	}
	if err := n.Healthy(); err != nil {
		t.Fatalf("Healthy with one class degraded: %v", err)
	}
	if v := classGauge(t, n, "starlog_storage_class_degraded", "express"); v != 1 {
		t.Fatalf("starlog_storage_class_degraded{class=express} = %v, want 1", v)
	}
	if v := classGauge(t, n, "starlog_storage_class_degraded", "standard"); v != 0 {
		t.Fatalf("starlog_storage_class_degraded{class=standard} = %v, want 0", v)
	}

	// The buckets answer again: the class heals without a restart.
	for _, b := range refusing {
		objs.ClearFaults(b)
	}
	var ack api.AppendAck
	poll.UntilErr(t, 20*time.Second, "express appends after the buckets healed", func() (err error) {
		ack, err = n.Append(ctx, "basin-one", "exp", records("after", 1), nil)
		return err
	})
	// The append answered 503 kept its seq nums and committed once the
	// buckets took writes.
	if ack.Start.SeqNum != 2 {
		t.Fatalf("first append after healing at %d, want 2", ack.Start.SeqNum)
	}
	if got := readAll(t, n, "basin-one", "exp"); len(got) != 3 {
		t.Fatalf("express stream holds %d records after healing, want 3", len(got))
	}
	status, body = getHealth(t, hs.URL)
	if status != 200 || body["degraded"] != "" {
		t.Fatalf("/health after healing: %d %v", status, body)
	}
	if v := classGauge(t, n, "starlog_storage_class_degraded", "express"); v != 0 {
		t.Fatalf("starlog_storage_class_degraded{class=express} = %v after healing, want 0", v)
	}
}

// getHealth returns /health's status and its body's fields (the degraded
// map flattened to its JSON text).
func getHealth(t *testing.T, url string) (int, map[string]string) {
	t.Helper()
	res, err := http.Get(url + "/health")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("/health body %s: %v", raw, err)
	}
	out := map[string]string{}
	for k, v := range m {
		out[k] = string(v)
	}
	return res.StatusCode, out
}

// classGauge is the gauge name{class}.
func classGauge(t *testing.T, n *node.Node, name, class string) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabel(m, "class", class) {
				return gaugeOf(m)
			}
		}
	}
	t.Fatalf("no %s{class=%q}", name, class)
	return 0
}

func gaugeOf(m *dto.Metric) float64 { return m.GetGauge().GetValue() }

// /health with degraded classes: one degraded class leaves the star ready
// (200) and names it; every class degraded is not ready (503), since the
// star can commit nothing; a stopped loglet is not ready whatever the
// others do (TestHealthFollowsCommitErr).
func TestHealthNamesDegradedClasses(t *testing.T) {
	st := newStores(t)
	c := clusterConfig("a")
	c.BalanceEvery = 0
	n := openOn(t, st.meta, st.objects, c)
	var std, exp atomic.Pointer[error]
	stand := func(p *atomic.Pointer[error]) func() error {
		return func() error {
			if e := p.Load(); e != nil {
				return *e
			}
			return nil
		}
	}
	n.StandInCommit(meta.Standard, stand(&std))
	n.StandInCommit(meta.Express, stand(&exp))
	srv, err := server.New(n, server.Options{Auth: auth.Open()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)

	if status, body := getHealth(t, hs.URL); status != 200 || body["degraded"] != "" {
		t.Fatalf("/health: %d %v", status, body)
	}
	expDown := fmt.Errorf("%w: the express class has committed no flight for 5s", loglet.ErrUnavailable)
	exp.Store(&expDown)
	if status, body := getHealth(t, hs.URL); status != 200 || !strings.Contains(body["degraded"], `"express":"loglet: cannot commit`) || strings.Contains(body["degraded"], "standard") {
		t.Fatalf("/health with express degraded: %d %v", status, body)
	}
	stdDown := fmt.Errorf("%w: the standard class has committed no flight for 10s", loglet.ErrUnavailable)
	std.Store(&stdDown)
	status, body := getHealth(t, hs.URL)
	if status != 503 || !strings.Contains(body["message"], "every storage class is degraded: standard: ") || !strings.Contains(body["message"], "; express: ") {
		t.Fatalf("/health with both classes degraded: %d %v (want 503 naming both)", status, body)
	}
	exp.Store(nil)
	if status, body := getHealth(t, hs.URL); status != 200 || !strings.Contains(body["degraded"], `"standard"`) || strings.Contains(body["degraded"], "express") {
		t.Fatalf("/health with standard degraded: %d %v", status, body)
	}
	std.Store(nil)
	if status, body := getHealth(t, hs.URL); status != 200 || body["degraded"] != "" {
		t.Fatalf("/health healed: %d %v", status, body)
	}
}

// A star restarted against Express buckets that refuse every request
// could not settle the epoch its earlier incarnation left on its express
// chain, and Open waited for it for good: the star never started, and its
// Standard streams went unserved. Now Open returns within twice the
// express flight deadline with the class degraded: /health is 200 and
// names it, Standard appends ack, express appends are refused at once,
// and once the buckets answer the chain opens and express appends go on
// after the earlier incarnation's acks.
func TestRestartAgainstRefusingExpressBuckets(t *testing.T) {
	ctx := context.Background()
	inner, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	objs := faults.Wrap(inner)
	ms := testsvc.SQLite(t)
	const flight = 500 * time.Millisecond
	cfg := testConfig()
	cfg.Express.FlightDeadline = flight
	n1, err := node.Open(ctx, cfg, node.Deps{Meta: ms, Objects: objs, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := n1.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one"}, ""); err != nil {
		t.Fatal(err)
	}
	express := api.StorageExpress
	for _, s := range []struct {
		name string
		cfg  *api.StreamConfig
	}{{"std", nil}, {"exp", &api.StreamConfig{StorageClass: &express}}} {
		if _, err := n1.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: s.name, Config: s.cfg}, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := n1.Append(ctx, "basin-one", s.name, records(s.name, 2), nil); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	n1.Close(cctx) // a restart: its express epoch stays open on the head
	cancel()

	refusing := []string{"express-a", "express-b", "express-c"}
	for _, b := range refusing {
		objs.FailRate(b, 1, faults.Definite)
	}
	start := time.Now()
	octx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	n2, err := node.Open(octx, cfg, node.Deps{Meta: ms, Objects: objs, Logger: testLog()})
	if err != nil {
		t.Fatalf("restart against refusing express buckets: %v after %v", err, time.Since(start))
	}
	t.Cleanup(func() { n2.Close(context.Background()) })
	if took := time.Since(start); took > 2*flight+3*time.Second {
		t.Fatalf("restart took %v, bound %v", took, 2*flight)
	}
	t.Logf("restarted in %v with the express chain unsettled", time.Since(start))
	srv, err := server.New(n2, server.Options{Auth: auth.Open()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	if status, body := getHealth(t, hs.URL); status != 200 || !strings.Contains(body["degraded"], "express") || strings.Contains(body["degraded"], "standard") {
		t.Fatalf("/health after the restart: %d %v (want 200 naming express)", status, body)
	}
	if v := classGauge(t, n2, "starlog_storage_class_degraded", "express"); v != 1 {
		t.Fatalf("starlog_storage_class_degraded{class=express} = %v, want 1", v)
	}
	ack, err := n2.Append(ctx, "basin-one", "std", records("std-after", 1), nil)
	if err != nil {
		t.Fatalf("standard append after the restart: %v", err)
	}
	if ack.Start.SeqNum != 2 {
		t.Fatalf("standard append after the restart at %d, want 2", ack.Start.SeqNum)
	}
	t0 := time.Now()
	_, err = n2.Append(ctx, "basin-one", "exp", records("exp-refused", 1), nil)
	if e := apiErr(t, err, 503, api.CodeUnavailable); !strings.Contains(e.Message, "nothing was sequenced") {
		t.Fatalf("express append while its chain opens: %q", e.Message)
	}
	if d := time.Since(t0); d > time.Second {
		t.Fatalf("express append refused after %v, want at once", d)
	}

	for _, b := range refusing {
		objs.ClearFaults(b)
	}
	poll.UntilErr(t, 30*time.Second, "express appends after the buckets healed", func() (err error) {
		ack, err = n2.Append(ctx, "basin-one", "exp", records("exp-after", 1), nil)
		return err
	})
	if ack.Start.SeqNum != 2 {
		t.Fatalf("express append after healing at %d, want 2 (after the earlier incarnation's acks)", ack.Start.SeqNum)
	}
	if status, body := getHealth(t, hs.URL); status != 200 || body["degraded"] != "" {
		t.Fatalf("/health after healing: %d %v", status, body)
	}
}

// The same through the S3 Express stand-in and the production s3 adapter:
// the front's clock is set an hour ahead, so it refuses every request 403
// (CreateSession included: RequestTimeTooSkewed, and the sessions it
// issued have expired by its clock) until it is set back. The Standard
// bucket is a plain versitygw, so only the express class degrades.
func TestExpressFrontRefusingEveryRequest(t *testing.T) {
	ctx := context.Background()
	var skew atomic.Int64 // ns added to the front's clock
	zones := []string{"use1-az4", "use1-az5", "use1-az6"}
	var set []string
	for _, z := range zones {
		set = append(set, testsvc.DirectoryBucket("starlog-express", z))
	}
	e := testsvc.StartExpress(t, testsvc.StartVersity(t, set...), func(c *expressfront.Config) {
		c.Now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	})
	objs := routed{standard: svcstores.S3(t, "standard"), express: svcstores.S3ExpressClient(t, e, e.AccessKey, e.SecretKey), set: set}
	const flight = 1500 * time.Millisecond
	cfg := testConfig()
	cfg.Express.Buckets = set
	cfg.Express.FlightDeadline = flight
	n := openOn(t, testsvc.SQLite(t), objs, cfg)
	srv, err := server.New(n, server.Options{Auth: auth.Open()})
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one"}, ""); err != nil {
		t.Fatal(err)
	}
	express := api.StorageExpress
	for _, s := range []struct {
		name string
		cfg  *api.StreamConfig
	}{{"std", nil}, {"exp", &api.StreamConfig{StorageClass: &express}}} {
		if _, err := n.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: s.name, Config: s.cfg}, ""); err != nil {
			t.Fatal(err)
		}
		if _, err := n.Append(ctx, "basin-one", s.name, records(s.name, 1), nil); err != nil {
			t.Fatalf("%s before the refusal: %v", s.name, err)
		}
	}

	skew.Store(int64(time.Hour))
	refused := e.Front.Stats().Refused
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = n.Append(actx, "basin-one", "exp", records("held", 1), nil)
	took := time.Since(start)
	if actx.Err() != nil {
		t.Fatalf("express append unanswered after %v", took)
	}
	if e := apiErr(t, err, 503, api.CodeUnavailable); !strings.Contains(e.Message, "may or may not become durable") {
		t.Fatalf("a sequenced append's answer must be indefinite: %q", e.Message)
	}
	if bound := 2 * flight; took > bound+3*time.Second {
		t.Fatalf("express append answered after %v, bound %v", took, bound)
	}
	now := e.Front.Stats().Refused
	var more int
	for code, k := range now {
		more += k - refused[code]
	}
	if more == 0 {
		t.Fatalf("the front refused nothing: %v", now)
	}
	t.Logf("express append answered 503 after %v (bound %v); the front refused %v", took, 2*flight, now)
	if _, err := n.Append(ctx, "basin-one", "std", records("std", 1), nil); err != nil {
		t.Fatalf("standard append while express is degraded: %v", err)
	}
	_, err = n.Append(ctx, "basin-one", "exp", records("new", 1), nil)
	if e := apiErr(t, err, 503, api.CodeUnavailable); !strings.Contains(e.Message, "nothing was sequenced") {
		t.Fatalf("new express append: %q", e.Message)
	}
	if status, body := getHealth(t, hs.URL); status != 200 || !strings.Contains(body["degraded"], "express") {
		t.Fatalf("/health: %d %v", status, body)
	}
	if v := classGauge(t, n, "starlog_storage_class_degraded", "express"); v != 1 {
		t.Fatalf("starlog_storage_class_degraded{class=express} = %v, want 1", v)
	}

	skew.Store(0)
	var ack api.AppendAck
	poll.UntilErr(t, 30*time.Second, "express appends after the front took requests again", func() (err error) {
		ack, err = n.Append(ctx, "basin-one", "exp", records("after", 1), nil)
		return err
	})
	if ack.Start.SeqNum != 2 {
		t.Fatalf("express append after healing at %d, want 2", ack.Start.SeqNum)
	}
	if v := classGauge(t, n, "starlog_storage_class_degraded", "express"); v != 0 {
		t.Fatalf("starlog_storage_class_degraded{class=express} = %v after healing, want 0", v)
	}
	// The S3 store's session counts are exported (their counting is
	// shared/objstore/s3's TestExpressRefusedSessionIsReplaced).
	for _, name := range []string{"starlog_s3_express_sessions_refused_total", "starlog_s3_express_sessions_reopened_total"} {
		v, ok := counterValue(t, n, name)
		if !ok {
			t.Fatalf("no %s on the star's registry", name)
		}
		t.Logf("%s = %v", name, v)
	}
}

// counterValue is the value of the unlabelled counter name in n's
// registry, and whether it is there.
func counterValue(t *testing.T, n *node.Node, name string) (float64, bool) {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetCounter().GetValue(), true
		}
	}
	return 0, false
}

// routed sends the express bucket set to one store and every other bucket
// to another.
type routed struct {
	standard, express objstore.Store
	set               []string
}

// SessionStats sums the two stores' S3 Express session counts (the
// star exports them when its store keeps them).
func (r routed) SessionStats() s3store.SessionStats {
	var sum s3store.SessionStats
	for _, st := range []objstore.Store{r.standard, r.express} {
		if s, ok := st.(interface{ SessionStats() s3store.SessionStats }); ok {
			c := s.SessionStats()
			sum.Refused += c.Refused
			sum.Reopened += c.Reopened
		}
	}
	return sum
}

func (r routed) Bucket(name string) objstore.Bucket {
	if slices.Contains(r.set, name) {
		return r.express.Bucket(name)
	}
	return r.standard.Bucket(name)
}
