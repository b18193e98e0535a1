package loglet_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/fs"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle/chainsettle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/stores"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/streams"
)

var zones = []string{"az1", "az2", "az3"}

type harness struct {
	t      *testing.T
	meta   *mfaults.Store
	reg    *prometheus.Registry
	store  *faults.Store
	inner  objstore.Store // the store behind the fault wrapper
	cfg    loglet.Config
	chain  *chain.Chain
	loglet *loglet.Loglet
	// ownFenceWait, when set, is the chain's OwnFenceWait.
	ownFenceWait time.Duration
}

func quietLog() *slog.Logger {
	if testing.Verbose() {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

var sharedDynamo testsvc.SharedDynamo

func TestMain(m *testing.M) {
	code := m.Run()
	sharedDynamo.Stop()
	os.Exit(code)
}

// backend names the stores a harness runs on: "mem" (mem + SQLite), "fs"
// (directory store + SQLite) or "aws" (the s3 adapter on versitygw and the
// dynamo adapter on DynamoDB Local: the production code paths).
type backend string

var backends = []backend{"mem", "fs", "aws"}

func newHarness(t *testing.T, tweak func(*loglet.Config)) *harness {
	return newHarnessOn(t, "mem", tweak)
}

func newHarnessOn(t *testing.T, b backend, tweak func(*loglet.Config)) *harness {
	t.Helper()
	return newHarnessWith(t, b, tweak, 0)
}

// newHarnessWith is newHarnessOn with the chain's OwnFenceWait (0: its
// default).
func newHarnessWith(t *testing.T, b backend, tweak func(*loglet.Config), ownFenceWait time.Duration) *harness {
	t.Helper()
	var inner objstore.Store
	var ms meta.Store
	switch b {
	case "mem":
		m, err := mem.New(zones...)
		if err != nil {
			t.Fatal(err)
		}
		inner, ms = m, testsvc.SQLite(t)
	case "fs":
		f, err := fs.New(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		for _, z := range zones {
			if err := f.CreateBucket(z); err != nil {
				t.Fatal(err)
			}
		}
		inner, ms = f, testsvc.SQLite(t)
	case "aws":
		inner, ms = stores.S3(t, zones...), stores.Dynamo(t, &sharedDynamo)
	default:
		t.Fatalf("unknown backend %q", b)
	}
	h := &harness{t: t, meta: mfaults.New(ms, 1), reg: prometheus.NewRegistry(), store: faults.Wrap(inner, faults.WithSeed(1)), inner: inner, ownFenceWait: ownFenceWait}
	h.cfg = loglet.Config{
		Star: "star1", Incarnation: chain.Incarnation("star1", 1), Class: meta.Express,
		Buckets: zones, W: 2, Window: 8,
		FlushInterval: time.Millisecond, TargetFlight: 16 << 10, PoolBudget: 8 << 20,
		FlightDeadline: 2 * time.Second,
		Ripening:       absorb.Ripening{Trigger: 8 << 20, Linger: 10 * time.Second, AgeCap: 2 * time.Minute},
	}
	if tweak != nil {
		tweak(&h.cfg)
	}
	h.open()
	return h
}

func (h *harness) open() {
	h.t.Helper()
	h.chain = chain.New(h.cfg.Star, h.cfg.Class, h.cfg.Incarnation, h.meta, h.store)
	h.chain.AttemptTimeout = 200 * time.Millisecond
	h.chain.OwnFenceWait = h.ownFenceWait
	abs := &absorb.Absorber{Star: h.cfg.Star, Class: h.cfg.Class, Meta: h.meta, Rip: h.cfg.Ripening, UpdateEpoch: h.chain.UpdateEpoch}
	l, err := loglet.Open(context.Background(), h.cfg, h.chain, func(ctx context.Context) error { return chainsettle.Chain(ctx, h.chain, abs) }, loglet.NewMetrics(h.reg), quietLog())
	if err != nil {
		h.t.Fatal(err)
	}
	h.loglet = l
	h.t.Cleanup(l.Close)
}

func (h *harness) stream(id string) *streams.Stream {
	h.t.Helper()
	s, err := streams.Open(context.Background(), h.meta, h.loglet, id, h.cfg.Class, facade.Config{})
	if err != nil {
		h.t.Fatal(err)
	}
	return s
}

func batch(stream string, i, n int) facade.Request {
	req := facade.Request{}
	for j := range n {
		req.Records = append(req.Records, facade.Input{Body: fmt.Appendf(nil, "%s/%d/%d", stream, i, j)})
	}
	return req
}

// checkRows settles the chain as a successor would (fence, walk, absorb)
// and checks every stream's rows: contiguous from 0, no overlap, ending at
// want[stream] (the acknowledged count): no ack disowned, no seq twice.
func (h *harness) checkRows(want map[string]uint64) {
	h.t.Helper()
	var ids []string
	for id := range want {
		ids = append(ids, id)
	}
	for id, end := range h.denseRows(ids) {
		if end != want[id] {
			h.t.Fatalf("stream %s: rows end at %d, acknowledged %d", id, end, want[id])
		}
	}
}

// Randomised PUT completion order: every append acks, a stream's acks come
// in seq order with dense seq nums, and after a successor settles the chain
// the rows cover exactly what was acknowledged.
func TestAcksInOrderUnderRandomLatency(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarnessOn(t, b, nil)
			for _, z := range zones {
				h.store.SetLatency(z, faults.Uniform(0, 3*time.Millisecond))
			}
			const nStreams, nBatches, perBatch = 16, 40, 5
			want := map[string]uint64{}
			var wg sync.WaitGroup
			errs := make(chan error, nStreams)
			for i := range nStreams {
				id := fmt.Sprintf("s%02d", i)
				want[id] = nBatches * perBatch
				s := h.stream(id)
				wg.Go(func() {
					ctx := context.Background()
					var tickets []*streams.Ticket
					for b := range nBatches {
						tk, err := s.Submit(ctx, batch(id, b, perBatch))
						if err != nil {
							errs <- err
							return
						}
						tickets = append(tickets, tk)
					}
					for b, tk := range tickets {
						ack, err := tk.Wait(ctx)
						if err != nil {
							errs <- fmt.Errorf("%s batch %d: %w", id, b, err)
							return
						}
						if ack.Start.SeqNum != uint64(b*perBatch) || ack.End.SeqNum != uint64((b+1)*perBatch) {
							errs <- fmt.Errorf("%s batch %d acked [%d,%d)", id, b, ack.Start.SeqNum, ack.End.SeqNum)
							return
						}
						if ack.Tail.SeqNum < ack.End.SeqNum {
							errs <- fmt.Errorf("%s batch %d: tail %d behind end %d", id, b, ack.Tail.SeqNum, ack.End.SeqNum)
							return
						}
					}
				})
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			h.checkRows(want)
		})
	}
}

// Express K=3/W=2 with one zone black-holed: appends keep acking.
func TestOneZoneDownKeepsAcking(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarnessOn(t, b, nil)
			h.store.SetDown("az3", faults.Down{Hang: true})
			s := h.stream("a")
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // liveness, not speed: generous under load
			defer cancel()
			for i := range 50 {
				if _, err := s.Append(ctx, batch("a", i, 2)); err != nil {
					t.Fatalf("append %d with one zone down: %v", i, err)
				}
			}
			if e := h.loglet.Epoch(); e != 1 {
				t.Fatalf("epoch %d: one zone down must not halt", e)
			}
			h.store.SetUp("az3")
			h.checkRows(map[string]uint64{"a": 100})
		})
	}
}

