package server_test

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/server"
)

var subsBenchWindow = flag.Duration("subs.window", 20*time.Second, "BenchmarkSubscriptionDriving: how long each row counts (after one audit period of warm-up)")

// kindCounter counts metastore requests by operation and by the kind of
// row (the SK's prefix in the Durable Streams partition: u# subscription,
// s# stream; "other" for starlog's own rows).
type kindCounter struct {
	meta.Store
	mu sync.Mutex
	n  map[string]int
}

func newKindCounter(s meta.Store) *kindCounter { return &kindCounter{Store: s, n: map[string]int{}} }

func rowKind(pk, sk string) string {
	if !strings.HasPrefix(pk, "ds#") {
		return "other"
	}
	switch {
	case strings.HasPrefix(sk, "u#"):
		return "sub"
	case strings.HasPrefix(sk, "s#"):
		return "stream"
	}
	return "other"
}

func (c *kindCounter) add(op, kind string) {
	c.mu.Lock()
	c.n[op+" "+kind]++
	c.mu.Unlock()
}

func (c *kindCounter) take() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = map[string]int{}
	return n
}

func (c *kindCounter) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	c.add("get", rowKind(pk, sk))
	return c.Store.Get(ctx, pk, sk)
}

func (c *kindCounter) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	c.add("put", rowKind(pk, sk))
	return c.Store.Put(ctx, pk, sk, val, cond)
}

func (c *kindCounter) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	c.add("query", rowKind(q.PK, q.From))
	return c.Store.Query(ctx, q)
}

// BenchmarkSubscriptionDriving measures what idle subscriptions cost to
// drive: S subscriptions, each linking one Durable Streams stream of its
// own, on a cluster of N stars sharing one SQLite metastore, nothing
// appended. After one audit period of warm-up it counts, for
// -subs.window, the metastore requests by operation and row kind and the
// Durable Streams HEADs every star served, and reports them per second
// of the default audit period (10 s; the run audits every second, so
// each figure is divided by ten). Run: make bench-subs.
func BenchmarkSubscriptionDriving(b *testing.B) {
	const audit = time.Second
	for _, stars := range []int{1, 3} {
		for _, subs := range []int{100, 1000} {
			b.Run(fmt.Sprintf("stars=%d/subs=%d", stars, subs), func(b *testing.B) {
				for range b.N {
					driveIdle(b, stars, subs, audit)
				}
			})
		}
	}
}

func driveIdle(b *testing.B, nstars, nsubs int, audit time.Duration) {
	objs := memObjects(b)
	ms := newKindCounter(testsvc.SQLite(b))
	ac := auth.Config{AdminToken: testAdmin, InternalKey: []byte(testKey)}
	var envs []*env
	for i := range nstars {
		envs = append(envs, starServing(b, fmt.Sprintf("star-%d", i), ms, objs, nil, server.Options{Auth: ac,
			Durable: &durable.Config{SubscriptionAudit: audit, LongPoll: time.Second}}))
	}
	e := envs[0]
	hdr := append(bearer(testAdmin), "Content-Type", "application/json")
	for i := range nsubs {
		name := fmt.Sprintf("bench/s%05d", i)
		if r := e.call("PUT", "/ds/"+name, nil, append(bearer(testAdmin), "Content-Type", "text/plain")...); r.status != 201 {
			b.Fatalf("create %s: %s", name, r)
		}
		sub := jsonBody(map[string]any{"type": "webhook", "streams": []string{name},
			"webhook": map[string]string{"url": "https://hooks.example.com/w"}})
		if r := e.call("PUT", fmt.Sprintf("/ds/__ds/subscriptions/sub-%05d", i), sub, hdr...); r.status != 201 {
			b.Fatalf("create subscription %d: %s", i, r)
		}
	}
	time.Sleep(audit + audit/2)
	heads := func() float64 {
		n := 0.0
		for _, s := range envs {
			n += s.metric("starlog_durable_requests_total", "op", "head")
		}
		return n
	}
	h0 := heads()
	ms.take()
	b.ResetTimer()
	time.Sleep(*subsBenchWindow)
	b.StopTimer()
	n := ms.take()
	h := heads() - h0
	// Per second at the default audit (10 s): the run audits 10x as often.
	scale := float64(audit) / float64(durable.DefaultSubscriptionAudit) / subsBenchWindow.Seconds()
	b.ReportMetric(float64(n["get sub"])*scale, "sub-gets/s")
	b.ReportMetric(float64(n["put sub"])*scale, "sub-puts/s")
	b.ReportMetric(float64(n["query sub"])*scale, "sub-queries/s")
	b.ReportMetric(float64(n["get stream"])*scale, "stream-gets/s")
	b.ReportMetric(h*scale, "heads/s")
	b.ReportMetric(0, "ns/op")
}
