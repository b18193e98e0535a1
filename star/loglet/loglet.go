// Package loglet is a star's write core for one storage class: the pool of
// admitted batches, the flusher that cuts flights and claims their slots
// inline, the parallel uploads below the claim, release strictly in slot
// order, the flight index of released flights, the absorb that turns them
// into span refs, the backlog budget, and self-recovery when an epoch halts
// (docs/design.md §6).
//
// One goroutine (run) owns ordering: it cuts and carries out what the
// step function (Core, step.go) decides about claims, releases and
// recovery. Uploads, the absorb and recovery's fence and mint run beside
// it and report back through channels.
//
// The two budgets are distinct: the pool holds admitted, uncut bytes
// (PoolBudget); the backlog holds cut flights until the absorb covers them
// (BacklogFlights and BacklogBytes; at most Window of them are not yet
// released). A stalled absorb therefore binds at the backlog budget, and
// every admission that blocks is counted with its cause and logged.
//
// A sequenced batch is never dropped while the loglet runs: it is
// released, or republished into the next epoch with its seq nums, or
// (when the loglet stops: deposed, closed, or a bug) failed together with
// everything after it. So a stream's seq nums stay dense.
package loglet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/pool"
)

// ErrDeposed fails the appends of a loglet whose chain a successor took.
// For the producer it is indefinite: the batch may or may not be durable.
var ErrDeposed = errors.New("loglet: deposed: leadership moved to another star; outcome unknown, retry")

// ErrClosed fails appends after Close.
var ErrClosed = errors.New("loglet: closed")

// ErrUnavailable answers appends while a halted epoch cannot be recovered
// (the object store refuses the fence or the next epoch's writes) for
// longer than the recovery deadline. For a batch already sequenced it is
// indefinite: the batch stays in the loglet and may still commit when the
// store returns. For a new batch it is definite: nothing was sequenced.
var ErrUnavailable = errors.New("loglet: cannot commit to the object store now; retry")

// Config fixes one loglet.
type Config struct {
	Star        string
	Incarnation string
	Class       meta.Class
	Buckets     []string // the bucket set, K = len
	W           int
	// Window is how many slots may be claimed ahead of release
	// (--s3-parallel-uploads / --s3-express-parallel-uploads).
	Window int
	// FlushInterval bounds the PUT rate of sub-target flights (one per
	// interval) and the age of the oldest pooled byte before a cut; a batch
	// arriving after an idle interval is cut at once (pool.CutPolicy).
	FlushInterval time.Duration
	// CutWhenIdle cuts at once whenever no flight is uploading
	// (pool.CutPolicy.WhenIdle): for stores without a price per PUT.
	CutWhenIdle bool
	// TargetFlight is the flight size that triggers a cut before the deadline.
	TargetFlight int64
	// PoolBudget is the pool's byte budget (--s3-memory-buffer-mib …).
	PoolBudget int64
	// BacklogFlights and BacklogBytes bound cut-but-unabsorbed flights:
	// the absorb's pass spacing and a successor's takeover walk, not
	// memory (IndexCacheBytes bounds that).
	BacklogFlights int
	BacklogBytes   int64
	// IndexCacheBytes bounds the rendered bundles of released flights the
	// flight index keeps in memory, the most recent first (default
	// DefaultIndexCacheBytes; negative: none). Reads of older unabsorbed
	// flights GET their slot objects.
	IndexCacheBytes int64
	// FlightDeadline bounds the time a flight may take to reach W.
	FlightDeadline time.Duration
	// OpenWait, when positive, bounds how long Open waits for the chain's
	// earlier epochs to settle and its first mint: past it (or on an
	// error) Open returns the loglet still opening, degraded (CommitErr is
	// ErrUnavailable, appends are refused), and keeps trying beside the
	// star (opening.go). Zero: Open returns only an open loglet or an error.
	OpenWait time.Duration
	// RecoveryDeadline bounds how long appends wait for a halted epoch to
	// recover before they are answered ErrUnavailable (default the flight
	// deadline). Recovery itself goes on until it succeeds or is deposed.
	RecoveryDeadline time.Duration
	// AbsorbInterval is the minimum time between absorb passes.
	AbsorbInterval time.Duration
	// AbsorbMaxSlots bounds one pass.
	AbsorbMaxSlots int
	// Pacer spaces the passes of the star's loglets so their metastore
	// writes stay within its budget (nil: AbsorbInterval alone spaces
	// them, and passes run at the flight rate).
	Pacer *Pacer
	// Ripening schedules the batch markers.
	Ripening absorb.Ripening
	// MetaConcurrency bounds the metastore writes of one pass.
	MetaConcurrency int
	// SlowMetaOp is the mean metastore round trip of an absorb pass above
	// which a backlog stall is blamed on the metastore (default 50 ms).
	SlowMetaOp time.Duration

	// testRender, when set, fails the rendering of a flight (tests).
	testRender func(epoch, slot uint64) error
	// testFixedDelay cuts by the earlier fixed-delay policy (benchmarks).
	testFixedDelay bool
}

