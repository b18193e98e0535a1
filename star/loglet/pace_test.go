package loglet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/streams"
)

// appendFor keeps every stream appending for d, one batch in flight each,
// and returns the acknowledged end of each.
func appendFor(t *testing.T, h *harness, ids []string, d time.Duration) map[string]uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var mu sync.Mutex
	acked := map[string]uint64{}
	var wg sync.WaitGroup
	for _, id := range ids {
		s := h.stream(id)
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				tk, err := s.Submit(ctx, bigBatch(id, i, 512, 2))
				if err != nil {
					return
				}
				ack, err := tk.Wait(context.Background())
				if err != nil {
					t.Errorf("stream %s: %v", id, err)
					return
				}
				mu.Lock()
				acked[id] = ack.End.SeqNum
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return acked
}

// With a write budget, the absorb's metastore writes stay within it
// however many streams a pass carries: without one, passes run every
// AbsorbInterval and write a ref per stream each (40 streams at 10 passes
// a second: about 420 writes a second). A slow machine only makes fewer
// passes, so the bound holds however loaded it is.
func TestAbsorbWritesStayWithinTheBudget(t *testing.T) {
	const budget, nStreams = 20.0, 40
	pacer := loglet.NewPacer(budget)
	h := newHarness(t, func(c *loglet.Config) {
		c.FlushInterval = 20 * time.Millisecond
		c.TargetFlight = 1 << 20 // flights cut by the flush interval: at most 50 a second
		c.Pacer = pacer
	})
	var ids []string
	for i := range nStreams {
		ids = append(ids, fmt.Sprintf("s%02d", i))
	}
	for _, id := range ids {
		h.stream(id) // opened (and their rows written) before counting
	}
	h.meta.ResetCounts()
	start := time.Now()
	acked := appendFor(t, h, ids, 3*time.Second)
	writes := h.meta.Counts().Writes()
	elapsed := time.Since(start)
	// One pass may run before its writes are charged (the debt is paid
	// after it), and one more may be running as the count is read.
	bound := budget*elapsed.Seconds() + 2*float64(nStreams+3)
	t.Logf("%d metastore writes in %v with %d streams: %.1f/s (budget %.0f/s, bound %.0f writes)",
		writes, elapsed.Round(time.Millisecond), nStreams, float64(writes)/elapsed.Seconds(), budget, bound)
	if float64(writes) > bound {
		t.Fatalf("%d metastore writes in %v: more than the budget's %.0f", writes, elapsed, bound)
	}
	if n := plainCounter(h, "starlog_absorb_pressured_passes_total"); n != 0 {
		t.Fatalf("%v passes ran under backlog pressure with a backlog of %d flights", n, h.cfg.BacklogFlights)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := h.loglet.AwaitAbsorbed(wctx); err != nil {
		t.Fatal(err)
	}
	h.checkRows(acked)
}

// A budget too small for the stream count does not let the backlog bind
// in steady state: once half of it is taken, passes run at the minimum
// interval (counted as pressured). When even that cannot keep up, the
// backlog stall names absorb_lagging, never the metastore.
func TestAbsorbBudgetYieldsToTheBacklog(t *testing.T) {
	h := newHarness(t, func(c *loglet.Config) {
		c.FlushInterval = 5 * time.Millisecond
		c.BacklogFlights = 16
		c.AbsorbInterval = time.Second
		c.SlowMetaOp = 10 * time.Second // a loaded machine's metastore is not slow here
		c.Pacer = loglet.NewPacer(0.01)
	})
	ids := []string{"a", "b", "c", "d"}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var acked map[string]uint64
	done := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(done)
		var ss []*streams.Stream
		for _, id := range ids {
			ss = append(ss, h.stream(id))
		}
		acked = map[string]uint64{}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			for j, s := range ss {
				tk, err := s.Submit(ctx, bigBatch(ids[j], i, 512, 2))
				if err != nil {
					return
				}
				ack, err := tk.Wait(ctx)
				if err != nil {
					t.Errorf("stream %s: %v", ids[j], err)
					return
				}
				acked[ids[j]] = ack.End.SeqNum
			}
		}
	}()
	poll.UntilErr(t, 50*time.Second, "two pressured passes and a backlog stall blamed on the absorb", func() error {
		if plainCounter(h, "starlog_absorb_pressured_passes_total") < 2 || counter(h, "starlog_backlog_stalls_total", loglet.CauseAbsorbLagging) == 0 {
			return fmt.Errorf("pressured passes %v, backlog stalls absorb_lagging %v, metastore_slow %v",
				plainCounter(h, "starlog_absorb_pressured_passes_total"), counter(h, "starlog_backlog_stalls_total", loglet.CauseAbsorbLagging),
				counter(h, "starlog_backlog_stalls_total", loglet.CauseMetastoreSlow))
		}
		return nil
	})
	if n := counter(h, "starlog_backlog_stalls_total", loglet.CauseMetastoreSlow); n != 0 {
		t.Fatalf("%v backlog stalls blamed on the metastore", n)
	}
	close(stop)
	<-done
	if err := h.loglet.AwaitAbsorbed(ctx); err != nil {
		t.Fatal(err)
	}
	h.checkRows(acked)
}

