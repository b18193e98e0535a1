package chainsim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// Model is the sim's writer: star/loglet/run.go's cut, claim, release and
// recover loop, reduced to what the chain sees. One loop claims slots up
// to the window ahead of release, commits each with the real
// chain.Writer, releases strictly in slot order, and on a halt fences its
// own epoch, acks late below the cut, mints the next epoch and republishes
// the rest with the same seqs. It stops for good on chain.ErrDeposed.
type Model struct{}

// ErrDeposed is how a Model run ends when a successor owns the chain.
var ErrDeposed = errors.New("chainsim: writer deposed")

func (Model) Run(ctx context.Context, env WriterEnv) error {
	m := &model{env: env, c: env.Chain, inflight: map[uint64]*flight{}, next: map[string]uint64{}}
	return m.run(ctx)
}

type flight struct {
	epoch, slot uint64
	batches     []format.Batch
	body        []byte
	extents     []format.Extent
	committed   bool
	reported    bool
	err         error // why its upload failed, once reported
}

type uploadResult struct {
	epoch, slot uint64
	err         error
}

type model struct {
	env WriterEnv
	c   *chain.Chain
	abs *absorb.Absorber

	epoch     meta.Epoch
	w         *chain.Writer
	epochCtx  context.Context
	epochStop context.CancelFunc
	nextSlot  uint64
	releaseAt uint64
	inflight  map[uint64]*flight
	results   chan uploadResult
	next      map[string]uint64 // next seq per stream
	cuts      int               // flights cut so far
	index     releasedFlights
}

func (m *model) run(ctx context.Context) error {
	// Open: settle what earlier incarnations left, read the tails, mint.
	if err := m.env.Settle(ctx); err != nil {
		return fmt.Errorf("settle earlier epochs: %w", err)
	}
	m.abs = m.env.NewAbsorber()
	for _, st := range m.env.Streams {
		next, tot, err := Tail(ctx, m.env.Meta, st)
		if err != nil {
			return err
		}
		m.next[st] = next
		m.abs.Seed(st, tot)
	}
	if err := m.mint(ctx); err != nil {
		return err
	}
	m.results = make(chan uploadResult, 4*m.env.Params.Window)
	m.index.nudge = make(chan struct{}, 1)
	actx, stopAbsorb := context.WithCancel(ctx)
	absorbDone := make(chan struct{})
	go m.absorbLoop(actx, absorbDone)
	defer func() {
		stopAbsorb()
		<-absorbDone
		m.epochStop()
		m.w.Close()
	}()

	pace := time.NewTimer(0)
	defer pace.Stop()
	due := true // the next flight may be cut
	for {
		m.releaseReady()
		for due && len(m.inflight) < m.env.Params.Window && m.cuts < m.env.Flights {
			if err := m.cut(); err != nil {
				return err
			}
			due = false
			// Nanosecond pacing: a cut never shares an instant with another
			// timer, whose goroutine would race this loop.
			pace.Reset(time.Duration(m.env.Rand.Int64N(int64(200 * time.Millisecond))))
		}
		var tick <-chan time.Time
		if !due && m.cuts < m.env.Flights {
			tick = pace.C
		}
		select {
		case <-ctx.Done():
		case <-tick:
			due = true
		case r := <-m.results:
			if ctx.Err() == nil {
				if err := m.onResult(ctx, r); err != nil {
					return err
				}
			}
		}
		if ctx.Err() != nil { // crashed: a result of the cancellation may be ready too
			return nil
		}
	}
}

// cut takes the next flight (one or two batches, grouped by stream),
// claims the next slot and starts its upload.
func (m *model) cut() error {
	rng := m.env.Rand
	var order []string
	byStream := map[string][]format.Batch{}
	ts := uint64(time.Now().UnixMilli())
	for range 1 + rng.IntN(2) {
		st := m.env.Streams[rng.IntN(len(m.env.Streams))]
		b := format.Batch{StreamID: st}
		for range 1 + rng.IntN(m.env.MaxRecords) {
			seq := m.next[st]
			m.next[st]++
			b.Records = append(b.Records, format.Record{SeqNum: seq, Timestamp: ts, Body: Payload(st, seq, m.env.Incarnation)})
		}
		if _, ok := byStream[st]; !ok {
			order = append(order, st)
		}
		byStream[st] = append(byStream[st], b)
	}
	f := &flight{epoch: m.epoch.Epoch, slot: m.nextSlot}
	for _, st := range order {
		f.batches = append(f.batches, byStream[st]...)
	}
	if err := m.render(f); err != nil {
		return err
	}
	m.cuts++
	m.nextSlot++
	m.inflight[f.slot] = f
	m.upload(f)
	return nil
}