// Two zones down: nothing is released, the epoch halts at the flight
// deadline and cannot be recovered while the zones stay down (no epoch can
// reach W). When the zones return within the recovery deadline, recovery
// fences, mints the next epoch and every pending append acks with its
// original seq nums.
func TestTwoZonesDownHaltThenRecover(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarnessOn(t, b, func(c *loglet.Config) {
				c.FlightDeadline = 150 * time.Millisecond
				c.RecoveryDeadline = time.Minute
			})
			s, tickets := h.twoZonesDownWithPending()
			ctx := context.Background()
			poll.Until(t, 20*time.Second, "the epoch to halt", func() bool { return metricValue(h.reg, "starlog_epoch_halts_total") >= 1 })
			if tail := s.Tail(); tail.SeqNum != 10 {
				t.Fatalf("tail moved to %d with two zones down", tail.SeqNum)
			}
			h.store.SetUp("az2")
			h.store.SetUp("az3")
			wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
			defer cancel()
			for i, tk := range tickets {
				ack, err := tk.Wait(wctx)
				if err != nil {
					t.Fatalf("pending append %d after recovery: %v", i, err)
				}
				if want := uint64(10 + 2*i); ack.Start.SeqNum != want {
					t.Fatalf("pending append %d acked at %d, want its original %d", i, ack.Start.SeqNum, want)
				}
			}
			poll.Until(t, 10*time.Second, "a new epoch", func() bool { return h.loglet.Epoch() >= 2 })
			if _, err := s.Append(ctx, batch("a", 99, 1)); err != nil {
				t.Fatal(err)
			}
			h.checkRows(map[string]uint64{"a": 51})
		})
	}
}