func plainCounter(h *harness, name string) float64 {
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	var v float64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
		}
	}
	return v
}

// refRows counts the span refs of ids now in the metastore.
func refRows(t *testing.T, h *harness, ids []string) int {
	t.Helper()
	n := 0
	for _, id := range ids {
		q := meta.Query{PK: "stream#" + id, From: meta.RefPrefix, To: meta.RefPrefix + "~"}
		for {
			pg, err := h.meta.Query(context.Background(), q)
			if err != nil {
				t.Fatal(err)
			}
			n += len(pg.Items)
			if pg.Next == "" {
				break
			}
			q.PageToken = pg.Next
		}
	}
	return n
}

// Every span ref a pass writes costs a second write later, when the settle
// that covers it deletes it (shared/settle: one delete per covered ref), so
// the budget is charged for both: the absorb's writes plus the deletes its
// refs will take stay within it. Charged for the put alone, a star at
// density wrote its budget in refs and the settle as many again in deletes
// (issue 31: the whole star dev at 1,000 streams, twice the budget).
func TestAbsorbWritesAndTheirSettleDeletesStayWithinTheBudget(t *testing.T) {
	const budget, nStreams = 200.0, 40 // passes about 0.2 s apart: a dozen in the run
	h := newHarness(t, func(c *loglet.Config) {
		c.FlushInterval = 20 * time.Millisecond
		c.TargetFlight = 1 << 20
		c.Pacer = loglet.NewPacer(budget)
	})
	var ids []string
	for i := range nStreams {
		ids = append(ids, fmt.Sprintf("s%02d", i))
	}
	for _, id := range ids {
		h.stream(id)
	}
	refs0 := refRows(t, h, ids)
	h.meta.ResetCounts()
	start := time.Now()
	appendFor(t, h, ids, 3*time.Second)
	writes := h.meta.Counts().Writes()
	elapsed := time.Since(start)
	deletes := refRows(t, h, ids) - refs0 // each is a settle's delete to come
	bound := budget*elapsed.Seconds() + 2*float64(2*nStreams+3)
	t.Logf("%d absorb writes and %d span refs for the settle to delete in %v: %.1f/s (budget %.0f/s, bound %.0f)",
		writes, deletes, elapsed.Round(time.Millisecond), float64(writes+int64(deletes))/elapsed.Seconds(), budget, bound)
	if float64(writes)+float64(deletes) > bound {
		t.Fatalf("%d absorb writes and %d deletes to come in %v: more than the budget's %.0f", writes, deletes, elapsed, bound)
	}
}
