package reader

import (
	"context"
	"sort"
	"strconv"
	"sync"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// Prefetch defaults (Config).
const (
	DefaultPrefetchBudget    = 256 << 20
	DefaultPrefetchWindow    = 32 << 20
	DefaultPrefetchMinWindow = 2 << 20
	DefaultPrefetchGets      = 32
)

// budget is the star-wide bound on the bytes readers' prefetch windows
// hold (ranged GETs in flight plus data fetched ahead of the reader). It
// never blocks: a reader that finds it spent reads on demand, one GET at a
// time, until others give bytes back.
type budget struct {
	mu       sync.Mutex
	capacity int64
	used     int64
	readers  int // prefetches catching up: the budget's shares
	m        *metrics
}

func (b *budget) tryAcquire(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.capacity {
		return false
	}
	b.used += n
	b.m.prefetchBytes.Set(float64(b.used))
	return true
}

func (b *budget) release(n int64) {
	b.mu.Lock()
	b.used -= n
	b.m.prefetchBytes.Set(float64(b.used))
	b.mu.Unlock()
}

// join and leave count a reader among those sharing the budget.
func (b *budget) join()  { b.mu.Lock(); b.readers++; b.mu.Unlock() }
func (b *budget) leave() { b.mu.Lock(); b.readers--; b.mu.Unlock() }

// share is one catching-up reader's fair part of the budget.
func (b *budget) share() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.capacity / int64(max(b.readers, 1))
}

// inUse reports the bytes held (tests).
func (b *budget) inUse() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.used
}

// unit is one object range fetched ahead: a slot ref's extent or a chunk
// of a settled object, holding seqs below end.
type unit struct {
	key  string // the extent or chunk cache key
	end  uint64
	cost int64
	done chan struct{}
	recs []format.Record // set before done closes, nil on failure
	used bool            // the reader took recs
}

// Prefetch is one catching-up reader's read-ahead: it keeps a window of
// ranged GETs in flight past the seq the reader's last Read ended at, so a
// cold read waits for the object store once per window rather than once
// per extent. The window starts at PrefetchMinWindow, doubles with every
// batch that ends with more to read (StopBatch), is capped by
// PrefetchWindow and the reader's fair share of PrefetchBudget, and drops
// to nothing when a read reaches the tail: a tailing reader is served from
// the tail window and prefetches nothing. Close it when the read ends:
// that frees its window. Safe for one reader (its Reads in sequence) and
// its own background work.
type Prefetch struct {
	r      *Reader
	stream Stream
	ctx    context.Context
	cancel context.CancelFunc
	wake   chan struct{}
	wg     sync.WaitGroup

	mu       sync.Mutex
	closed   bool
	catching bool   // joined the budget's shares
	window   int64  // current target before the budget's share
	held     int64  // cost of units not yet passed by the reader
	maxHeld  int64  // the most ever held (tests)
	limit    int64  // the window held was last checked against (tests)
	consumed uint64 // the seq the reader continues from
	frontier uint64 // the seq the next unit starts at
	units    []*unit
	inflight int
	rows     cursor // the planner's
	// walkRows is the reader's row cursor, kept between its Reads so a
	// session does not look its row up again every batch (its own, not
	// the planner's: they run concurrently).
	walkRows cursor
}

// NewPrefetch returns a read-ahead for one reader of stream, or nil when
// prefetch is disabled (PrefetchBudget < 0). A nil *Prefetch reads without
// read-ahead.
func (r *Reader) NewPrefetch(stream Stream) *Prefetch {
	if r.budget == nil {
		return nil
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Prefetch{r: r, stream: stream, ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1),
		rows:     cursor{q: rows{r: r, id: stream.ID}, page: r.cfg.RowPage},
		walkRows: cursor{q: rows{r: r, id: stream.ID}, page: r.cfg.RowPage}}
	// A reader is made a read-ahead when it is catching up: it takes its
	// share of the budget at once, so readers opened together share it
	// evenly from the first GET.
	p.catching, p.window = true, r.cfg.PrefetchMinWindow
	r.budget.join()
	p.wg.Add(1)
	go p.plan()
	return p
}