// The backlog's and the flight index's default bounds, per chain
// (docs/write-path.md, "Absorb pace" and "Defaults, and why"). The backlog
// holds the flights released between two absorb passes; passes are spaced
// w(N)/B by the write budget B, and run early once half the backlog is
// taken, so the budget holds while w(N)/B ≤ BacklogFlights/(2F) and
// BacklogBytes/(2R) for F flights and R bytes a second. 12,288 flights and
// 4 GiB hold 10,000 streams (w = 10,013, 200 s at 50/s) at 4 MiB/s of
// Standard flights (F ≤ 20/s, one per 50 ms flush) with 50 % to spare on
// flights (6,144 ≥ 4,006) and 2.5× on bytes. The backlog costs takeover
// time (a successor walks it), not memory: the index keeps 64 MiB of the
// newest bundles, 16 Standard target flights, the window's worth, which
// covers a tailing reader's lag from release many times over at the
// ingest the backlog is sized for.
const (
	DefaultBacklogFlights  = 12288
	DefaultBacklogBytes    = 4 << 30
	DefaultIndexCacheBytes = 64 << 20
)

// MaxTargetFlight bounds TargetFlight: a slot object's footer coordinates
// are 32-bit, so a flight must render below 4 GiB whatever its batches.
const MaxTargetFlight = 1 << 30

func (c *Config) defaults() {
	if c.Window <= 0 {
		c.Window = 8
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = 100 * time.Millisecond
	}
	if c.TargetFlight <= 0 {
		c.TargetFlight = 4 << 20
	}
	if c.PoolBudget <= 0 {
		c.PoolBudget = 256 << 20
	}
	if c.BacklogFlights <= 0 {
		c.BacklogFlights = DefaultBacklogFlights
	}
	if c.BacklogBytes <= 0 {
		c.BacklogBytes = DefaultBacklogBytes
	}
	if c.IndexCacheBytes == 0 {
		c.IndexCacheBytes = DefaultIndexCacheBytes
	}
	if c.FlightDeadline <= 0 {
		c.FlightDeadline = 10 * time.Second
	}
	if c.RecoveryDeadline <= 0 {
		c.RecoveryDeadline = c.FlightDeadline
	}
	if c.AbsorbInterval <= 0 {
		// A pass per 100 ms at most: the metastore sees (streams + 2) writes
		// per pass whatever the bytes; the Pacer spaces passes further.
		c.AbsorbInterval = 100 * time.Millisecond
	}
	if c.SlowMetaOp <= 0 {
		c.SlowMetaOp = 50 * time.Millisecond
	}
	if c.MetaConcurrency <= 0 {
		c.MetaConcurrency = 16
	}
	if c.AbsorbMaxSlots <= 0 {
		// Half the backlog (DefaultBacklogFlights/2): a pass at the pressure point
		// (half the backlog's flights) takes everything released since the
		// last, so a larger backlog spaces passes further.
		c.AbsorbMaxSlots = max(c.BacklogFlights/2, 1)
	}
}

