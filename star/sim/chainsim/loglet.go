package chainsim

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/loglet"
)

// Loglet is the sim's writer: star/loglet's Core (its step function)
// makes every decision, which slot a cut claims, when flights release
// (strictly in slot order), what a halted epoch does and when the writer
// is deposed, and this driver carries out its effects as
// star/loglet/run.go does, with the real chain.Writer, chain.FenceOwn
// and chain.Mint. Only the batches are the sim's: each cut draws one or
// two of them from the actor's randomness instead of a pool. It stops
// for good when the Core is deposed.
type Loglet struct {
	// mutate, when set, alters each step's effects before the driver
	// carries them out: a seeded writer defect the simulation must find
	// (defects_test.go).
	mutate func(*loglet.Effects[*flight])
}

// ErrDeposed is how a Loglet run ends when a successor owns the chain.
var ErrDeposed = errors.New("chainsim: writer deposed")

func (l Loglet) Run(ctx context.Context, env WriterEnv) error {
	d := &driver{env: env, c: env.Chain, next: map[string]uint64{}, mutate: l.mutate}
	return d.run(ctx)
}

type flight struct {
	epoch, slot uint64
	batches     []format.Batch
	body        []byte
	extents     []format.Extent
}

type uploadResult struct {
	epoch, slot uint64
	err         error
}

type driver struct {
	env WriterEnv
	c   *chain.Chain
	abs *absorb.Absorber

	core      *loglet.Core[*flight]
	mutate    func(*loglet.Effects[*flight])
	epoch     meta.Epoch
	w         *chain.Writer
	epochCtx  context.Context
	epochStop context.CancelFunc
	results   chan uploadResult
	next      map[string]uint64 // next seq per stream
	cuts      int               // flights cut so far
	index     releasedFlights
}

func (d *driver) run(ctx context.Context) error {
	// Open: settle what earlier incarnations left, read the tails, mint.
	if err := d.env.Settle(ctx); err != nil {
		return fmt.Errorf("settle earlier epochs: %w", err)
	}
	d.abs = d.env.NewAbsorber()
	for _, st := range d.env.Streams {
		next, tot, err := Tail(ctx, d.env.Meta, st)
		if err != nil {
			return err
		}
		d.next[st] = next
		d.abs.Seed(st, tot)
	}
	if err := d.mint(ctx); err != nil {
		return err
	}
	d.core = loglet.NewCore[*flight](d.epoch.Epoch, d.env.Params.Window)
	d.results = make(chan uploadResult, 4*d.env.Params.Window)
	d.index.nudge = make(chan struct{}, 1)
	actx, stopAbsorb := context.WithCancel(ctx)
	absorbDone := make(chan struct{})
	go d.absorbLoop(actx, absorbDone)
	defer func() {
		stopAbsorb()
		<-absorbDone
		d.epochStop()
		d.w.Close()
	}()

	pace := time.NewTimer(0)
	defer pace.Stop()
	due := true // the next flight may be cut
	for {
		for due && d.core.CanClaim() && d.cuts < d.env.Flights {
			if err := d.cut(ctx); err != nil {
				return err
			}
			due = false
			// Nanosecond pacing: a cut never shares an instant with another
			// timer, whose goroutine would race this loop.
			pace.Reset(time.Duration(d.env.Rand.Int64N(int64(200 * time.Millisecond))))
		}
		var tick <-chan time.Time
		if !due && d.cuts < d.env.Flights {
			tick = pace.C
		}
		select {
		case <-ctx.Done():
		case <-tick:
			due = true
		case r := <-d.results:
			if ctx.Err() == nil {
				if err := d.apply(ctx, d.core.Uploaded(r.epoch, r.slot, r.err)); err != nil {
					return err
				}
			}
		}
		if ctx.Err() != nil { // crashed: a result of the cancellation may be ready too
			return nil
		}
	}
}

// cut draws the next flight (one or two batches, grouped by stream), has
// the Core claim its slot and starts its upload.
func (d *driver) cut(ctx context.Context) error {
	rng := d.env.Rand
	var order []string
	byStream := map[string][]format.Batch{}
	ts := uint64(time.Now().UnixMilli())
	for range 1 + rng.IntN(2) {
		st := d.env.Streams[rng.IntN(len(d.env.Streams))]
		b := format.Batch{StreamID: st}
		for range 1 + rng.IntN(d.env.MaxRecords) {
			seq := d.next[st]
			d.next[st]++
			b.Records = append(b.Records, format.Record{SeqNum: seq, Timestamp: ts, Body: Payload(st, seq, d.env.Incarnation)})
		}
		if _, ok := byStream[st]; !ok {
			order = append(order, st)
		}
		byStream[st] = append(byStream[st], b)
	}
	f := &flight{}
	for _, st := range order {
		f.batches = append(f.batches, byStream[st]...)
	}
	eff, err := d.core.Claim(f)
	if err != nil {
		return err
	}
	d.cuts++
	return d.apply(ctx, eff)
}

