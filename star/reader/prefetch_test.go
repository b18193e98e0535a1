package reader

import (
	"context"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
)

// prefetchStream builds stream id of 1 KiB records: [0,320) and [320,640)
// in two settled objects of 16-record blocks, then [640,768) in span refs
// of eight standard flights. It returns the largest unit (block or
// extent) in bytes.
func prefetchStream(f *fixture, id string) int64 {
	f.t.Helper()
	f.body = 1000
	f.recs(id, 640)
	var maxUnit int64
	for _, first := range []uint64{0, 320} {
		row := f.settled(id, 1, first, first+320, 16, 0)
		f.putRef(id, row)
		for _, e := range warmFooter(f, f.reader(Config{Registerer: noReg()}), id, first).Entries {
			maxUnit = max(maxUnit, int64(e.Length))
		}
	}
	for range 8 {
		s := f.flight(meta.Standard, 1, []string{stdBucket}, f.batch(id, 16))
		for _, rw := range f.absorb(meta.Standard, 1, s) {
			for _, sl := range rw.Ref.Span.Slots {
				maxUnit = max(maxUnit, int64(sl.Length))
			}
		}
	}
	return maxUnit
}

// warmFooter loads the footer of the settled object of id at first into
// r's cache (its GET is not at offset 0, which blockPrefetch holds).
func warmFooter(f *fixture, r *Reader, id string, first uint64) *format.SettledFooter {
	f.t.Helper()
	k := meta.RefKey(id, first)
	it, err := f.meta.Get(f.ctx, k.PK, k.SK)
	if err != nil {
		f.t.Fatal(err)
	}
	var row meta.Ref
	if err := meta.Decode(it.Val, &row); err != nil {
		f.t.Fatal(err)
	}
	ft, err := r.footer(f.ctx, SettledKey(testBasin, id, 1, first, 0), row.Settled.Bytes)
	if err != nil {
		f.t.Fatal(err)
	}
	return ft
}

// gauge reads a gauge of the fixture's registry.
func (f *fixture) gauge(name string) float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	f.t.Fatalf("no gauge %s", name)
	return 0
}

// prefetchConfig reads settled objects one block per chunk, so units are
// blocks, in small batches.
func prefetchConfig(budget, window, minWindow int64, batch int) Config {
	return Config{SettledChunkBytes: 1, MaxBatchBytes: batch,
		PrefetchBudget: budget, PrefetchWindow: window, PrefetchMinWindow: minWindow}
}

// filled reports that a read-ahead has stopped issuing: nothing in flight
// and no room for another unit, or the rows' end reached.
func filled(p *Prefetch, maxUnit int64, end uint64) bool {
	s := p.stats()
	return s.limit > 0 && s.inflight == 0 && (s.held > s.limit-maxUnit || s.frontier == end)
}

