package loglet_test

import (
	"context"
	"fmt"

	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle/chainsettle"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/streams"
)

// producer appends to one stream in a loop until stopped, recording every
// error and the slowest ack.
type producer struct {
	mu      sync.Mutex
	acked   uint64
	errs    []error
	slowest time.Duration
	stop    chan struct{}
	done    chan struct{}
}

func produce(s *streams.Stream, id string) *producer {
	p := &producer{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		for i := 0; ; i++ {
			select {
			case <-p.stop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			start := time.Now()
			ack, err := s.Append(ctx, batch(id, i, 1))
			cancel()
			p.mu.Lock()
			if err != nil {
				p.errs = append(p.errs, err)
			} else {
				p.acked = ack.End.SeqNum
				p.slowest = max(p.slowest, time.Since(start))
			}
			p.mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	return p
}

// ackedNow is the producer's last acknowledged tail so far.
func (p *producer) ackedNow() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.acked
}

func (p *producer) finish() (uint64, []error, time.Duration) {
	close(p.stop)
	<-p.done
	return p.acked, p.errs, p.slowest
}

// poisonAhead writes a foreign occupant (a poison nobody fenced with) into
// the slots of the current epoch that no flight holds yet, in one bucket:
// the writer's next slot meets it and halts.
func poisonAhead(t *testing.T, h *harness, bucket string) {
	t.Helper()
	ctx := context.Background()
	epoch := h.loglet.Epoch()
	for s := range uint64(400) {
		key := chain.SlotKey(h.cfg.Star, h.cfg.Class, epoch, s)
		_, err := h.inner.Bucket(bucket).PutIfAbsent(ctx, key, format.EncodePoison(epoch, s, format.Nonce{0xF0}))
		if err != nil && !errors.Is(err, objstore.ErrExists) {
			t.Fatal(err)
		}
	}
}

// Defect 2, the acceptance: Express K=3/W=2 with one zone black-holed for
// the whole test, the epoch halts (a foreign occupant, or a flight
// deadline while a second zone is slow), and the star recovers into the
// next epoch and keeps acking while that zone stays down: the producer
// sees a latency blip, never an error.
func TestHaltWithOneZoneDownRecovers(t *testing.T) {
	for _, cause := range []string{"foreign occupant", "flight deadline"} {
		t.Run(cause, func(t *testing.T) {
			h := newHarnessOn(t, "mem", func(c *loglet.Config) {
				c.FlightDeadline = 300 * time.Millisecond
				c.RecoveryDeadline = 20 * time.Second
			})
			h.store.SetDown("az3", faults.Down{Hang: true})
			s := h.stream("a")
			p := produce(s, "a")
			poll.Until(t, 20*time.Second, "the producer's first ack", func() bool { return p.ackedNow() > 0 })
			switch cause {
			case "foreign occupant":
				// az1 answers a little late, so the writer's az2 copy of the
				// halted slot lands before it halts: the slot then holds a
				// flight copy and the poison, undecidable without az3, and
				// only the writer's knowledge that it never released it
				// lets it cut there.
				h.store.SetSlow("az1", 20*time.Millisecond)
				poisonAhead(t, h, "az1")
			case "flight deadline":
				h.store.SetSlow("az2", 800*time.Millisecond)
				poll.Until(t, 20*time.Second, "a halt on the flight deadline", func() bool { return metricValue(h.reg, "starlog_epoch_halts_total") >= 1 })
				h.store.SetSlow("az2", 0)
			}
			poll.Until(t, 20*time.Second, "a new epoch", func() bool { return h.loglet.Epoch() >= 2 })
			// Acks in the new epoch, az3 still down.
			inNew := p.ackedNow()
			poll.Until(t, 20*time.Second, "acks in the new epoch", func() bool { return p.ackedNow() > inNew })
			acked, errs, slowest := p.finish()
			if len(errs) > 0 {
				t.Fatalf("%d appends failed with one zone down, first: %v", len(errs), errs[0])
			}
			t.Logf("halt by %s with az3 down: recovered into epoch %d, %d records acked, slowest ack %v", cause, h.loglet.Epoch(), acked, slowest)
			if err := h.loglet.CommitErr(); err != nil {
				t.Fatalf("loglet not committing after recovery: %v", err)
			}
			h.store.SetUp("az3")
			h.checkRows(map[string]uint64{"a": acked})
		})
	}
}

// Defect 3: a zombie loglet. A later incarnation of the star settles the
// chain (fencing the zombie's epoch) and mints the next epoch; the
// zombie's next flight meets the fence, its own fence finds the head
// moved on, and it is deposed: the append fails at once with ErrDeposed
// (before: its recovery retried a mint that could never succeed, and the
// append waited forever).
func TestZombieLogletIsDeposed(t *testing.T) {
	h := newHarness(t, nil)
	s := h.stream("a")
	ctx := context.Background()
	for i := range 3 {
		if _, err := s.Append(ctx, batch("a", i, 1)); err != nil {
			t.Fatal(err)
		}
	}
	next := chain.New(h.cfg.Star, h.cfg.Class, chain.Incarnation(h.cfg.Star, 2), h.meta, h.store)
	abs := &absorb.Absorber{Star: h.cfg.Star, Class: h.cfg.Class, Meta: h.meta, Rip: h.cfg.Ripening, UpdateEpoch: next.UpdateEpoch}
	if err := chainsettle.Chain(ctx, next, abs); err != nil {
		t.Fatal(err)
	}
	if ep, err := next.Mint(ctx, meta.EpochParams{Buckets: zones, W: 2, Window: 8}); err != nil || ep.Epoch != 2 {
		t.Fatalf("later incarnation's mint: %+v %v", ep, err)
	}
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	start := time.Now()
	if _, err := s.Append(wctx, batch("a", 3, 1)); !errors.Is(err, loglet.ErrDeposed) {
		t.Fatalf("zombie's append: %v (want ErrDeposed)", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("the zombie answered after %v", d)
	}
	if err := h.loglet.Err(); !errors.Is(err, loglet.ErrDeposed) {
		t.Fatalf("zombie loglet: %v", err)
	}
}

// Defect 4: no seq holes. A render failure after sequencing (at a cut, or
// at the republish after a halt) stops the loglet, failing every batch not
// yet released; it never commits a later batch of a stream above a failed
// one. The durable rows of each stream stay dense, cover every ack, and a
// new incarnation continues right after them.
func TestFailureAfterSequencingLeavesNoHole(t *testing.T) {
	for _, at := range []struct {
		name        string
		epoch, slot uint64
		haltFirst   bool
	}{{"at a cut", 1, 6, false}, {"at a republish", 2, 0, true}} {
		t.Run(at.name, func(t *testing.T) {
			h := newHarnessOn(t, "mem", func(c *loglet.Config) {
				c.FlightDeadline = 200 * time.Millisecond
				c.RecoveryDeadline = 20 * time.Second
				loglet.WithRenderFault(c, func(epoch, slot uint64) error {
					if epoch == at.epoch && slot == at.slot {
						return errors.New("injected render failure")
					}
					return nil
				})
			})
			ss := map[string]*streams.Stream{"a": h.stream("a"), "b": h.stream("b")}
			ctx := context.Background()
			if at.haltFirst {
				for i := range 3 {
					for id, s := range ss {
						if _, err := s.Append(ctx, batch(id, i, 1)); err != nil {
							t.Fatal(err)
						}
					}
				}
				h.store.SetDown("az2", faults.Down{Hang: true})
				h.store.SetDown("az3", faults.Down{Hang: true})
			}
			var tickets []*streams.Ticket
			var ids []string
			for i := range 40 {
				for id, s := range ss {
					tk, err := s.Submit(ctx, bigBatch(id, 100+i, 4<<10, 2))
					if err != nil {
						break
					}
					tickets, ids = append(tickets, tk), append(ids, id)
				}
			}
			if at.haltFirst {
				poll.Until(t, 20*time.Second, "the epoch to halt", func() bool { return metricValue(h.reg, "starlog_epoch_halts_total") >= 1 })
				h.store.SetUp("az2")
				h.store.SetUp("az3")
			}
			acked := map[string]uint64{}
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			failed := 0
			for i, tk := range tickets {
				ack, err := tk.Wait(wctx)
				if err != nil {
					if !errors.Is(err, loglet.ErrDeposed) {
						t.Fatalf("append %d: %v (want ErrDeposed)", i, err)
					}
					failed++
					continue
				}
				acked[ids[i]] = max(acked[ids[i]], ack.End.SeqNum)
			}
			if failed == 0 {
				t.Fatal("the injected render failure failed nothing")
			}
			if !errors.Is(h.loglet.Err(), loglet.ErrDeposed) {
				t.Fatalf("loglet after a render failure: %v", h.loglet.Err())
			}
			ends := h.denseRows([]string{"a", "b"})
			for id, n := range acked {
				if ends[id] < n {
					t.Fatalf("stream %s: rows end at %d below the acked %d", id, ends[id], n)
				}
			}
			// A new incarnation continues right after the durable rows.
			h.cfg.Incarnation = chain.Incarnation(h.cfg.Star, 100) // after denseRows' successor, 99
			loglet.WithRenderFault(&h.cfg, nil)
			h.reg = prometheus.NewRegistry()
			h.open()
			for id, end := range ends {
				ack, err := h.stream(id).Append(ctx, batch(id, 999, 1))
				if err != nil || ack.Start.SeqNum != end {
					t.Fatalf("stream %s after restart: %+v %v (want start %d)", id, ack, err, end)
				}
			}
		})
	}
}

// denseRows settles the chain as a successor would and returns each
// stream's row end, failing unless its rows are contiguous from 0.
func (h *harness) denseRows(ids []string) map[string]uint64 {
	h.t.Helper()
	ctx := context.Background()
	h.loglet.Close()
	succ := chain.New(h.cfg.Star, h.cfg.Class, chain.Incarnation(h.cfg.Star, 99), h.meta, h.store)
	abs := &absorb.Absorber{Star: h.cfg.Star, Class: h.cfg.Class, Meta: h.meta, Rip: h.cfg.Ripening, UpdateEpoch: succ.UpdateEpoch}
	if err := chainsettle.Chain(ctx, succ, abs); err != nil {
		h.t.Fatalf("settle: %v", err)
	}
	ends := map[string]uint64{}
	for _, id := range ids {
		pg, err := h.meta.Query(ctx, meta.Query{PK: "stream#" + id, From: meta.RefPrefix, To: meta.RefPrefix + "~"})
		if err != nil {
			h.t.Fatal(err)
		}
		next := uint64(0)
		for _, it := range pg.Items {
			var r meta.Ref
			if err := meta.Decode(it.Val, &r); err != nil {
				h.t.Fatal(err)
			}
			if r.FirstSeq != next {
				h.t.Fatalf("stream %s: row at %d after end %d: a seq hole", id, r.FirstSeq, next)
			}
			next = r.EndSeq
		}
		ends[id] = next
	}
	return ends
}

// Defect 6: with the absorb stalled (the metastore down), the backlog
// budget binds, not the pool: the pool holds only admitted, uncut bytes,
// so flights keep being released until the backlog is full; then the
// admission stall is counted and logged with its cause.
func TestStalledAbsorbBindsAtTheBacklog(t *testing.T) {
	const flights = 48
	h := newHarness(t, func(c *loglet.Config) {
		c.TargetFlight = 16 << 10
		c.PoolBudget = 256 << 10 // 16 flights: the old accounting filled it first
		c.BacklogFlights = flights
		c.BacklogBytes = 64 << 20
	})
	s := h.stream("a")
	h.meta.SetUnavailable(true)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tickets []*streams.Ticket
	submitted := make(chan struct{})
	go func() {
		defer close(submitted)
		for i := 0; ; i++ {
			tk, err := s.Submit(ctx, bigBatch("a", i, 4<<10, 4))
			if err != nil {
				return
			}
			tickets = append(tickets, tk)
		}
	}()
	poll.UntilErr(t, 20*time.Second, "an admission stall blamed on the metastore", func() error {
		if counter(h, "starlog_admission_stalls_total", loglet.CauseMetastoreSlow) == 0 {
			return fmt.Errorf("none yet: %d flights released; admission stalls absorb_lagging %v, storage_slow %v, ingest_burst %v; backlog stalls metastore_slow %v, absorb_lagging %v",
				h.loglet.Index().Len(), counter(h, "starlog_admission_stalls_total", loglet.CauseAbsorbLagging), counter(h, "starlog_admission_stalls_total", loglet.CauseStorageSlow),
				counter(h, "starlog_admission_stalls_total", loglet.CauseIngestBurst), counter(h, "starlog_backlog_stalls_total", loglet.CauseMetastoreSlow), counter(h, "starlog_backlog_stalls_total", loglet.CauseAbsorbLagging))
		}
		return nil
	})
	if got := h.loglet.Index().Len(); got < flights-h.cfg.Window {
		t.Fatalf("admission stalled with %d flights released; the backlog bound is %d: the pool bound first", got, flights)
	}
	if n := counter(h, "starlog_backlog_stalls_total", loglet.CauseMetastoreSlow); n != 1 {
		t.Fatalf("%v backlog stalls with cause metastore_slow, want 1", n)
	}
	h.meta.SetUnavailable(false)
	cancel()
	<-submitted
	wctx, wcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer wcancel()
	var acked uint64
	for _, tk := range tickets {
		ack, err := tk.Wait(wctx)
		if err != nil {
			t.Fatal(err)
		}
		acked = ack.End.SeqNum
	}
	if err := h.loglet.AwaitAbsorbed(wctx); err != nil {
		t.Fatal(err)
	}
	h.checkRows(map[string]uint64{"a": acked})
}

// A pool stalled behind slow uploads (every slot of the window in flight)
// names the store: storage_slow.
func TestAdmissionStallNamesSlowStorage(t *testing.T) {
	h := newHarness(t, func(c *loglet.Config) {
		c.TargetFlight = 16 << 10
		c.PoolBudget = 128 << 10
		c.Window = 2
	})
	for _, z := range zones {
		h.store.SetSlow(z, 60*time.Millisecond)
	}
	s := h.stream("a")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var tickets []*streams.Ticket
	for i := range 20 {
		tk, err := s.Submit(ctx, bigBatch("a", i, 4<<10, 4))
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	if n := counter(h, "starlog_admission_stalls_total", loglet.CauseStorageSlow); n < 1 {
		t.Fatalf("no storage_slow admission stall (ingest_burst %v)", counter(h, "starlog_admission_stalls_total", loglet.CauseIngestBurst))
	}
	for _, z := range zones {
		h.store.SetSlow(z, 0)
	}
	for _, tk := range tickets {
		if _, err := tk.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

func bigBatch(stream string, i, size, n int) facade.Request {
	req := batch(stream, i, n)
	for j := range req.Records {
		req.Records[j].Body = append(req.Records[j].Body, make([]byte, size)...)
	}
	return req
}

func counter(h *harness, name, cause string) float64 {
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "cause" && l.GetValue() == cause {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