// apply carries out one step's effects in the order Effects gives.
func (d *driver) apply(ctx context.Context, eff loglet.Effects[*flight]) error {
	if d.mutate != nil {
		d.mutate(&eff)
	}
	if eff.Halt != nil {
		next, err := d.recover(ctx, eff)
		if err != nil || next == nil {
			return err
		}
		if eff = *next; d.mutate != nil {
			d.mutate(&eff)
		}
	}
	for _, f := range eff.Release {
		d.env.Ack(Ack{Incarnation: d.env.Incarnation, Epoch: f.epoch, Slot: f.slot, Batches: f.batches})
		d.index.add(f)
	}
	// eff.Install: mint gave the new epoch its writer and context already.
	for _, c := range eff.Upload {
		f := c.Flight
		f.epoch, f.slot = c.Epoch, c.Slot
		if err := d.render(f); err != nil {
			return err
		}
		d.upload(f)
	}
	if eff.Deposed != nil {
		return d.depose(eff.Deposed)
	}
	return nil
}

func (d *driver) render(f *flight) error {
	body, err := d.w.Render(f.slot, f.batches)
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

func (d *driver) upload(f *flight) {
	w, ctx, epoch, slot, body, results := d.w, d.epochCtx, f.epoch, f.slot, f.body, d.results
	go func() {
		err := w.Commit(ctx, slot, body)
		results <- uploadResult{epoch: epoch, slot: slot, err: err}
	}()
}

// recover carries out a halted epoch as run.go's startRecovery and
// finishRecovery do: stop the epoch's uploads and feed the Core their
// reports until it asks for the fence, fence the epoch on what the Core
// knows, mint the next, and hand the Core the cut. Unlike run.go it runs
// the fence and mint inline: nothing else in the sim waits on this loop.
// It returns the Core's effects (nil when the run ends).
func (d *driver) recover(ctx context.Context, eff loglet.Effects[*flight]) (*loglet.Effects[*flight], error) {
	d.epochStop()
	fo := eff.Fence
	for fo == nil {
		select {
		case res := <-d.results:
			fo = d.core.Uploaded(res.epoch, res.slot, res.err).Fence
		case <-ctx.Done():
			return nil, nil
		}
	}
	d.env.Note("halt e%d/%d: %v", fo.Epoch, fo.FirstHalt, fo.HaltErr)
	d.w.Close() // no copy of this writer lands after its fence reads
	var cut uint64
	if err := d.retry(ctx, "fence own epoch", func() (err error) {
		cut, err = d.c.FenceOwn(ctx, fo.Epoch, fo.Known)
		return err
	}); err != nil {
		return nil, d.deposeCore(err)
	}
	d.env.Note("fenced own e%d at cut %d: %d acked late", fo.Epoch, cut, cut-min(cut, fo.Known.Released))
	if err := d.retry(ctx, "mint next epoch", func() error { return d.mint(ctx) }); err != nil {
		return nil, d.deposeCore(err)
	}
	next := d.core.Recovered(cut, d.epoch.Epoch)
	return &next, nil
}

// deposeCore ends the run on a failed recovery: the Core is deposed, and
// a crash (the context's end) is no deposition.
func (d *driver) deposeCore(cause error) error {
	d.core.Depose(cause)
	return d.depose(cause)
}

// retry runs op until it succeeds, ctx ends, or it reports deposition,
// spaced like run.go's retry (10 ms doubling to 2 s). It is bounded by
// ctx only, as the loglet's is: a writer that retries forever is what the
// sim's deposed-writer check catches.
func (d *driver) retry(ctx context.Context, what string, op func() error) error {
	wait := 10 * time.Millisecond
	for {
		err := op()
		if err == nil || errors.Is(err, chain.ErrDeposed) {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		d.env.Note("%s failed; retrying: %v", what, err)
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

func (d *driver) depose(cause error) error {
	if errors.Is(cause, context.Canceled) {
		return nil // crashed or stopped
	}
	d.env.Note("deposed: %v", cause)
	return fmt.Errorf("%w: %v", ErrDeposed, cause)
}

// mint mints the next epoch, its writer and its uploads' context; the
// Core moves to it in Recovered.
func (d *driver) mint(ctx context.Context) error {
	e, err := d.c.Mint(ctx, d.env.Params)
	if err != nil {
		return fmt.Errorf("mint: %w", err)
	}
	w, err := d.c.Writer(e, chain.WriterOptions{Deadline: d.env.Deadline})
	if err != nil {
		return err
	}
	if d.w != nil {
		d.w.Close()
	}
	if d.epochStop != nil {
		d.epochStop()
	}
	d.epoch, d.w = e, w
	d.epochCtx, d.epochStop = context.WithCancel(ctx)
	d.env.Note("minted e%d", e.Epoch)
	return nil
}

// absorbLoop is absorbloop.go's wake-on-work consumer of released flights:
// passes of the oldest epoch's consecutive flights, a backoff on errors.
func (d *driver) absorbLoop(ctx context.Context, done chan<- struct{}) {
	defer close(done)
	backoff := 10 * time.Millisecond
	for {
		select {
		case <-ctx.Done():
			return
		case <-d.index.nudge:
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
			epoch, slots := d.index.pending(64)
			if len(slots) == 0 {
				break
			}
			n, err := d.abs.Pass(ctx, epoch, slots)
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
			d.index.drop(n)
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
