// Package node is the star process core, independent of HTTP: it
// registers a new incarnation of the star, opens one loglet per storage
// class (each first settles what the star's earlier incarnations left on
// its chain), keeps basins and streams in the metastore (star/catalog: the
// node's resource API delegates to it), leads streams (star/lead
// decides; the node holds their slots and sequences their appends through
// the facade and the loglet) and opens reads on the streams it leads (the
// cursor is star/reader's, over the loglets' flight indexes).
//
// Layering: star/catalog below star/lead below star/node; neither of the
// two imports the node (the catalog asks it through catalog.Leader).
//
// Every failure a client should see is an *api.Error with the API's exact
// status and body; anything else is an internal failure the server answers
// with 500.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	metametrics "github.com/starlog/starlog/shared/meta/metrics"
	"github.com/starlog/starlog/shared/objstore"
	objmetrics "github.com/starlog/starlog/shared/objstore/metrics"
	"github.com/starlog/starlog/shared/settle/chainsettle"
	"github.com/starlog/starlog/star/catalog"
	"github.com/starlog/starlog/star/lead"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/quota"
	"github.com/starlog/starlog/star/ratelimit"
	"github.com/starlog/starlog/star/reader"
)

// Deps are what Open would otherwise build from Config; tests pass their
// own. Stores passed in are not closed by Close.
type Deps struct {
	Meta    meta.Store
	Objects objstore.Store
	// Registry collects every metric of the star (nil: a new registry with
	// the Go and process collectors).
	Registry *prometheus.Registry
	Logger   *slog.Logger
	// Now is the clock of resource times and deletion timing (nil:
	// time.Now). Timestamps of records always use the real clock.
	Now func() time.Time
	// PeerHeader is sent on every request this star makes to a peer (the
	// settle nudge): the cluster's internal credential (star/auth).
	PeerHeader http.Header
	// Hooks let tests and the catalog simulation hold the node at its
	// decision points (nil: none).
	Hooks *Hooks
	// NewID draws the ids of new basins and streams (nil: 128 random
	// bits from crypto/rand). The catalog simulation makes them a
	// function of its seed.
	NewID func() string
}

// Hooks are callbacks at the node's decision points, for tests and the
// catalog simulation to park a request there and interleave others.
type Hooks struct {
	// BeforeOpen runs in a request that judged a stream's lease held by
	// this star and passed the open gate, before it takes the stream's
	// slot lock to open it; ctx is the request's (a simulation labels the
	// pause with the client it carries).
	BeforeOpen func(ctx context.Context, streamID string)
}

// Node is one running star.
type Node struct {
	// cat is the catalog (basins and streams): the node's resource API
	// delegates to it (resources.go).
	cat *catalog.Catalog

	cfg Config
	log *slog.Logger
	reg *prometheus.Registry
	// pacer is the star's absorb write budget, shared by its loglets.
	pacer *loglet.Pacer
	// unconfirmed counts 412s not answered because the appends they
	// rested on did not become durable in time (503 instead).
	unconfirmed prometheus.Counter
	// fenceAbandoned counts requests the star's fences left running past
	// their bound, by class (chain.Chain.OnAbandoned).
	fenceAbandoned *prometheus.CounterVec
	meta           meta.Store
	objects        objstore.Store
	now            func() time.Time
	reader         *reader.Reader
	loglets        map[meta.Class]*loglet.Loglet
	commits        []commitSource // the loglets, Standard first

	ownMeta meta.Store // closed by Close when Open opened it
	peerHdr http.Header
	hooks   Hooks
	regn    Registration
	lease   *lead.Leadership

	mu  sync.Mutex
	led map[string]*ledSlot // by stream id
	// unretired are deleted streams this star stopped leading whose lease
	// it has yet to retire (id → name; retryRetires).
	unretired map[string]string

	limits *ratelimit.Streams

	stopBeat context.CancelFunc
	beatDone chan struct{}
	balance  *balancer
	idle     *idleReleaser
	rowLoop  bgLoop

	quota     *quota.Manager // the basins' quotas (quota.go)
	quotaLoop bgLoop

	// drain refuses new leases once begun; its loop releases the led
	// streams under drainCtx, which Close cancels.
	drain lead.Drain

	// opened is set once Open has written every field (the heartbeat
	// runs from before the loglets are open).
	opened     atomic.Bool
	zombied    chan struct{} // closed by markZombie
	zombieOnce sync.Once
	drainCtx   context.Context
	drainStop  context.CancelFunc
	drainWG    sync.WaitGroup
	closeMu    sync.Mutex
	closed     bool
}