// Read is Reader.Read with read-ahead: records fetched ahead are served
// from the window, and the window moves past the batch returned.
func (p *Prefetch) Read(ctx context.Context, start Start, lim Limits, tail *Tail) (Result, error) {
	if p == nil {
		return Result{}, errNilPrefetch
	}
	res, err := p.r.read(ctx, p.stream, start, lim, tail, p)
	if err == nil {
		p.advance(res)
	}
	return res, err
}

var errNilPrefetch = errorString("reader: Read on a nil Prefetch")

type errorString string

func (e errorString) Error() string { return string(e) }

// Close stops the read-ahead and gives its window back to the budget.
// Idempotent.
func (p *Prefetch) Close() {
	if p == nil {
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	p.mu.Unlock()
	p.cancel()
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.dropAll()
	if p.catching {
		p.catching = false
		p.r.budget.leave()
	}
}

// ready returns the records of unit key when they were fetched ahead.
func (p *Prefetch) ready(key string) ([]format.Record, bool) {
	if p == nil {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, u := range p.units {
		if u.key == key {
			select {
			case <-u.done:
				if u.recs != nil {
					u.used = true
					return u.recs, true
				}
			default:
			}
			return nil, false // in flight: the cache's single flight joins it
		}
	}
	return nil, false
}

// advance moves the window past a Read's result and resizes it.
func (p *Prefetch) advance(res Result) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	if res.Next < p.consumed || res.Next > p.frontier {
		// A seek, or the reader outran the window: plan from here.
		p.dropAll()
		p.frontier = res.Next
		p.rows.reset()
	}
	p.consumed = res.Next
	p.releaseBelow(res.Next)
	switch res.Stop {
	case StopBatch:
		if !p.catching {
			p.catching = true
			p.r.budget.join()
			p.window = p.r.cfg.PrefetchMinWindow
		} else {
			p.window = min(2*p.window, p.r.cfg.PrefetchWindow)
		}
	default:
		// At the tail, or the read's own limit ends it: nothing to fetch
		// ahead.
		p.window = 0
		if p.catching {
			p.catching = false
			p.r.budget.leave()
		}
	}
	p.poke()
}

func (p *Prefetch) poke() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// releaseBelow gives back the units the reader has passed. Callers hold mu.
func (p *Prefetch) releaseBelow(seq uint64) {
	i := 0
	for i < len(p.units) && p.units[i].end <= seq {
		p.release(p.units[i])
		i++
	}
	p.units = p.units[i:]
}

// dropAll gives back every unit. Callers hold mu.
func (p *Prefetch) dropAll() {
	for _, u := range p.units {
		p.release(u)
	}
	p.units = nil
}

func (p *Prefetch) release(u *unit) {
	p.held -= u.cost
	p.r.budget.release(u.cost)
	select {
	case <-u.done:
		switch {
		case u.recs == nil:
			p.r.m.prefetchUnits.WithLabelValues("failed").Inc()
		case u.used:
			p.r.m.prefetchUnits.WithLabelValues("used").Inc()
		default:
			p.r.m.prefetchUnits.WithLabelValues("unused").Inc()
		}
		u.recs = nil
	default:
		p.r.m.prefetchUnits.WithLabelValues("unfinished").Inc()
	}
}

// plan is the read-ahead's loop: on every move of the reader and every
// finished GET, it issues the next units while the window has room.
func (p *Prefetch) plan() {
	defer p.wg.Done()
	for {
		select {
		case <-p.ctx.Done():
			return
		case <-p.wake:
		}
		for p.ctx.Err() == nil && p.issueNext() {
		}
	}
}

// issueNext issues the unit at the frontier if the window, the GET bound
// and the budget allow; it reports whether it did.
func (p *Prefetch) issueNext() bool {
	p.mu.Lock()
	if p.closed || p.window == 0 || p.inflight >= p.r.cfg.PrefetchGets {
		p.mu.Unlock()
		return false
	}
	at := p.frontier
	p.limit = min(p.window, p.r.budget.share())
	room := p.limit - p.held
	first := p.held == 0
	p.mu.Unlock()
	if room <= 0 && !first {
		return false
	}
	// Looking the unit up takes the metastore and maybe a footer GET:
	// outside mu, so the reader's Reads are never held behind it.
	u, fetch, ok := p.next(at)
	if !ok {
		return false
	}
	// One unit may exceed a small window: a reader holding nothing may
	// always take one, so every reader gets some read-ahead.
	if u.cost > room && !first || !p.r.budget.tryAcquire(u.cost) {
		return false
	}
	p.mu.Lock()
	if p.closed || p.frontier != at {
		p.mu.Unlock()
		p.r.budget.release(u.cost) // the reader moved meanwhile
		return !p.closed
	}
	p.units = append(p.units, u)
	p.held += u.cost
	p.maxHeld = max(p.maxHeld, p.held)
	p.frontier = u.end
	p.inflight++
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		recs, err := fetch(p.ctx)
		if err == nil {
			u.recs = recs
		}
		close(u.done)
		p.mu.Lock()
		p.inflight--
		p.mu.Unlock()
		p.poke()
	}()
	return true
}