// Defect 10: a storage outage answers rather than hangs. With two zones
// down past the recovery deadline, the waiting appends are answered
// ErrUnavailable (indefinite: their batches stay and commit once the
// zones return, so seq nums stay dense), new appends are refused at once
// with the same error before anything is sequenced, and CommitErr (what
// /health reports) is set until recovery succeeds.
func TestStorageOutageAnswersAppends(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarnessOn(t, b, func(c *loglet.Config) {
				c.FlightDeadline = 150 * time.Millisecond
				c.RecoveryDeadline = 300 * time.Millisecond
			})
			start := time.Now()
			s, tickets := h.twoZonesDownWithPending()
			ctx := context.Background()
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			for i, tk := range tickets {
				if _, err := tk.Wait(wctx); !errors.Is(err, loglet.ErrUnavailable) {
					t.Fatalf("pending append %d during the outage: %v (want ErrUnavailable)", i, err)
				}
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("appends answered after %v", d)
			}
			if err := h.loglet.CommitErr(); !errors.Is(err, loglet.ErrUnavailable) {
				t.Fatalf("CommitErr during the outage: %v", err)
			}
			if _, err := s.Submit(ctx, batch("a", 50, 1)); !errors.Is(err, loglet.ErrUnavailable) {
				t.Fatalf("new append during the outage: %v (want a definite ErrUnavailable)", err)
			}
			h.store.SetUp("az2")
			h.store.SetUp("az3")
			poll.Until(t, 20*time.Second, "recovery", func() bool { return h.loglet.CommitErr() == nil })
			ack, err := s.Append(wctx, batch("a", 99, 1))
			if err != nil {
				t.Fatal(err)
			}
			// The answered batches were kept and committed: the new append
			// lands after them, and the rows are dense.
			if want := uint64(10 + 2*len(tickets)); ack.Start.SeqNum != want {
				t.Fatalf("append after the outage at %d, want %d (the %d answered batches kept their seq nums)", ack.Start.SeqNum, want, len(tickets))
			}
			h.checkRows(map[string]uint64{"a": uint64(11 + 2*len(tickets))})
		})
	}
}

