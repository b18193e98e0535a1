package loglet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/streams"
)

// Issue 26 defect 9: a class whose buckets refuse every request (a failed
// CreateSession, a 403: definite refusals, not an outage that hangs).
// Each halted epoch recovered at once (the own fence gives up on buckets
// that do not answer, and the mint touches only the metastore), so the
// recovery deadline never passed and an append waited forever, epoch
// after epoch. Now the deadline runs from the first halt since the last
// commit: the waiting append is answered ErrUnavailable (indefinite: its
// batch stays and commits once the store takes writes) within the flight
// deadline plus the recovery deadline, new appends are refused at once
// (definite), the class reports itself degraded, and it heals without a
// restart when the buckets answer again.
func TestRefusingBucketsDegradeTheClass(t *testing.T) {
	const flight, recovery = 200 * time.Millisecond, 400 * time.Millisecond
	h := refusingHarness(t, flight, recovery)
	s := h.stream("a")
	ctx := context.Background()
	if _, err := s.Append(ctx, batch("a", 0, 2)); err != nil {
		t.Fatal(err)
	}
	refuse := func() {
		for _, z := range zones {
			h.store.FailRate(z, 1, faults.Definite)
		}
	}
	refuse()
	start := time.Now()
	tk, err := s.Submit(ctx, batch("a", 1, 2))
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = tk.Wait(wctx)
	took := time.Since(start)
	if !errors.Is(err, loglet.ErrUnavailable) {
		t.Fatalf("append to a class whose buckets refuse everything: %v after %v (want ErrUnavailable)", err, took)
	}
	// The bound: the flight deadline to the halt, the recovery deadline
	// from there (and slack for a loaded machine).
	if bound := flight + recovery; took > bound+time.Second {
		t.Fatalf("answered after %v, bound %v", took, bound)
	}
	if err := h.loglet.CommitErr(); !errors.Is(err, loglet.ErrUnavailable) {
		t.Fatalf("CommitErr of the degraded class: %v", err)
	}
	if v := metricValue(h.reg, "starlog_storage_class_degraded"); v != 1 {
		t.Fatalf("starlog_storage_class_degraded = %v, want 1", v)
	}
	t0 := time.Now()
	if _, err := s.Submit(ctx, batch("a", 2, 1)); !errors.Is(err, loglet.ErrUnavailable) {
		t.Fatalf("new append to the degraded class: %v (want a definite ErrUnavailable)", err)
	}
	if d := time.Since(t0); d > 100*time.Millisecond {
		t.Fatalf("new append refused after %v, want at once", d)
	}
	// It stays degraded while the buckets refuse: recoveries come and go
	// (each mints an epoch) but no commit lands.
	e0 := h.loglet.Epoch()
	poll.Until(t, 20*time.Second, "two more recoveries while the buckets refuse", func() bool { return h.loglet.Epoch() >= e0+2 })
	if err := h.loglet.CommitErr(); !errors.Is(err, loglet.ErrUnavailable) {
		t.Fatalf("CommitErr while the buckets still refuse: %v", err)
	}

	for _, z := range zones {
		h.store.ClearFaults(z)
	}
	poll.Until(t, 20*time.Second, "the class to heal", func() bool { return h.loglet.CommitErr() == nil })
	if v := metricValue(h.reg, "starlog_storage_class_degraded"); v != 0 {
		t.Fatalf("starlog_storage_class_degraded = %v after healing, want 0", v)
	}
	ack, err := s.Append(wctx, batch("a", 3, 1))
	if err != nil {
		t.Fatal(err)
	}
	// The answered batch kept its seq nums and committed once the store
	// took writes: the new append lands after it, and the rows are dense.
	if ack.Start.SeqNum != 4 {
		t.Fatalf("append after healing at %d, want 4", ack.Start.SeqNum)
	}
	h.checkRows(map[string]uint64{"a": 5})
}

