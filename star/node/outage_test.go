package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/node"
)

// outage is one metastore outage scenario: a leads s1, b has forwarded
// to a once, then both lose the metastore for Outage.
type outage struct {
	Heartbeat, DeadAfter, LeaseTTL time.Duration
	Outage                         time.Duration
	// Every paces the producer through a and the forwards through b.
	Every time.Duration
	// Flood, after the paced phase, appends through a without pause
	// until the backlog budget (Budget flights) stalls an append.
	Flood  bool
	Budget int
}

// run plays the scenario on real stores (wall clock or a synctest
// bubble's fake clock) and checks, during the outage: a acknowledges
// every paced append, b keeps naming a as the leader, both stay ready,
// and only a's answers from memory (check-tail) keep the clock guard;
// with Flood, the backlog budget stalls a's appends with the cause
// metastore_slow. After it: both heartbeat again with their incarnations,
// nobody is marked dead or zombied, a's check-tail answers, b forwards
// through fresh resolution, b leads a new stream, and every acknowledged
// record reads back at its seq num.
func (o outage) run(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	aMeta, bMeta := mfaults.New(st.meta, 1), mfaults.New(st.meta, 2)
	cfg := func(id string) node.Config {
		c := clusterConfig(id)
		c.HeartbeatEvery, c.DeadAfter, c.LeaseCacheTTL = o.Heartbeat, o.DeadAfter, o.LeaseTTL
		c.BalanceEvery = 0
		if o.Budget > 0 {
			c.BacklogFlights = o.Budget
		}
		return c
	}
	a := openOn(t, aMeta, st.objects, cfg("a"))
	b := openOn(t, bMeta, st.objects, cfg("b"))
	t.Cleanup(func() { aMeta.SetUnavailable(false); bMeta.SetUnavailable(false) }) // before the closes
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	acked := map[uint64]string{}
	next := uint64(0)
	appendA := func(body string, timeout time.Duration) error {
		actx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		ack, err := a.Append(actx, "basin-one", "s1", &api.AppendInput{Records: []api.Record{{Body: []byte(body)}}}, nil)
		if err != nil {
			return err
		}
		if ack.Start.SeqNum < next {
			t.Fatalf("a acknowledged %q at seq %d, below %d", body, ack.Start.SeqNum, next)
		}
		acked[ack.Start.SeqNum], next = body, ack.End.SeqNum
		return nil
	}
	if err := appendA("before", 5*time.Second); err != nil {
		t.Fatal(err)
	}
	_, err := b.Append(ctx, "basin-one", "s1", records("b", 1), nil)
	if nl := notLeader(t, err); nl.Leader.Star != "a" {
		t.Fatalf("b's leader of s1 before the outage: %+v", nl)
	}
	regA, regB := registration(t, st, "a"), registration(t, st, "b")

	aMeta.SetUnavailable(true)
	bMeta.SetUnavailable(true)
	down := time.Now()
	paced := 0
	for i := 0; time.Since(down) < o.Outage; i++ {
		if err := appendA(fmt.Sprintf("down-%d", i), 5*time.Second); err != nil {
			t.Fatalf("a refused append %d, %v into the metastore outage (dead-after %v): %v", i, time.Since(down).Round(time.Millisecond), o.DeadAfter, err)
		}
		paced++
		_, err := b.Append(ctx, "basin-one", "s1", records("b", 1), nil)
		var nl *node.NotLeaderError
		if !errors.As(err, &nl) || nl.Leader.Star != "a" {
			t.Fatalf("b, %v into the metastore outage, does not forward to a: %v", time.Since(down).Round(time.Millisecond), err)
		}
		if err := a.Healthy(); err != nil {
			t.Fatalf("a not ready %v into the outage, though it acknowledges: %v", time.Since(down).Round(time.Millisecond), err)
		}
		if err := b.Healthy(); err != nil {
			t.Fatalf("b not ready %v into the outage, though it forwards: %v", time.Since(down).Round(time.Millisecond), err)
		}
		time.Sleep(o.Every)
	}
	// Answers from a's memory keep the clock guard: a cut-off leader
	// must not report a tail a successor may have moved past.
	_, err = a.CheckTail(ctx, "basin-one", "s1", nil)
	if e := apiErr(t, err, 503, api.CodeUnavailable); !strings.Contains(e.Message, "not renewed its registration") {
		t.Fatalf("a's check-tail during the outage: %s", e.Message)
	}
	stalled := 0
	if o.Flood {
		for i := 0; ; i++ {
			if i > 4*o.Budget {
				t.Fatalf("%d appends during the outage and none stalled at the backlog budget of %d flights", i, o.Budget)
			}
			err := appendA(fmt.Sprintf("flood-%d", i), 500*time.Millisecond)
			if err == nil {
				continue
			}
			if e := apiErr(t, err, 503, api.CodeUnavailable); !strings.Contains(e.Message, "may or may not be durable") {
				t.Fatalf("flood append %d: %s", i, e.Message)
			}
			stalled = i
			break
		}
		if v := counter(t, a, "starlog_backlog_stalls_total", "cause", "metastore_slow"); v < 1 {
			t.Fatalf("the backlog budget stalled, but starlog_backlog_stalls_total{cause=metastore_slow} is %v", v)
		}
	}
	t.Logf("outage of %v (dead-after %v): a acknowledged %d paced appends and %d more until the budget stalled; b forwarded to a throughout", o.Outage, o.DeadAfter, paced, stalled)

	aMeta.SetUnavailable(false)
	bMeta.SetUnavailable(false)
	up := time.Now()
	for _, s := range []struct {
		id  string
		was meta.Registration
	}{{"a", regA}, {"b", regB}} {
		poll.Until(t, 10*o.DeadAfter, s.id+" heartbeats again", func() bool {
			r := registration(t, st, s.id)
			return r.Incarnation == s.was.Incarnation && r.State == meta.StarLive && time.Since(time.UnixMilli(r.Heartbeat)) < o.DeadAfter/2
		})
	}
	var tail api.StreamPosition
	poll.Until(t, 10*o.DeadAfter, "a answers check-tail again", func() bool {
		tail, err = a.CheckTail(ctx, "basin-one", "s1", nil)
		return err == nil
	})
	if tail.SeqNum < next {
		t.Fatalf("a's tail after the outage %d, below its last ack %d", tail.SeqNum, next)
	}
	if err := appendA("after", 10*o.DeadAfter); err != nil {
		t.Fatalf("a after the outage: %v", err)
	}
	// Long past the lease cache TTL, b still names a, from a resolution
	// made after the metastore came back.
	time.Sleep(2 * o.LeaseTTL)
	_, err = b.Append(ctx, "basin-one", "s1", records("b", 1), nil)
	if nl := notLeader(t, err); nl.Leader.Star != "a" || nl.Leader.Incarnation != regA.Incarnation {
		t.Fatalf("b's leader of s1 after the outage: %+v", nl)
	}
	b.ForgetLeader(streamID(t, st, "s1"))
	_, err = b.Append(ctx, "basin-one", "s1", records("b", 1), nil)
	if nl := notLeader(t, err); nl.Leader.Star != "a" {
		t.Fatalf("b's fresh resolution of s1 after the outage: %+v", nl)
	}
	ack := appendUntil(t, b, "s2", records("s2", 2))
	if ack.Start.SeqNum != 0 {
		t.Fatalf("b's new stream s2 starts at %d", ack.Start.SeqNum)
	}
	_, err = a.Append(ctx, "basin-one", "s2", records("a", 1), nil)
	if nl := notLeader(t, err); nl.Leader.Star != "b" {
		t.Fatalf("a's leader of s2: %+v", nl)
	}
	for _, n := range []*node.Node{a, b} {
		select {
		case <-n.Zombied():
			t.Fatalf("star %s was deposed by the outage", n.StarID())
		default:
		}
	}
	if r := registration(t, st, "a"); r.State != meta.StarLive || r.Incarnation != regA.Incarnation {
		t.Fatalf("a's registration after the outage: %+v", r)
	}
	got := readAll(t, a, "basin-one", "s1")
	for seq, body := range acked {
		if seq >= uint64(len(got)) || string(got[seq].Body) != body {
			t.Fatalf("seq %d: a acknowledged %q; %d records read back", seq, body, len(got))
		}
	}
	t.Logf("converged %v after the metastore came back", time.Since(up).Round(time.Millisecond))
}