// Batch is one sequenced batch of one stream on its way to an ack.
type Batch struct {
	StreamID string
	Seq      facade.Sequenced
	// Done is called exactly once: nil when the batch is durable and
	// released (batches of one loglet complete in slot order, so a stream's
	// batches complete in seq order), or the failure.
	Done func(error)
	// Trace, when set, is told each step of the batch's way to its ack
	// (for a trace of the append): from the loglet's loop, and a PUT's
	// from the PUT's goroutine, a straggler's after the ack.
	Trace func(Step)

	answered bool // Done was called (owned by run)
}

// Step is one timed step of a batch on its way to its ack.
type Step struct {
	// Name is "pool wait" (admitted, until its flight is cut), "cut" (the
	// flight cut and rendered), "put <bucket>" (one PUT attempt of the
	// flight's slot) or "release" (W copies durable, until the ack: the
	// flights of earlier slots are released first).
	Name       string
	Start, End time.Time
	Slot       uint64
	Err        error
}

// answer calls Done once.
func (b *Batch) answer(err error) {
	if !b.answered {
		b.answered = true
		b.Done(err)
	}
}

// Loglet is one class's write core on one star.
type Loglet struct {
	cfg     Config
	chain   *chain.Chain
	abs     *absorb.Absorber
	pool    *pool.Pool[*Batch]
	log     *slog.Logger
	metrics *Metrics

	results chan uploadResult
	stop    context.CancelFunc
	done    chan struct{}

	// owned by run
	epoch        meta.Epoch
	writer       *chain.Writer
	epochCtx     context.Context
	epochStop    context.CancelFunc
	core         *Core[*flight] // the slots' decisions (step.go)
	rec          *recovery      // a halted epoch being fenced and replaced
	failing      *failing       // nothing committed since an epoch halted (degraded.go)
	deposedErr   error
	stalledSince time.Time
	blocked      blockedBy // why the last tryCut stopped cutting (for admission stalls)
	policy       pool.CutPolicy
	lastCut      time.Time // when the previous flight was cut (zero: none yet)

	index   *Index
	backlog *backlog
	admit   admitStalls
	shares  shares // bytes outstanding by stream, for ErrOverShare

	absorbNudge  chan struct{}
	absorbDone   chan struct{}
	absorbUrgent atomic.Int32 // AwaitAbsorbed callers waiting: no pacing

	mu     sync.Mutex
	closed error // set once the loglet stops taking batches
	outage error // set while the class is degraded (failing.degraded)
	// refused is closed when closed or outage is set, so appends waiting
	// for pool budget are refused at once rather than at their timeout.
	refused chan struct{}
}

type flight struct {
	epoch   uint64
	slot    uint64
	batches []*Batch
	body    []byte // the rendered bundle, until the flight index evicts it
	bodyLen int64  // its size, charged to the backlog until absorbed
	extents []format.Extent
	buckets []string   // the epoch's bucket set, where an evicted flight is read
	span    *meta.Span // the epoch, as the reader names it (set by the index)
	started time.Time
	// committed is when W copies were durable; traced are the batches
	// with a Trace (nil when none).
	committed time.Time
	traced    []*Batch
}

type uploadResult struct {
	epoch uint64
	slot  uint64
	err   error
}