// Open starts a star: it registers a new incarnation, settles and opens
// both loglets, and is then ready to serve.
func Open(ctx context.Context, cfg Config, deps Deps) (_ *Node, err error) {
	cfg = cfg.WithDefaults()
	if cfg.StarID == "" {
		cfg.StarID = DefaultStarID()
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("node: config: %w", err)
	}
	n := &Node{
		pacer:   loglet.NewPacer(cfg.AbsorbWriteBudget),
		cfg:     cfg,
		log:     deps.Logger,
		reg:     deps.Registry,
		now:     deps.Now,
		peerHdr: deps.PeerHeader,
		loglets: map[meta.Class]*loglet.Loglet{},

		led:       map[string]*ledSlot{},
		unretired: map[string]string{},
		zombied:   make(chan struct{}),
	}
	n.drainCtx, n.drainStop = context.WithCancel(context.Background())
	if deps.Hooks != nil {
		n.hooks = *deps.Hooks
	}
	if n.log == nil {
		n.log = slog.Default()
	}
	n.log = n.log.With("star", cfg.StarID)
	if n.now == nil {
		n.now = time.Now
	}
	if n.reg == nil {
		n.reg = prometheus.NewRegistry()
		n.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	}
	n.unconfirmed = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "starlog", Name: "append_rejections_unconfirmed_total",
		Help: "Appends whose match_seq_num or fencing-token rejection rested on earlier appends that did not become durable in time: answered 503 (nothing sequenced), not 412.",
	})
	if err := n.reg.Register(n.unconfirmed); err != nil {
		return nil, fmt.Errorf("node metrics: %w", err)
	}
	n.fenceAbandoned = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Name: "fence_requests_abandoned_total",
		Help: "Object-store requests a fence of this star's chain left still running when its wait for them passed twice an attempt's timeout (a store ignoring its deadline), by class.",
	}, []string{"class"})
	if err := n.reg.Register(n.fenceAbandoned); err != nil {
		return nil, fmt.Errorf("node metrics: %w", err)
	}
	defer func() {
		if err != nil {
			n.abort()
		}
	}()

	ms := deps.Meta
	if ms == nil {
		if ms, err = openMeta(ctx, cfg.Meta); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		n.ownMeta = ms
	}
	if n.limits, err = ratelimit.NewStreams(cfg.Limits, n.reg); err != nil {
		return nil, fmt.Errorf("node: rate limit metrics: %w", err)
	}
	if n.meta, err = metametrics.Wrap(ms, n.reg); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	n.cat = catalog.New(catalog.Config{DeletionPending: cfg.DeletionPending, BasinCacheTTL: cfg.BasinCacheTTL}, catalog.Deps{
		Meta: n.meta, Now: n.now, NewID: deps.NewID, Logger: n.log, Registry: n.reg, Leader: catalogLeader{n},
		AdmitCreate: n.admitCreate,
	})
	n.quota = n.newQuota()
	objs := deps.Objects
	if objs == nil {
		all := append(append([]string(nil), cfg.Standard.Buckets...), cfg.Express.Buckets...)
		if objs, err = openObjects(ctx, cfg.Objects, all); err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
	}
	if n.objects, err = objmetrics.Wrap(objs, n.reg); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	if err := registerSessionMetrics(n.reg, objs); err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}

	registeredAt := time.Now()
	var regVer int64
	n.regn, regVer, err = lead.Register(ctx, n.meta, cfg.StarID, cfg.Address, registeredAt)
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	inc := chain.Incarnation(cfg.StarID, n.regn.Incarnation)
	n.log = n.log.With("incarnation", n.regn.Incarnation)
	n.lease, err = lead.New(lead.Config{
		Me: meta.LeaseHolder{Star: cfg.StarID, Incarnation: n.regn.Incarnation}, Reg: n.regn, RegVer: regVer, Registered: registeredAt,
		Meta: n.meta, Objects: n.objects, Logger: n.log, Registry: n.reg,
		DeadAfter: cfg.DeadAfter, LeaseCacheTTL: cfg.LeaseCacheTTL, RowCheckEvery: n.rowCheckEvery(),
		Ripening: cfg.Ripening, PeerTLS: cfg.PeerTLS, PeerHeader: n.peerHdr,
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}
	// Heartbeat from now on: settling the chains below may take longer
	// than the dead-after bound, and peers must not presume us dead.
	beatCtx, stop := context.WithCancel(context.Background())
	n.stopBeat, n.beatDone = stop, make(chan struct{})
	go n.heartbeat(beatCtx)
	n.log.Info("registered", "address", cfg.Address)

	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		l, err := n.openLoglet(ctx, class, inc)
		if err != nil {
			return nil, fmt.Errorf("node: %w", err)
		}
		n.loglets[class] = l
		n.commits = append(n.commits, commitSource{class: class, src: l})
	}

	n.reader, err = reader.New(reader.Config{
		Meta: n.meta, Objects: n.objects,
		SettledBucket:  cfg.Standard.Buckets[0],
		CacheBytes:     cfg.ReadCacheBytes,
		PrefetchBudget: cfg.ReadBudgetBytes,
		PrefetchWindow: cfg.ReadWindowBytes,
		Registerer:     n.reg,
		Logger:         n.log,
	})
	if err != nil {
		return nil, fmt.Errorf("node: %w", err)
	}

	n.opened.Store(true)
	n.startBalancer()
	n.startIdleRelease()
	n.startRowCheck()
	n.startQuota()
	n.log.Info("star ready")
	return n, nil
}