// Defect 7 of issue 11: an outage of ten dead-after bounds. The leader
// acknowledges throughout and then up to its backlog budget, whose stall
// names the metastore; the forwarding star keeps forwarding; both
// converge once the metastore is back.
func TestMetastoreOutageKeepsAcking(t *testing.T) {
	outage{
		Heartbeat: 20 * time.Millisecond, DeadAfter: 300 * time.Millisecond, LeaseTTL: 100 * time.Millisecond,
		Outage: 3 * time.Second, Every: 20 * time.Millisecond,
		Flood: true, Budget: 400,
	}.run(t)
}

// The same with the production bounds (heartbeat 10 s, dead-after 30 s,
// lease cache 1 s) and the 120 s outage of the issue, on a fake clock.
func TestMetastoreOutage120s(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		d := node.Defaults()
		outage{
			Heartbeat: d.HeartbeatEvery, DeadAfter: d.DeadAfter, LeaseTTL: d.LeaseCacheTTL,
			Outage: 120 * time.Second, Every: 500 * time.Millisecond,
		}.run(t)
	})
}

// counter sums n's counter name over the series whose label has value.
func counter(t *testing.T, n *node.Node, name, label, value string) float64 {
	t.Helper()
	mfs, err := n.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if hasLabel(m, label, value) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// countingMeta counts the metastore operations made on behalf of a
// context marked by countOps: those of one request, not the heartbeat's
// or the absorb's.
type countingMeta struct{ meta.Store }

type countKey struct{}

func countOps(ctx context.Context, c *atomic.Int64) context.Context {
	return context.WithValue(ctx, countKey{}, c)
}

func (m countingMeta) count(ctx context.Context) {
	if c, ok := ctx.Value(countKey{}).(*atomic.Int64); ok {
		c.Add(1)
	}
}

func (m countingMeta) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	m.count(ctx)
	return m.Store.Get(ctx, pk, sk)
}