// Open settles what the star's earlier incarnations left on this chain
// (fence, walk, absorb, probe), mints a new epoch and starts the loglet.
func Open(ctx context.Context, cfg Config, c *chain.Chain, settle func(context.Context) error, m *Metrics, log *slog.Logger) (*Loglet, error) {
	cfg.defaults()
	if cfg.TargetFlight > MaxTargetFlight {
		return nil, fmt.Errorf("loglet %s/%s: target flight of %d bytes exceeds %d", cfg.Star, cfg.Class, cfg.TargetFlight, MaxTargetFlight)
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("chain", cfg.Star+"/"+string(cfg.Class))
	if m == nil {
		m = NewMetrics(nil)
	}
	m.knowBuckets(cfg.Buckets)
	l := &Loglet{
		cfg: cfg, chain: c, log: log, metrics: m,
		pool:        pool.New[*Batch](cfg.PoolBudget, nil),
		policy:      pool.CutPolicy{Interval: cfg.FlushInterval, Target: cfg.TargetFlight, FixedDelay: cfg.testFixedDelay, WhenIdle: cfg.CutWhenIdle},
		results:     make(chan uploadResult, 4*cfg.Window),
		index:       newIndex(cfg.Star, cfg.Class, cfg.IndexCacheBytes, m),
		backlog:     newBacklog(cfg.BacklogFlights, cfg.BacklogBytes, 4*cfg.SlowMetaOp),
		admit:       admitStalls{metrics: m, log: log},
		absorbNudge: make(chan struct{}, 1),
		absorbDone:  make(chan struct{}),
		done:        make(chan struct{}),
		refused:     make(chan struct{}),
	}
	l.abs = &absorb.Absorber{
		Star: cfg.Star, Class: cfg.Class, Meta: c.Meta, Rip: cfg.Ripening,
		Concurrency: cfg.MetaConcurrency, UpdateEpoch: c.UpdateEpoch,
	}
	if cfg.OpenWait > 0 {
		if err := l.openWithin(ctx, settle); err != nil {
			return nil, err
		}
		return l, nil
	}
	if err := l.settleAndMint(ctx, settle); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	l.stop = stop
	l.start(runCtx)
	return l, nil
}

// start runs the loops of a loglet whose epoch is minted.
func (l *Loglet) start(ctx context.Context) {
	go l.run(ctx)
	go l.absorbLoop(ctx)
}

// Absorber is the loglet's absorb consumer (a stream opened on this star
// seeds its totals here).
func (l *Loglet) Absorber() *absorb.Absorber { return l.abs }

// Index is the flight index: released, not yet absorbed flights.
func (l *Loglet) Index() *Index { return l.index }

// Backlog is the cut-but-unabsorbed flights and their bundle bytes (the
// backlog budget's use).
func (l *Loglet) Backlog() (flights int, bytes int64) {
	return l.backlog.flightsNow(), l.backlog.bytesNow()
}

// Epoch is the epoch being written now (for diagnostics and tests).
func (l *Loglet) Epoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch.Epoch
}

func (l *Loglet) params() meta.EpochParams {
	return meta.EpochParams{Buckets: l.cfg.Buckets, W: l.cfg.W, Window: l.cfg.Window, PassSlots: l.cfg.AbsorbMaxSlots}
}

// maxOpenRounds bounds Open's settle-then-mint rounds: another round is
// needed only when an earlier incarnation minted between our settle and
// our mint (ErrNotFenced), which a restart loop can do a few times at most.
const maxOpenRounds = 4

// settleAndMint settles what the star's earlier incarnations left on this
// chain, then mints a new epoch; an earlier incarnation's epoch minted
// in between (ErrNotFenced) is settled in another round.
func (l *Loglet) settleAndMint(ctx context.Context, settle func(context.Context) error) error {
	for round := 1; ; round++ {
		if settle != nil {
			if err := settle(ctx); err != nil {
				return fmt.Errorf("loglet %s/%s: settle earlier epochs: %w", l.cfg.Star, l.cfg.Class, err)
			}
		}
		e, w, err := l.mintEpoch(ctx)
		if errors.Is(err, chain.ErrNotFenced) && round < maxOpenRounds {
			continue
		}
		if err != nil {
			return err
		}
		l.install(e, w)
		return nil
	}
}

// mintEpoch mints the next epoch and its writer; it touches no loglet
// state, so recovery runs it beside the loop.
func (l *Loglet) mintEpoch(ctx context.Context) (meta.Epoch, *chain.Writer, error) {
	e, err := l.chain.Mint(ctx, l.params())
	if err != nil {
		return e, nil, fmt.Errorf("loglet %s/%s: mint: %w", l.cfg.Star, l.cfg.Class, err)
	}
	w, err := l.chain.Writer(e, chain.WriterOptions{Deadline: l.cfg.FlightDeadline, Observe: l.metrics.observePut})
	if err != nil {
		return e, nil, err
	}
	return e, w, nil
}