// openLoglet opens class's loglet as incarnation inc; loglet.Open first
// settles every earlier epoch of the chain (a kill -9'd predecessor's open
// epoch included), so the rows cover every acknowledged record before
// this incarnation mints and serves.
func (n *Node) openLoglet(ctx context.Context, class meta.Class, inc string) (*loglet.Loglet, error) {
	cc := n.cfg.Class(class)
	rip := n.cfg.Ripening(class)
	ch := chain.New(n.cfg.StarID, class, inc, n.meta, n.objects)
	abandoned := n.fenceAbandoned.WithLabelValues(string(class))
	ch.OnAbandoned = func(k int) { abandoned.Add(float64(k)) }
	settleFn := func(ctx context.Context) error {
		abs := &absorb.Absorber{Star: n.cfg.StarID, Class: class, Meta: n.meta, Rip: rip, UpdateEpoch: ch.UpdateEpoch}
		return chainsettle.Chain(ctx, ch, abs)
	}
	lcfg := loglet.Config{
		Star:            n.cfg.StarID,
		Incarnation:     inc,
		Class:           class,
		Buckets:         cc.Buckets,
		W:               cc.W,
		Window:          cc.ParallelUploads,
		FlushInterval:   cc.FlushInterval,
		CutWhenIdle:     cc.CutWhenIdle,
		TargetFlight:    cc.TargetFlightBytes,
		PoolBudget:      cc.MemoryBufferBytes,
		BacklogFlights:  n.cfg.BacklogFlights,
		BacklogBytes:    n.cfg.BacklogBytes,
		IndexCacheBytes: n.cfg.IndexCacheBytes,
		FlightDeadline:  cc.FlightDeadline,
		Ripening:        rip,
		Pacer:           n.pacer,
		OpenWait:        2 * cc.FlightDeadline, // past the admission bound the chain opens beside the star, its class degraded
	}
	l, err := loglet.Open(ctx, lcfg, ch, settleFn, loglet.NewMetrics(n.reg, "class", string(class)), n.log)
	if err != nil {
		return nil, fmt.Errorf("open %s loglet: %w", class, err)
	}
	return l, nil
}

// StarID is this star's id.
func (n *Node) StarID() string { return n.cfg.StarID }

// Incarnation is this process's incarnation number.
func (n *Node) Incarnation() uint64 { return n.regn.Incarnation }

// Registry is the star's metrics registry, for /metrics and for the
// server's own collectors.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// Meta is the star's metastore (the server keeps access tokens there).
func (n *Node) Meta() meta.Store { return n.meta }

// Logger is the star's logger.
func (n *Node) Logger() *slog.Logger { return n.log }

func (n *Node) isClosed() bool {
	n.closeMu.Lock()
	defer n.closeMu.Unlock()
	return n.closed
}

// Healthy is nil while the star is ready for traffic (GET /health): it is
// open, no zombie, no loglet stopped (closed, deposed), and some storage
// class can commit (Degraded names the classes that cannot). Its
// heartbeat is not asked: through a metastore outage the star still
// acknowledges appends from the buckets and forwards on what it knows,
// so a load balancer that drained every star for it would turn the
// outage into a total one. It does no I/O, so health checks stay cheap.
func (n *Node) Healthy() error {
	if n.isClosed() {
		return errors.New("star is closed")
	}
	if err := n.zombie(); err != nil {
		return err
	}
	return n.commitReady() // classhealth.go: one degraded class leaves the star ready
}