func (m countingMeta) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	m.count(ctx)
	return m.Store.Put(ctx, pk, sk, val, cond)
}

func (m countingMeta) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	m.count(ctx)
	return m.Store.Delete(ctx, pk, sk, cond)
}

func (m countingMeta) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	m.count(ctx)
	return m.Store.Query(ctx, q)
}

func (m countingMeta) BatchPut(ctx context.Context, items []meta.Item) error {
	m.count(ctx)
	return m.Store.BatchPut(ctx, items)
}

func (m countingMeta) BatchDelete(ctx context.Context, keys []meta.Key) error {
	m.count(ctx)
	return m.Store.BatchDelete(ctx, keys)
}

// Invariant 6, counted: with warm caches an append costs no metastore
// operation between submit and ack, on the leader and through a star
// that forwards to it, also long after the forward cache's TTL (the
// steady state of a forwarding star).
func TestAckPathTouchesNoMetastore(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	ms := countingMeta{st.meta}
	cfg := func(id string) node.Config {
		c := clusterConfig(id)
		c.LeaseCacheTTL, c.BalanceEvery = 30*time.Millisecond, 0
		return c
	}
	a := openOn(t, ms, st.objects, cfg("a"))
	b := openOn(t, ms, st.objects, cfg("b"))
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", records("warm", 1), nil); err != nil {
		t.Fatal(err)
	}
	_, err := b.Append(ctx, "basin-one", "s1", records("warm", 1), nil)
	notLeader(t, err)

	for i := range 20 {
		var ops atomic.Int64
		actx := countOps(ctx, &ops)
		app, err := a.OpenAppend(actx, "basin-one", "s1", nil)
		if err != nil {
			t.Fatal(err)
		}
		p, err := app.Submit(actx, records(fmt.Sprint(i), 3))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.Wait(actx); err != nil {
			t.Fatal(err)
		}
		if n := ops.Load(); n != 0 {
			t.Fatalf("append %d on the leader: %d metastore operations between submit and ack", i, n)
		}

		ops.Store(0)
		_, err = b.Append(actx, "basin-one", "s1", records(fmt.Sprint(i), 3), nil)
		if nl := notLeader(t, err); nl.Leader.Star != "a" {
			t.Fatalf("b forwards to %+v", nl)
		}
		if n := ops.Load(); n != 0 {
			t.Fatalf("append %d through the forwarding star, %v after it resolved the leader: %d metastore operations", i, time.Duration(i)*20*time.Millisecond, n)
		}
		time.Sleep(20 * time.Millisecond) // past the TTL every other round
	}
}