// A class refusing from its first flight (a star started against buckets
// that refuse everything) answers the same way.
func TestRefusingFromTheStart(t *testing.T) {
	const flight, recovery = 200 * time.Millisecond, 400 * time.Millisecond
	h := refusingHarness(t, flight, recovery)
	for _, z := range zones {
		h.store.FailRate(z, 1, faults.Definite)
	}
	s := h.stream("a")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var tickets []*streams.Ticket
	for i := range 3 {
		tk, err := s.Submit(ctx, batch("a", i, 1))
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	start := time.Now()
	for i, tk := range tickets {
		if _, err := tk.Wait(ctx); !errors.Is(err, loglet.ErrUnavailable) {
			t.Fatalf("append %d: %v after %v (want ErrUnavailable)", i, err, time.Since(start))
		}
	}
	if took, bound := time.Since(start), flight+recovery; took > bound+time.Second {
		t.Fatalf("answered after %v, bound %v", took, bound)
	}
	for _, z := range zones {
		h.store.ClearFaults(z)
	}
	poll.Until(t, 20*time.Second, "the class to heal", func() bool { return h.loglet.CommitErr() == nil })
	if _, err := s.Append(ctx, batch("a", 3, 1)); err != nil {
		t.Fatal(err)
	}
	h.checkRows(map[string]uint64{"a": 4})
}

// refusingHarness is a harness whose own fence gives up on a bucket that
// does not answer well within the recovery deadline, as in production
// (1 s against 5 s for Express): each recovery then ends before the
// deadline.
func refusingHarness(t *testing.T, flight, recovery time.Duration) *harness {
	return newHarnessWith(t, "mem", func(c *loglet.Config) {
		c.FlightDeadline = flight
		c.RecoveryDeadline = recovery
	}, recovery/8)
}

// A star restarted against buckets that refuse every request cannot
// settle the epoch its earlier incarnation left open (the fence waits for
// a bucket that answers), and Open used to wait for it for good: the star
// never started, not even for its other class. With OpenWait, Open returns
// after it with the loglet opening: degraded (appends refused at once,
// CommitErr, the gauge), and it opens by itself once the buckets answer:
// the earlier incarnation's acks are settled and the stream goes on after
// them.
func TestRestartAgainstRefusingBucketsOpensLater(t *testing.T) {
	h := refusingHarness(t, 200*time.Millisecond, 400*time.Millisecond)
	s := h.stream("a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := range 2 {
		if _, err := s.Append(ctx, batch("a", i, 2)); err != nil {
			t.Fatal(err)
		}
	}
	h.loglet.Close() // a crash: its epoch stays open on the head
	for _, z := range zones {
		h.store.FailRate(z, 1, faults.Definite)
	}
	h.cfg.Incarnation = chain.Incarnation(h.cfg.Star, 2)
	h.cfg.OpenWait = 300 * time.Millisecond
	h.reg = prometheus.NewRegistry()
	start := time.Now()
	h.open()
	if took := time.Since(start); took > h.cfg.OpenWait+time.Second {
		t.Fatalf("Open took %v with OpenWait %v", took, h.cfg.OpenWait)
	}
	if err := h.loglet.CommitErr(); !errors.Is(err, loglet.ErrUnavailable) {
		t.Fatalf("CommitErr of a loglet still opening: %v", err)
	}
	if v := metricValue(h.reg, "starlog_storage_class_degraded"); v != 1 {
		t.Fatalf("starlog_storage_class_degraded = %v while opening, want 1", v)
	}
	s = h.stream("a")
	t0 := time.Now()
	if _, err := s.Submit(ctx, batch("a", 9, 1)); !errors.Is(err, loglet.ErrUnavailable) {
		t.Fatalf("append while opening: %v (want a definite ErrUnavailable)", err)
	}
	if d := time.Since(t0); d > 100*time.Millisecond {
		t.Fatalf("append refused after %v, want at once", d)
	}

	for _, z := range zones {
		h.store.ClearFaults(z)
	}
	poll.Until(t, 20*time.Second, "the loglet to open", func() bool { return h.loglet.CommitErr() == nil })
	if v := metricValue(h.reg, "starlog_storage_class_degraded"); v != 0 {
		t.Fatalf("starlog_storage_class_degraded = %v once open, want 0", v)
	}
	if h.loglet.Epoch() != 2 {
		t.Fatalf("epoch %d once open, want 2", h.loglet.Epoch())
	}
	// The stream opens on the settled rows (the star's open gate would
	// have waited for the same settle): it goes on after the 4 acks.
	s = h.stream("a")
	ack, err := s.Append(ctx, batch("a", 2, 1))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Start.SeqNum != 4 {
		t.Fatalf("append after opening at %d, want 4", ack.Start.SeqNum)
	}
	h.checkRows(map[string]uint64{"a": 5})
}

// An append waiting for pool budget when the class degrades is refused
// then (definite: nothing was sequenced), not when its own wait ends: the
// pool holds batches that are answered but kept, and is not drained while
// the store refuses.
func TestPoolWaiterRefusedWhenTheClassDegrades(t *testing.T) {
	const flight, recovery = 200 * time.Millisecond, 400 * time.Millisecond
	h := newHarnessWith(t, "mem", func(c *loglet.Config) {
		c.FlightDeadline = flight
		c.RecoveryDeadline = recovery
		c.Window = 1
		c.PoolBudget = 2 << 10
	}, recovery/8)
	for _, z := range zones {
		h.store.FailRate(z, 1, faults.Definite)
	}
	s := h.stream("a")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	big := func(i int) facade.Request {
		return facade.Request{Records: []facade.Input{{Body: make([]byte, 600+i)}}}
	}
	var tickets []*streams.Ticket
	start := time.Now()
	for i := 0; ; i++ {
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		tk, err := s.Submit(sctx, big(i))
		scancel()
		if err != nil {
			if !errors.Is(err, loglet.ErrUnavailable) {
				t.Fatalf("append %d waiting for pool budget: %v after %v (want ErrUnavailable when the class degrades)", i, err, time.Since(start))
			}
			if len(tickets) < 2 {
				t.Fatalf("refused after %d appends: the pool never filled", len(tickets))
			}
			break
		}
		tickets = append(tickets, tk)
	}
	if took, bound := time.Since(start), flight+recovery; took > bound+time.Second {
		t.Fatalf("the waiting append was refused after %v, bound %v", took, bound)
	}
	for i, tk := range tickets {
		if _, err := tk.Wait(ctx); !errors.Is(err, loglet.ErrUnavailable) {
			t.Fatalf("sequenced append %d: %v (want ErrUnavailable)", i, err)
		}
	}
}

// An opening attempt that fails at once (here the metastore refuses) is
// retried beside the star, with backoff, until one succeeds.
func TestOpeningRetriesAFailedAttempt(t *testing.T) {
	h := newHarness(t, nil)
	s := h.stream("a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.Append(ctx, batch("a", 0, 2)); err != nil {
		t.Fatal(err)
	}
	h.loglet.Close()
	h.meta.SetUnavailable(true)
	h.cfg.Incarnation = chain.Incarnation(h.cfg.Star, 2)
	h.cfg.OpenWait = 2 * time.Second
	h.reg = prometheus.NewRegistry()
	start := time.Now()
	h.open()
	if took := time.Since(start); took > time.Second {
		t.Fatalf("Open took %v although its first attempt failed at once", took)
	}
	if err := h.loglet.CommitErr(); !errors.Is(err, loglet.ErrUnavailable) {
		t.Fatalf("CommitErr of a loglet still opening: %v", err)
	}
	h.meta.SetUnavailable(false)
	poll.Until(t, 10*time.Second, "the loglet to open", func() bool { return h.loglet.CommitErr() == nil })
	s = h.stream("a")
	ack, err := s.Append(ctx, batch("a", 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	if ack.Start.SeqNum != 2 {
		t.Fatalf("append after opening at %d, want 2", ack.Start.SeqNum)
	}
	h.checkRows(map[string]uint64{"a": 3})
}

// The epoch records its writer's pass bound, so a successor's walk passes
// no more slots than the writer would (chainsettle).
func TestEpochRecordsThePassBound(t *testing.T) {
	h := newHarness(t, func(c *loglet.Config) { c.BacklogFlights = 4096 })
	hd, _, ok, err := h.chain.Head(context.Background())
	if err != nil || !ok {
		t.Fatalf("head: %v %v", ok, err)
	}
	rec, _, err := h.chain.Epoch(context.Background(), hd.Epoch)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Params.PassSlots != 2048 {
		t.Fatalf("epoch %d records a pass bound of %d slots, want 2048 (half the backlog)", hd.Epoch, rec.Params.PassSlots)
	}
}