func TestPrefetchHoldsAtMostItsWindow(t *testing.T) {
	f := newFixture(t)
	f.epoch(meta.Standard, 1, stdBucket)
	maxUnit := prefetchStream(f, "p")
	const window = 128 << 10
	r := f.reader(prefetchConfig(1<<20, window, 32<<10, 24<<10))
	stream := Stream{ID: "p", Basin: testBasin}
	p := r.NewPrefetch(stream)
	defer p.Close()
	end := uint64(len(f.truth["p"]))
	var got []Result
	next := uint64(0)
	grew := false
	for next < end {
		res, err := p.Read(f.ctx, AtSeq(next), Limits{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		f.want("p", res.Records, next, res.Next)
		got = append(got, res)
		next = res.Next
		// Nothing consumes while the read-ahead fills: it stops at its
		// window, which grows batch by batch up to the cap.
		poll.Until(t, 20*time.Second, "the read-ahead to fill", func() bool { return filled(p, maxUnit, end) })
		s := p.stats()
		if s.held > s.limit || s.limit > window {
			t.Fatalf("after seq %d: holds %d bytes, window %d (cap %d)", next, s.held, s.limit, window)
		}
		if s.limit == window && s.held > window-maxUnit {
			grew = true
		}
		if b := r.budget.inUse(); b != s.held {
			t.Fatalf("budget in use %d, the one reader holds %d", b, s.held)
		}
	}
	if s := p.stats(); s.maxHeld > window || !grew {
		t.Fatalf("most held %d (window %d), reached the window: %v", s.maxHeld, window, grew)
	}
	if used := f.counter("starlog_reader_prefetch_units_total", "result", "used"); used == 0 {
		t.Fatal("no unit fetched ahead was used")
	}
	// At the tail the window closes and everything is given back.
	res, err := p.Read(f.ctx, AtSeq(end), Limits{}, f.tail("p", end))
	if err != nil || res.Stop != StopCaughtUp {
		t.Fatalf("read at the tail: %v, stop %s", err, res.Stop)
	}
	if s := p.stats(); s.window != 0 || s.held != 0 || r.budget.inUse() != 0 {
		t.Fatalf("at the tail: window %d, holds %d, budget in use %d", s.window, s.held, r.budget.inUse())
	}
	if len(got) < 10 {
		t.Fatalf("only %d batches", len(got))
	}
}

// blockPrefetch makes every settled GET past an object's first block wait
// for its context: a reader's first small batch is served, its read-ahead
// hangs in flight.
func blockPrefetch(f *fixture) {
	f.objs.mu.Lock()
	f.objs.block = func(ctx context.Context, _, key string, off int64) error {
		if off == 0 {
			return nil
		}
		<-ctx.Done()
		return ctx.Err()
	}
	f.objs.mu.Unlock()
}

func TestPrefetchCloseFreesWindow(t *testing.T) {
	f := newFixture(t)
	f.epoch(meta.Standard, 1, stdBucket)
	maxUnit := prefetchStream(f, "p")
	r := f.reader(prefetchConfig(1<<20, 256<<10, 256<<10, 4<<10))
	warmFooter(f, r, "p", 0)
	warmFooter(f, r, "p", 320)
	blockPrefetch(f)
	p := r.NewPrefetch(Stream{ID: "p", Basin: testBasin})
	res, err := p.Read(f.ctx, AtSeq(0), Limits{}, nil)
	if err != nil || res.Stop != StopBatch {
		t.Fatalf("first batch: %v, stop %s", err, res.Stop)
	}
	poll.Until(t, 20*time.Second, "GETs in flight ahead", func() bool {
		s := p.stats()
		return s.inflight > 0 && s.held > s.limit-maxUnit
	})
	if g := f.gauge("starlog_reader_prefetch_bytes"); g == 0 || int64(g) != r.budget.inUse() {
		t.Fatalf("gauge %v, budget in use %d", g, r.budget.inUse())
	}
	done := make(chan struct{})
	go func() { p.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Close did not return with GETs hanging")
	}
	if b := r.budget.inUse(); b != 0 {
		t.Fatalf("budget in use after Close: %d", b)
	}
	if g := f.gauge("starlog_reader_prefetch_bytes"); g != 0 {
		t.Fatalf("gauge after Close: %v", g)
	}
	if r.budget.share() != r.cfg.PrefetchBudget {
		t.Fatalf("share after Close %d, want the whole budget %d", r.budget.share(), r.cfg.PrefetchBudget)
	}
	p.Close() // idempotent
}

func TestPrefetchBudgetShared(t *testing.T) {
	f := newFixture(t)
	f.epoch(meta.Standard, 1, stdBucket)
	ids := []string{"a", "b", "c", "d"}
	var maxUnit int64
	for _, id := range ids {
		maxUnit = max(maxUnit, prefetchStream(f, id))
	}
	const budget = 256 << 10
	r := f.reader(prefetchConfig(budget, 1<<20, 1<<20, 4<<10))
	for _, id := range ids {
		warmFooter(f, r, id, 0)
		warmFooter(f, r, id, 320)
	}
	blockPrefetch(f)
	ps := make([]*Prefetch, len(ids))
	for i, id := range ids {
		ps[i] = r.NewPrefetch(Stream{ID: id, Basin: testBasin})
		defer ps[i].Close()
	}
	for i := range ids {
		if _, err := ps[i].Read(f.ctx, AtSeq(0), Limits{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	share := int64(budget / len(ids))
	for i, p := range ps {
		// Its GETs hang: it has filled its share once another unit would
		// not fit.
		poll.Until(t, 20*time.Second, "reader "+ids[i]+" to fill its share", func() bool {
			s := p.stats()
			return s.limit > 0 && s.held > s.limit-maxUnit
		})
	}
	var sum int64
	for i, p := range ps {
		s := p.stats()
		if s.limit != share || s.held > share || s.held <= share-maxUnit {
			t.Fatalf("reader %s holds %d of its share %d (window %d)", ids[i], s.held, share, s.limit)
		}
		sum += s.held
	}
	if b := r.budget.inUse(); b != sum || b > budget {
		t.Fatalf("budget in use %d, readers hold %d, budget %d", b, sum, budget)
	}
	ps[0].Close()
	ps[1].Close()
	if b := r.budget.inUse(); b != ps[2].stats().held+ps[3].stats().held {
		t.Fatalf("after two closed: budget in use %d", b)
	}
	if got := r.budget.share(); got != budget/2 {
		t.Fatalf("share with two readers %d, want %d", got, budget/2)
	}
	ps[2].Close()
	ps[3].Close()
	if b := r.budget.inUse(); b != 0 {
		t.Fatalf("budget in use after every reader closed: %d", b)
	}
}

func TestPrefetchDisabled(t *testing.T) {
	f := newFixture(t)
	r := f.reader(Config{PrefetchBudget: -1})
	if p := r.NewPrefetch(Stream{ID: "x", Basin: testBasin}); p != nil {
		t.Fatal("a negative budget still prefetches")
	}
}

// A read whose start is in the tail window (a live session woken by a
// release) is served from memory: no metastore query.
func TestTailReadSkipsMetastore(t *testing.T) {
	f := newFixture(t)
	f.epoch(meta.Standard, 1, stdBucket)
	f.absorb(meta.Standard, 1, f.flight(meta.Standard, 1, []string{stdBucket}, f.batch("t", 10)))
	f.recs("t", 5) // released, not absorbed: only in the window
	r := f.reader(Config{})
	before := f.counter("starlog_reader_meta_queries_total")
	res := f.read(r, "t", AtSeq(12), Limits{}, f.tail("t", 10))
	f.want("t", res.Records, 12, 15)
	if res.Stop != StopCaughtUp {
		t.Fatalf("stop %s", res.Stop)
	}
	if q := f.counter("starlog_reader_meta_queries_total") - before; q != 0 {
		t.Fatalf("%v metastore queries for a read inside the tail window", q)
	}
	// Below the window the rows are read as before.
	res = f.read(r, "t", AtSeq(3), Limits{}, f.tail("t", 10))
	f.want("t", res.Records, 3, 15)
	if q := f.counter("starlog_reader_meta_queries_total") - before; q == 0 {
		t.Fatal("a read below the window asked no rows")
	}
}