func (m *model) render(f *flight) error {
	body, err := m.w.Render(f.slot, f.batches)
	if err != nil {
		return fmt.Errorf("chainsim: render slot %d: %w", f.slot, err)
	}
	_, footer, err := format.DecodeBundle(body)
	if err != nil {
		return fmt.Errorf("chainsim: re-read slot %d: %w", f.slot, err)
	}
	f.body, f.extents = body, footer.Extents
	return nil
}

func (m *model) upload(f *flight) {
	w, ctx, epoch, slot, body, results := m.w, m.epochCtx, f.epoch, f.slot, f.body, m.results
	go func() {
		err := w.Commit(ctx, slot, body)
		results <- uploadResult{epoch: epoch, slot: slot, err: err}
	}()
}

func (m *model) onResult(ctx context.Context, r uploadResult) error {
	if r.epoch != m.epoch.Epoch {
		return nil
	}
	f, ok := m.inflight[r.slot]
	if !ok {
		return nil
	}
	f.reported = true
	if r.err == nil {
		f.committed = true
		return nil
	}
	return m.recover(ctx, r)
}

// releaseReady acknowledges, strictly in slot order, every committed
// flight whose predecessors are all released.
func (m *model) releaseReady() {
	for {
		f, ok := m.inflight[m.releaseAt]
		if !ok || !f.committed {
			return
		}
		delete(m.inflight, m.releaseAt)
		m.releaseAt++
		m.env.Ack(Ack{Incarnation: m.env.Incarnation, Epoch: f.epoch, Slot: f.slot, Batches: f.batches})
		m.index.add(f)
	}
}

// recover handles a halted epoch as run.go's recover does.
func (m *model) recover(ctx context.Context, r uploadResult) error {
	epoch := m.epoch.Epoch
	m.epochStop()
	m.inflight[r.slot].err = r.err
	for _, f := range m.sortedInflight() {
		for !f.reported {
			select {
			case res := <-m.results:
				if g, ok := m.inflight[res.slot]; ok && res.epoch == epoch {
					g.reported = true
					g.committed = g.committed || res.err == nil
					g.err = res.err
				}
			case <-ctx.Done():
				return nil
			}
		}
	}
	// Note the lowest halted slot, not the first reported: two deadlines
	// of one instant report in either order.
	for _, f := range m.sortedInflight() {
		if f.err != nil && !f.committed {
			m.env.Note("halt e%d/%d: %v", epoch, f.slot, f.err)
			break
		}
	}
	m.w.Close() // no copy of this writer lands after its fence reads
	committed := map[uint64]bool{}
	for s, f := range m.inflight {
		if f.committed {
			committed[s] = true
		}
	}
	known := chain.Known{Released: m.releaseAt, Committed: func(s uint64) bool { return committed[s] }}
	var cut uint64
	if err := m.retry(ctx, "fence own epoch", func() (err error) {
		cut, err = m.c.FenceOwn(ctx, epoch, known)
		return err
	}); err != nil {
		return m.depose(err)
	}
	if cut < m.releaseAt {
		return m.depose(fmt.Errorf("epoch %d cut %d below released slot %d", epoch, cut, m.releaseAt))
	}
	for s := m.releaseAt; s < cut; s++ {
		f, ok := m.inflight[s]
		if !ok {
			return m.depose(fmt.Errorf("epoch %d: committed slot %d below cut %d is not ours", epoch, s, cut))
		}
		f.committed = true
	}
	m.env.Note("fenced own e%d at cut %d: %d acked late", epoch, cut, cut-m.releaseAt)
	m.releaseReady()
	rest := m.sortedInflight()
	clear(m.inflight)
	if err := m.retry(ctx, "mint next epoch", func() error { return m.mint(ctx) }); err != nil {
		return m.depose(err)
	}
	for _, f := range rest {
		f.epoch, f.slot = m.epoch.Epoch, m.nextSlot
		f.committed, f.reported, f.err = false, false, nil
		if err := m.render(f); err != nil {
			return err
		}
		m.nextSlot++
		m.inflight[f.slot] = f
		m.upload(f)
	}
	return nil
}