// twoZonesDownWithPending acks 5 batches of 2 records on stream "a", takes
// az2 and az3 down (hanging), and submits 20 more: seqs 10 to 50 pending
// (fewer when the class degrades first: then the rest are refused).
func (h *harness) twoZonesDownWithPending() (*streams.Stream, []*streams.Ticket) {
	h.t.Helper()
	s := h.stream("a")
	ctx := context.Background()
	for i := range 5 {
		if _, err := s.Append(ctx, batch("a", i, 2)); err != nil {
			h.t.Fatal(err)
		}
	}
	h.store.SetDown("az2", faults.Down{Hang: true})
	h.store.SetDown("az3", faults.Down{Hang: true})
	var tickets []*streams.Ticket
	for i := 5; i < 25; i++ {
		tk, err := s.Submit(ctx, batch("a", i, 2))
		if errors.Is(err, loglet.ErrUnavailable) && len(tickets) > 0 {
			// A loaded machine took past the recovery deadline to submit
			// them: the class degraded, as it should, with these pending.
			break
		}
		if err != nil {
			h.t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	return s, tickets
}

// Indefinite PUT outcomes (write done, reply lost; not done) resolve by
// probing: every append acks, and nothing is written twice.
func TestIndefinitePutsResolveByProbe(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarnessOn(t, b, nil)
			for _, z := range zones {
				h.store.FailRate(z, 0.3, faults.LostReply, objstore.OpPut)
			}
			h.store.FailRate("az2", 0.2, faults.NotDone, objstore.OpPut)
			s := h.stream("a")
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			for i := range 40 {
				if _, err := s.Append(ctx, batch("a", i, 3)); err != nil {
					t.Fatalf("append %d: %v", i, err)
				}
			}
			if e := h.loglet.Epoch(); e != 1 {
				t.Fatalf("indefinite outcomes halted the epoch (now %d)", e)
			}
			for _, z := range zones {
				h.store.ClearFaults(z)
			}
			h.checkRows(map[string]uint64{"a": 120})
		})
	}
}

// A foreign fencer deposes the loglet: pending appends fail with the
// indefinite ErrDeposed, and later appends are refused.
func TestForeignFenceDeposes(t *testing.T) {
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			h := newHarnessOn(t, b, nil)
			s := h.stream("a")
			ctx := context.Background()
			for i := range 3 {
				if _, err := s.Append(ctx, batch("a", i, 1)); err != nil {
					t.Fatal(err)
				}
			}
			fencer := chain.New(h.cfg.Star, h.cfg.Class, "star2:1", h.meta, h.store)
			if _, err := fencer.Fence(ctx, h.loglet.Epoch(), false); err != nil {
				t.Fatal(err)
			}
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			_, err := s.Append(wctx, batch("a", 3, 1))
			if !errors.Is(err, loglet.ErrDeposed) {
				t.Fatalf("append after a foreign fence: %v", err)
			}
			if _, err := s.Append(wctx, batch("a", 4, 1)); !errors.Is(err, loglet.ErrDeposed) {
				t.Fatalf("append on a deposed loglet: %v", err)
			}
		})
	}
}

// A slow metastore: the absorb falls behind, publishing blocks at the
// backlog bound and the stall counter names the metastore; once it is fast
// again everything acks and nothing is lost.
func TestSlowMetastoreStallsAtBacklogBound(t *testing.T) {
	h := newHarness(t, func(c *loglet.Config) {
		c.BacklogFlights = 2
		c.TargetFlight = 1 << 10
	})
	h.meta.SetLatency(mfaults.Constant(150*time.Millisecond), mfaults.OpPut, mfaults.OpGet, mfaults.OpQuery)
	s := h.stream("a")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tickets []*streams.Ticket
	for i := range 30 {
		tk, err := s.Submit(ctx, batch("a", i, 4))
		if err != nil {
			t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	poll.UntilErr(t, 10*time.Second, "a metastore_slow stall", func() error {
		if stalls(h, loglet.CauseMetastoreSlow) == 0 {
			return fmt.Errorf("none yet; absorb_lagging=%v", stalls(h, loglet.CauseAbsorbLagging))
		}
		return nil
	})
	if tail := s.Tail().SeqNum; tail >= 120 {
		t.Fatalf("everything acked (tail %d) although the backlog bound is 2 flights", tail)
	}
	h.meta.SetLatency(mfaults.Latency{}, mfaults.OpPut, mfaults.OpGet, mfaults.OpQuery)
	for i, tk := range tickets {
		if _, err := tk.Wait(ctx); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
	}
	h.checkRows(map[string]uint64{"a": 120})
}

func stalls(h *harness, cause string) float64 {
	mfs, err := h.reg.Gather()
	if err != nil {
		h.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "starlog_backlog_stalls_total" {
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