// HeartbeatAge is the time since this star's last registry heartbeat was
// written: a metastore outage shows here (and in the log), not as
// unreadiness.
func (n *Node) HeartbeatAge() time.Duration { return n.lease.SinceBeat() }

// commitSource is one loglet as Healthy sees it (an interface, so a test
// can stand in a condition a real loglet cannot be put in on demand).
type commitSource struct {
	class meta.Class
	src   interface{ CommitErr() error }
}

// heartbeat runs the registry heartbeat (lead.Heartbeat) until stopped.
func (n *Node) heartbeat(ctx context.Context) {
	defer close(n.beatDone)
	n.lease.Heartbeat(ctx, lead.Beats{
		Every: n.cfg.HeartbeatEvery, Leads: n.leading, Draining: n.drain.Draining,
		Superseded: n.markZombie,
		After: func() {
			// The loglets are Open's to write until it is done: the
			// heartbeat starts before them.
			if n.opened.Load() && n.zombie() != nil {
				n.markZombie()
			}
		},
	})
}

// Close stops the star (its graceful close, docs/design.md §9): every lease is
// released, the absorb runs to the head, the loglets stop (appends not yet
// released fail indefinitely, which is why the server drains first), a
// durable settle marker is left for each chain still unsettled, the
// registry row says stopped, live peers are nudged to settle the marked
// chains, and a metastore Open opened is closed.
func (n *Node) Close(ctx context.Context) error {
	n.closeMu.Lock()
	if n.closed {
		n.closeMu.Unlock()
		return nil
	}
	n.closed = true
	n.closeMu.Unlock()
	n.drainStop()
	n.drainWG.Wait()
	n.stopIdleRelease()
	n.rowLoop.halt()
	n.quotaLoop.halt()
	// Release before the loglets stop: the release flush needs the absorb.
	if released, failed := n.releaseAll(ctx); released+failed > 0 {
		n.log.Info("close: released stream leases", "released", released, "failed", failed)
	}
	n.stopBalance()
	n.stopBeat()
	<-n.beatDone
	n.lease.Close()
	// Absorb to the head (bounded: what is left, the settle walks), then
	// stop the loglets: the chains' head epochs will not be written again.
	actx, cancel := context.WithTimeout(ctx, closeAbsorbWait)
	for _, l := range n.loglets {
		if err := l.AwaitAbsorbed(actx); err != nil && l.Err() == nil {
			n.log.Warn("close: absorb to the head", "err", err)
		}
	}
	cancel()
	for _, l := range n.loglets {
		l.Close()
	}
	var errs []error
	markers, err := n.lease.LeaveSettleMarkers(ctx)
	if err != nil {
		errs = append(errs, err)
	}
	// After a drain that settled every chain (the terminate gate is open),
	// the stop is a decommission.
	if err := n.lease.Stop(ctx, n.drain.Decommissioned()); err != nil {
		errs = append(errs, err)
	}
	if markers > 0 {
		nudged := n.lease.NudgePeers(ctx)
		n.log.Info("close: left settle markers and nudged peers to settle them", "chains", markers, "peers", nudged)
	}
	if n.ownMeta != nil {
		if err := n.ownMeta.Close(); err != nil {
			errs = append(errs, fmt.Errorf("close metastore: %w", err))
		}
	}
	n.log.Info("star stopped")
	return errors.Join(errs...)
}

// Zombied is closed once this incarnation lost leadership for good: a
// later incarnation of its id registered, peers presumed it dead, or a
// successor fenced one of its chains. It leads nothing until restarted,
// so `star serve` exits (its supervisor restarts it as a new
// incarnation, which settles and serves again).
func (n *Node) Zombied() <-chan struct{} { return n.zombied }

func (n *Node) markZombie() { n.zombieOnce.Do(func() { close(n.zombied) }) }

// closeAbsorbWait bounds a graceful close's wait for the absorb to reach
// the head.
const closeAbsorbWait = 10 * time.Second

// abort releases what a failed Open acquired.
func (n *Node) abort() {
	n.drainStop()
	n.stopBalance()
	n.stopIdleRelease()
	n.rowLoop.halt()
	n.quotaLoop.halt()
	if n.stopBeat != nil {
		n.stopBeat()
		<-n.beatDone
	}
	if n.lease != nil {
		n.lease.Close()
	}
	for _, l := range n.loglets {
		l.Close()
	}
	if n.ownMeta != nil {
		n.ownMeta.Close()
	}
}