// install makes e, written by w, the loglet's epoch.
func (l *Loglet) install(e meta.Epoch, w *chain.Writer) {
	if l.writer != nil {
		l.writer.Close()
	}
	if l.epochStop != nil {
		l.epochStop()
	}
	l.mu.Lock()
	l.epoch, l.writer = e, w
	l.mu.Unlock()
	l.epochCtx, l.epochStop = context.WithCancel(context.Background())
	if l.core == nil { // the first epoch; a recovery's Core moved on by itself
		l.core = NewCore[*flight](e.Epoch, l.cfg.Window)
	}
	l.log.Info("epoch minted", "epoch", e.Epoch, "buckets", e.Params.Buckets, "w", e.Params.W, "window", e.Params.Window)
}

// Reserve charges a batch's bytes against the pool budget, blocking at the
// budget (context-aware). Sequence the batch only after it succeeds, then
// Push it with the reservation, or Cancel the reservation.
//
// An admission that must wait is a stall: it is counted once per stall
// with the diagnosed cause and logged (admitStalls).
func (l *Loglet) Reserve(ctx context.Context, size int64) (*pool.Reservation[*Batch], error) {
	if err := l.admitErr(); err != nil {
		return nil, err
	}
	if r, ok := l.pool.TryReserve(size); ok {
		l.metrics.admitWait.Observe(0)
		return r, nil
	}
	start := time.Now()
	l.admit.begin(start, l.blocked.load())
	// A class that degrades (or a loglet that stops) while we wait
	// refuses us then, not at the caller's admission timeout.
	wctx, cancel := context.WithCancel(ctx)
	stop := l.onRefused(cancel)
	r, err := l.pool.Reserve(wctx, size)
	stop()
	cancel()
	l.admit.end(time.Now(), l.pool.Stats().Waiters)
	l.metrics.admitWait.Observe(time.Since(start).Seconds())
	if aerr := l.admitErr(); aerr != nil { // stopped or out while we waited
		if err == nil {
			r.Cancel()
		}
		return nil, aerr
	}
	if err != nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	return r, err
}

// onRefused calls f once the loglet refuses new batches (closed or
// degraded); the returned stop ends the watch.
func (l *Loglet) onRefused(f func()) (stop func()) {
	l.mu.Lock()
	ch := l.refused
	l.mu.Unlock()
	done := make(chan struct{})
	go func() {
		select {
		case <-ch:
			f()
		case <-done:
		}
	}()
	return func() { close(done) }
}

// signalRefusedLocked wakes the waiters of onRefused once closed or
// outage is set, and re-arms the signal once neither is (l.mu held).
func (l *Loglet) signalRefusedLocked() {
	refusing := l.closed != nil || l.outage != nil
	select {
	case <-l.refused:
		if !refusing {
			l.refused = make(chan struct{})
		}
	default:
		if refusing {
			close(l.refused)
		}
	}
}

// Push hands a sequenced batch to the flusher.
func (l *Loglet) Push(r *pool.Reservation[*Batch], b *Batch) {
	l.track(b, r.Size())
	r.Commit(b)
}

// Err is nil while the loglet takes batches, else why it stopped:
// ErrClosed, or ErrDeposed with its cause.
func (l *Loglet) Err() error { return l.closedErr() }

func (l *Loglet) closedErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// admitErr is why a new batch is refused now: the loglet stopped, or a
// recovery overran its deadline (the store refuses writes).
func (l *Loglet) admitErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed != nil {
		return l.closed
	}
	return l.outage
}

func (l *Loglet) setOutage(err error) {
	l.mu.Lock()
	l.outage = err
	l.signalRefusedLocked()
	l.mu.Unlock()
}

// Close stops the loglet: batches not yet released fail with ErrClosed.
func (l *Loglet) Close() {
	l.mu.Lock()
	if l.closed == nil {
		l.closed = ErrClosed
	}
	l.signalRefusedLocked()
	l.mu.Unlock()
	l.stop()
	<-l.done
	<-l.absorbDone
}

// CommitErr is nil while the loglet can commit flights: it is closed,
// deposed, or degraded otherwise (ErrUnavailable: no flight committed
// within the recovery deadline of an epoch's halt, because the object
// store refuses or does not answer this class's writes). /health names
// the class.
func (l *Loglet) CommitErr() error { return l.admitErr() }