// next finds the unit holding seq at: the slot ref extent or settled
// chunk of the row covering it, with the fetch that loads it through the
// caches. ok is false when no row covers at (the read-ahead reached the
// rows' end) or a lookup failed (the reader's own read reports it).
func (p *Prefetch) next(at uint64) (*unit, func(context.Context) ([]format.Record, error), bool) {
	l, err := p.rows.locate(p.ctx, at)
	if err != nil || l.kind != covered {
		p.rows.reset() // look again next time: the absorb writes rows
		return nil, nil, false
	}
	row := l.row
	if row.Span != nil {
		sl := row.Span.Slots
		i := sort.Search(len(sl), func(i int) bool { return sl[i].FirstSeq+sl[i].Count > at })
		if i == len(sl) {
			return nil, nil, false
		}
		s := sl[i]
		end := s.FirstSeq + s.Count
		p.rows.continuing = end == row.EndSeq
		sp := row.Span
		return &unit{key: extentKey(sp, s), end: end, cost: int64(s.Length), done: make(chan struct{})},
			func(ctx context.Context) ([]format.Record, error) { return p.r.extent(ctx, sp, s) }, true
	}
	st := row.Settled
	if st.Trimmed {
		return nil, nil, false // no record to read ahead: the reader skips the row
	}
	key := SettledKey(p.stream.Basin, p.stream.ID, st.Epoch, st.FirstSeq, st.Revision)
	f, err := p.r.footer(p.ctx, key, st.Bytes)
	if err != nil {
		return nil, nil, false
	}
	e, ok := f.Find(at)
	if !ok {
		return nil, nil, false
	}
	size := uint64(p.r.cfg.SettledChunkBytes)
	c := chunkOf(e, size)
	i, j := chunkEntries(f, size, c)
	if i == j {
		return nil, nil, false
	}
	first, last := f.Entries[i], f.Entries[j-1]
	end := min(last.EndSeq(), row.EndSeq)
	p.rows.continuing = end == row.EndSeq
	return &unit{key: chunkKey(key, c), end: end, cost: int64(last.Offset + uint64(last.Length) - first.Offset), done: make(chan struct{})},
		func(ctx context.Context) ([]format.Record, error) { return p.r.chunk(ctx, key, f, c) }, true
}

// extentKey and chunkKey are the cache keys of a slot ref's extent and a
// settled object's chunk.
func extentKey(sp *meta.Span, sl meta.SlotRef) string {
	return chain.SlotKey(sp.Star, sp.Class, sp.Epoch, sl.Slot) + "@" + strconv.FormatUint(sl.Offset, 10) + "+" + strconv.FormatUint(sl.Length, 10)
}

func chunkKey(objKey string, c uint64) string { return objKey + "#" + strconv.FormatUint(c, 10) }

// prefetchStats is what a read-ahead holds (tests).
type prefetchStats struct {
	held, maxHeld, limit, window int64
	inflight                     int
	frontier                     uint64
}

func (p *Prefetch) stats() prefetchStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return prefetchStats{held: p.held, maxHeld: p.maxHeld, limit: p.limit, window: p.window, inflight: p.inflight, frontier: p.frontier}
}