// retry runs op until it succeeds, ctx ends, or it reports deposition,
// spaced like run.go's retry (10 ms doubling to 2 s). It is bounded by
// ctx only, as the loglet's is: a writer that retries forever is what the
// sim's deposed-writer check catches.
func (m *model) retry(ctx context.Context, what string, op func() error) error {
	wait := 10 * time.Millisecond
	for {
		err := op()
		if err == nil || errors.Is(err, chain.ErrDeposed) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		m.env.Note("%s failed; retrying: %v", what, err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
		wait = min(2*wait, 2*time.Second)
	}
}

func (m *model) depose(cause error) error {
	if errors.Is(cause, context.Canceled) {
		return nil // crashed or stopped
	}
	m.env.Note("deposed: %v", cause)
	return fmt.Errorf("%w: %v", ErrDeposed, cause)
}

func (m *model) mint(ctx context.Context) error {
	e, err := m.c.Mint(ctx, m.env.Params)
	if err != nil {
		return fmt.Errorf("mint: %w", err)
	}
	w, err := m.c.Writer(e, chain.WriterOptions{Deadline: m.env.Deadline})
	if err != nil {
		return err
	}
	if m.w != nil {
		m.w.Close()
	}
	if m.epochStop != nil {
		m.epochStop()
	}
	m.epoch, m.w = e, w
	m.epochCtx, m.epochStop = context.WithCancel(ctx)
	m.nextSlot, m.releaseAt = 0, 0
	m.env.Note("minted e%d", e.Epoch)
	return nil
}

func (m *model) sortedInflight() []*flight {
	fs := make([]*flight, 0, len(m.inflight))
	for _, f := range m.inflight {
		fs = append(fs, f)
	}
	slices.SortFunc(fs, func(a, b *flight) int { return cmp.Compare(a.slot, b.slot) })
	return fs
}

// absorbLoop is absorbloop.go's wake-on-work consumer of released flights:
// passes of the oldest epoch's consecutive flights, a backoff on errors.
func (m *model) absorbLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	backoff := 10 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.index.nudge:
		}
		// Let the loop finish the releases of this instant before reading
		// the index (absorbloop.go waits out AbsorbInterval the same way),
		// so a pass never depends on which goroutine ran first.
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		for {
			epoch, slots := m.index.pending(64)
			if len(slots) == 0 {
				break
			}
			n, err := m.abs.Pass(ctx, epoch, slots)
			if errors.Is(err, absorb.ErrNeedMore) {
				break
			}
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				t := time.NewTimer(backoff)
				select {
				case <-ctx.Done():
					t.Stop()
					return
				case <-t.C:
				}
				backoff = min(2*backoff, 2*time.Second)
				continue
			}
			backoff = 10 * time.Millisecond
			m.index.drop(n)
		}
	}
}

// releasedFlights is the flight index as the absorb sees it: released
// flights not yet absorbed, in release order.
type releasedFlights struct {
	mu      sync.Mutex
	flights []*flight
	nudge   chan struct{}
}

func (x *releasedFlights) add(f *flight) {
	x.mu.Lock()
	x.flights = append(x.flights, f)
	x.mu.Unlock()
	select {
	case x.nudge <- struct{}{}:
	default:
	}
}

func (x *releasedFlights) pending(max int) (uint64, []absorb.Slot) {
	x.mu.Lock()
	defer x.mu.Unlock()
	if len(x.flights) == 0 {
		return 0, nil
	}
	epoch := x.flights[0].epoch
	var out []absorb.Slot
	for _, f := range x.flights {
		if f.epoch != epoch || len(out) == max {
			break
		}
		out = append(out, absorb.Slot{Slot: f.slot, Extents: f.extents})
	}
	return epoch, out
}

func (x *releasedFlights) drop(n int) {
	x.mu.Lock()
	x.flights = x.flights[n:]
	x.mu.Unlock()
}