// refEnd is the end of stream's greatest ref row (0: none).
func refEnd(t *testing.T, st stores, stream string) uint64 {
	t.Helper()
	id := streamID(t, st, stream)
	pg, err := st.meta.Query(context.Background(), meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: "r$", Backward: true, Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(pg.Items) == 0 {
		return 0
	}
	var r meta.Ref
	if err := meta.Decode(pg.Items[0].Val, &r); err != nil {
		t.Fatal(err)
	}
	return r.EndSeq
}

// The clock guard covers what a star answers from its memory and nothing
// else: with its heartbeat writes failing (the metastore still answers
// reads), the leader still acknowledges, serves reads of what the rows
// cover, and refuses (503) check-tail, a read that reaches the tail window
// and a read from a tail offset.
func TestClockGuardOnlyOnMemory(t *testing.T) {
	ctx := context.Background()
	st := newStores(t)
	ms := &writeFailing{Store: st.meta}
	c := clusterConfig("a")
	c.BalanceEvery = 0
	a := openOn(t, ms, st.objects, c)
	t.Cleanup(func() { ms.on.Store(false) }) // before the close
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if _, err := a.Append(ctx, "basin-one", "s1", records(fmt.Sprint(i), 4), nil); err != nil {
			t.Fatal(err)
		}
	}
	poll.Until(t, 5*time.Second, "the absorb covers the appends", func() bool { return refEnd(t, st, "s1") == 12 })
	// Writes fail from now on (heartbeats among them); reads answer.
	ms.on.Store(true)
	poll.Until(t, 10*c.DeadAfter, "a's heartbeat goes stale", func() bool { return a.HeartbeatAge() >= c.DeadAfter })

	ack, err := a.Append(ctx, "basin-one", "s1", records("late", 1), nil)
	if err != nil || ack.Start.SeqNum != 12 {
		t.Fatalf("append with a stale heartbeat: %+v %v", ack, err)
	}
	_, err = a.CheckTail(ctx, "basin-one", "s1", nil)
	apiErr(t, err, 503, api.CodeUnavailable)
	b, err := a.Read(ctx, "basin-one", "s1", api.ReadRequest{From: api.FromSeqNum, Value: 2, Count: api.Uint64(100)}, nil)
	if err != nil || len(b.Records) != 10 || string(b.Records[0].Body) != "0-2" {
		t.Fatalf("read of ref-covered records with a stale heartbeat: %d records, %v", len(b.Records), err)
	}
	_, err = a.Read(ctx, "basin-one", "s1", api.ReadRequest{From: api.FromSeqNum, Value: 12}, nil)
	apiErr(t, err, 503, api.CodeUnavailable)
	_, err = a.Read(ctx, "basin-one", "s1", api.ReadRequest{From: api.FromTailOffset, Value: 1}, nil)
	apiErr(t, err, 503, api.CodeUnavailable)
}

// writeFailing fails every metastore write while on (a throttled table:
// reads answer, heartbeats do not land).
type writeFailing struct {
	meta.Store
	on atomic.Bool
}

var errThrottled = errors.New("test: metastore writes throttled")

func (m *writeFailing) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	if m.on.Load() {
		return 0, errThrottled
	}
	return m.Store.Put(ctx, pk, sk, val, cond)
}

func (m *writeFailing) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	if m.on.Load() {
		return errThrottled
	}
	return m.Store.Delete(ctx, pk, sk, cond)
}

func (m *writeFailing) BatchPut(ctx context.Context, items []meta.Item) error {
	if m.on.Load() {
		return errThrottled
	}
	return m.Store.BatchPut(ctx, items)
}

func (m *writeFailing) BatchDelete(ctx context.Context, keys []meta.Key) error {
	if m.on.Load() {
		return errThrottled
	}
	return m.Store.BatchDelete(ctx, keys)
}
