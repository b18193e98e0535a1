// Package loglet is a star's write core for one storage class: the pool of
// admitted batches, the flusher that cuts flights and claims their slots
// inline, the parallel uploads below the claim, release strictly in slot
// order, the flight index of released flights, the absorb that turns them
// into span refs, the backlog budget, and self-recovery when an epoch halts
// (DESIGN §6, seeds/write-path.md).
//
// One goroutine (run) owns ordering: it cuts, claims, releases and recovers.
// Uploads and the absorb run beside it and report back through channels.
package loglet

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
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
	// FlushInterval bounds the age of the oldest pooled byte before a cut.
	FlushInterval time.Duration
	// TargetFlight is the flight size that triggers a cut before the deadline.
	TargetFlight int64
	// PoolBudget is the pool's byte budget (--s3-memory-buffer-mib …).
	PoolBudget int64
	// BacklogFlights and BacklogBytes bound released-but-unabsorbed flights.
	BacklogFlights int
	BacklogBytes   int64
	// FlightDeadline bounds the time a flight may take to reach W.
	FlightDeadline time.Duration
	// AbsorbInterval is the minimum time between absorb passes.
	AbsorbInterval time.Duration
	// AbsorbMaxSlots bounds one pass.
	AbsorbMaxSlots int
	// Ripening schedules the batch markers.
	Ripening absorb.Ripening
	// MetaConcurrency bounds the metastore writes of one pass.
	MetaConcurrency int
	// SlowMetaOp is the mean metastore round trip of an absorb pass above
	// which a backlog stall is blamed on the metastore (default 50 ms).
	SlowMetaOp time.Duration
}

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
		c.BacklogFlights = 1024
	}
	if c.BacklogBytes <= 0 {
		c.BacklogBytes = 1 << 30
	}
	if c.FlightDeadline <= 0 {
		c.FlightDeadline = 10 * time.Second
	}
	if c.AbsorbInterval <= 0 {
		// A pass per 100 ms at most: the metastore sees (streams + 2) writes
		// per pass whatever the bytes, and a released flight waits at most
		// this long for its refs.
		c.AbsorbInterval = 100 * time.Millisecond
	}
	if c.SlowMetaOp <= 0 {
		c.SlowMetaOp = 50 * time.Millisecond
	}
	if c.MetaConcurrency <= 0 {
		c.MetaConcurrency = 16
	}
	if c.AbsorbMaxSlots <= 0 {
		c.AbsorbMaxSlots = 256
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
	nextSlot     uint64
	releaseAt    uint64
	inflight     map[uint64]*flight
	deposedErr   error
	stalledSince time.Time

	index   *Index
	backlog *backlog

	absorbNudge chan struct{}
	absorbDone  chan struct{}

	mu     sync.Mutex
	closed error // set once the loglet stops taking batches
}

type flight struct {
	epoch     uint64
	slot      uint64
	batches   []*Batch
	bytes     int64  // pool bytes charged
	body      []byte // the rendered bundle, kept until absorbed
	bodyLen   int64  // its size, charged to the backlog until absorbed
	extents   []format.Extent
	committed bool
	reported  bool
	started   time.Time
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
	if log == nil {
		log = slog.Default()
	}
	log = log.With("chain", cfg.Star+"/"+string(cfg.Class))
	if m == nil {
		m = NewMetrics(nil)
	}
	if settle != nil {
		if err := settle(ctx); err != nil {
			return nil, fmt.Errorf("loglet %s/%s: settle earlier epochs: %w", cfg.Star, cfg.Class, err)
		}
	}
	l := &Loglet{
		cfg: cfg, chain: c, log: log, metrics: m,
		pool:        pool.New[*Batch](cfg.PoolBudget, nil),
		results:     make(chan uploadResult, 4*cfg.Window),
		inflight:    map[uint64]*flight{},
		index:       NewIndex(),
		backlog:     newBacklog(cfg.BacklogFlights, cfg.BacklogBytes, 4*cfg.SlowMetaOp),
		absorbNudge: make(chan struct{}, 1),
		absorbDone:  make(chan struct{}),
		done:        make(chan struct{}),
	}
	l.abs = &absorb.Absorber{
		Star: cfg.Star, Class: cfg.Class, Meta: c.Meta, Rip: cfg.Ripening,
		Concurrency: cfg.MetaConcurrency, UpdateEpoch: c.UpdateEpoch,
	}
	if err := l.mint(ctx); err != nil {
		return nil, err
	}
	runCtx, stop := context.WithCancel(context.Background())
	l.stop = stop
	go l.run(runCtx)
	go l.absorbLoop(runCtx)
	return l, nil
}

// Absorber is the loglet's absorb consumer (a stream opened on this star
// seeds its totals here).
func (l *Loglet) Absorber() *absorb.Absorber { return l.abs }

// Index is the flight index: released, not yet absorbed flights.
func (l *Loglet) Index() *Index { return l.index }

// Epoch is the epoch being written now (for diagnostics and tests).
func (l *Loglet) Epoch() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.epoch.Epoch
}

func (l *Loglet) params() meta.EpochParams {
	return meta.EpochParams{Buckets: l.cfg.Buckets, W: l.cfg.W, Window: l.cfg.Window}
}

func (l *Loglet) mint(ctx context.Context) error {
	e, err := l.chain.Mint(ctx, l.params())
	if err != nil {
		return fmt.Errorf("loglet %s/%s: mint: %w", l.cfg.Star, l.cfg.Class, err)
	}
	w, err := l.chain.Writer(e, chain.WriterOptions{Deadline: l.cfg.FlightDeadline, Observe: l.metrics.observePut})
	if err != nil {
		return err
	}
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
	l.nextSlot, l.releaseAt = 0, 0
	l.log.Info("epoch minted", "epoch", e.Epoch, "buckets", e.Params.Buckets, "w", e.Params.W, "window", e.Params.Window)
	return nil
}

// Reserve charges a batch's bytes against the pool budget, blocking at the
// budget (context-aware). Sequence the batch only after it succeeds, then
// Push it with the reservation, or Cancel the reservation.
func (l *Loglet) Reserve(ctx context.Context, size int64) (*pool.Reservation[*Batch], error) {
	if err := l.closedErr(); err != nil {
		return nil, err
	}
	start := time.Now()
	r, err := l.pool.Reserve(ctx, size)
	l.metrics.admitWait.Observe(time.Since(start).Seconds())
	return r, err
}

// Push hands a sequenced batch to the flusher.
func (l *Loglet) Push(r *pool.Reservation[*Batch], b *Batch) {
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

// Close stops the loglet: batches not yet released fail with ErrClosed.
func (l *Loglet) Close() {
	l.mu.Lock()
	if l.closed == nil {
		l.closed = ErrClosed
	}
	l.mu.Unlock()
	l.stop()
	<-l.done
	<-l.absorbDone
}

// CommitErr is nil while the loglet can commit flights: it is closed,
// deposed, or halted and unable to recover into a new epoch (the object
// store refuses its writes) otherwise. /health reports not ready while it
// is set, so a load balancer stops sending the star traffic.
func (l *Loglet) CommitErr() error { return l.closedErr() }
