package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/star/catalog"
	"github.com/starlog/starlog/star/loglet"
)

// NotLeaderError says another live star leads the stream: forward the
// request to Address. It unwraps to a retryable 503, which is what a
// client sees when the request cannot be forwarded.
type NotLeaderError struct {
	StreamID string
	Leader   meta.LeaseHolder
	// Address is the leader's advertised address (host:port or URL).
	Address string
}

func (e *NotLeaderError) Error() string {
	if e.Leader.Star == "" {
		return fmt.Sprintf("stream %s: this star gave it up and names no successor", e.StreamID)
	}
	return fmt.Sprintf("stream %s is led by star %s (incarnation %d) at %q", e.StreamID, e.Leader.Star, e.Leader.Incarnation, e.Address)
}

func (e *NotLeaderError) Unwrap() error {
	return api.Unavailable("this stream is led by another star; retry")
}

// leadership is the node's multi-star state: its own liveness, the
// forward cache, and the open gate's settle runner.
type leadership struct {
	me meta.LeaseHolder

	// base anchors the monotonic clock of lastBeat, the offset of the
	// last heartbeat that was written (taken before the write).
	base       time.Time
	lastBeat   atomic.Int64
	superseded atomic.Bool

	// run is this star's current run of heartbeats landing without a
	// gap: connectedSince (unix ms, the registry row's ConnectedSince) is
	// when its first beat was written; failing says the last beat did not
	// land, so there is no run. Only the heartbeat goroutine writes them.
	run struct {
		sync.Mutex
		connectedSince int64
		failing        bool
	}

	fwd    *forwardCache
	runner *settleRunner

	acquired *prometheus.CounterVec
	forwards prometheus.Counter
	shed     prometheus.Counter
}

// newLeadership starts the leadership state of incarnation me, whose
// registration was written at registered.
func newLeadership(me meta.LeaseHolder, reg prometheus.Registerer, registered time.Time) (*leadership, error) {
	ls := &leadership{
		me: me, base: registered, fwd: newForwardCache(),
		acquired: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "leader", Name: "lease_acquisitions_total",
			Help: "Stream leases this star acquired, by what it took them from (unled, dead, released, own).",
		}, []string{"from"}),
		forwards: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "leader", Name: "not_leader_total",
			Help: "Requests for streams another live star leads (forwarded by the server).",
		}),
		shed: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "leader", Name: "streams_shed_total",
			Help: "Open streams dropped because this star lost leadership (deposed or presumed dead).",
		}),
	}
	ls.runner = newSettleRunner()
	for _, c := range []prometheus.Collector{ls.acquired, ls.forwards, ls.shed, ls.runner.runs, ls.runner.nudged, ls.runner.dur} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("leadership metrics: register: %w", err)
		}
	}
	ls.beatAt(ls.base, true)
	return ls, nil
}

// nextBeat is what a heartbeat written at t says in ConnectedSince, and
// whether it begins a new run: it does after a beat that failed, and after
// a gap of half the dead-after bound or more since the last beat that
// landed (the process was paused, or the write was slow: nothing shows
// the metastore was reachable in between).
func (ls *leadership) nextBeat(t time.Time, deadAfter time.Duration) (connectedSince int64, newRun bool) {
	ls.run.Lock()
	defer ls.run.Unlock()
	if ls.run.failing || t.Sub(ls.base)-time.Duration(ls.lastBeat.Load()) >= deadAfter/2 {
		return t.UnixMilli(), true
	}
	return ls.run.connectedSince, false
}

// beatAt records a heartbeat written at t (monotonic) that landed; newRun
// is nextBeat's verdict for it.
func (ls *leadership) beatAt(t time.Time, newRun bool) {
	ls.run.Lock()
	defer ls.run.Unlock()
	if newRun {
		ls.run.connectedSince = t.UnixMilli()
	}
	ls.run.failing = false
	ls.lastBeat.Store(int64(t.Sub(ls.base)))
}

// beatFailed records a heartbeat that did not land.
func (ls *leadership) beatFailed() {
	ls.run.Lock()
	ls.run.failing = true
	ls.run.Unlock()
}

// witness is this star as leader.PresumeDead's witness at now, the time
// of the metastore reads it judges on: its heartbeats landed without a
// gap since connectedSince, the last one less than half the dead-after
// bound ago, and those reads answered, so the metastore was reachable to
// it from then until now. The zero Witness (no testimony) while its last
// heartbeat failed or is older: a star back from an outage judges nobody
// before its own first beat lands, and then only after beating for a
// whole bound past the judged star's last beat.
func (ls *leadership) witness(now time.Time, deadAfter time.Duration) leader.Witness {
	ls.run.Lock()
	defer ls.run.Unlock()
	if ls.run.failing || ls.sinceBeat() >= deadAfter/2 {
		return leader.Witness{}
	}
	return leader.Witness{Star: ls.me.Star, Reg: meta.Registration{
		Incarnation: ls.me.Incarnation, State: meta.StarLive,
		StartedAt: ls.base.UnixMilli(), ConnectedSince: ls.run.connectedSince, Heartbeat: now.UnixMilli(),
	}}
}

// sinceBeat is the time since the last heartbeat that was written.
func (ls *leadership) sinceBeat() time.Duration {
	return time.Since(ls.base) - time.Duration(ls.lastBeat.Load())
}

type forwardedKey struct{}

// Forwarded marks ctx as a request another star forwarded here: the
// leadership check skips the forward cache and reads the lease, since the
// sender's view is newer than the cached one when a stream was just handed
// to this star.
func Forwarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, forwardedKey{}, true)
}

func forwarded(ctx context.Context) bool { return ctx.Value(forwardedKey{}) != nil }

// zombie is the permanent loss of leadership of this incarnation: a later
// incarnation of this star id registered, or peers marked it dead, or a
// successor fenced one of its chains. Only a restart (a new incarnation)
// leads again.
func (n *Node) zombie() error {
	if n.lease.superseded.Load() {
		return api.Unavailable("this star was presumed dead by its peers or superseded; it leads no stream until restarted")
	}
	for class, l := range n.loglets {
		if errors.Is(l.Err(), loglet.ErrDeposed) {
			return api.Unavailable("this star's %s chain was fenced by a successor; it leads no stream until restarted", class)
		}
	}
	return nil
}

// selfLive is nil while this star's heartbeat is recent: it is no zombie
// and its last heartbeat was written less than half the dead-after bound
// ago, so it yields before any peer can presume it dead (the margin
// absorbs clock rate differences and pauses). It guards only what this
// star answers from its own memory (check-tail, the tail window and tail
// of reads, the 412s of appends: fromMemory) and what it starts (a new
// lease, a balancer round). Accepted appends do not use it: a cut-off
// star may go on acknowledging, because a successor fences its chain
// before it opens a stream, so the next slot this star writes meets
// poison and it is deposed, and every ack it released lies below the
// cut. An answer from memory meets no poison, though, and would report a
// stale tail after a successor took over: that, not safety of acks, is
// what the clock guard is for.
func (n *Node) selfLive() error {
	if err := n.zombie(); err != nil {
		return err
	}
	if d, stale := n.beatStale(); stale {
		return api.Unavailable("this star has not renewed its registration for %v; retry", d)
	}
	return nil
}

// beatStale reports whether half the dead-after bound has passed since
// this star's last heartbeat was written (the clock guard), and how long.
func (n *Node) beatStale() (time.Duration, bool) {
	d := n.lease.sinceBeat()
	return d.Truncate(time.Millisecond), d >= n.cfg.DeadAfter/2
}

// claimAction is what this star does about a stream's lease.
type claimAction uint8

const (
	// claimHeld: this incarnation holds the lease; serve.
	claimHeld claimAction = iota + 1
	// claimForward: a live peer leads the stream, or it was handed to one.
	claimForward
	// claimAcquire: unled, released, or led by a star that is not live;
	// take it by CAS.
	claimAcquire
	// claimMarkDead: the holder's heartbeat is stale; mark it dead by CAS
	// on the row read, then judge again.
	claimMarkDead
	// claimWait: the holder looks stale, but this star has not reached
	// the metastore without a gap for a whole dead-after bound after the
	// holder's last heartbeat (leader.PresumeDead), so the staleness may
	// be an outage it shared or just came out of; retry.
	claimWait
	// claimNoAddress: a live holder advertises nowhere to forward to.
	claimNoAddress
	// claimEmptied: the auditor took the lease to delete the stream on
	// empty (meta.Lease.Emptied); nobody leads it again.
	claimEmptied
)

// claimView is what decideClaim judges: the lease as read, the
// registration of the star it points at (regStar), and this star's clock
// and own connectedness (as a witness).
type claimView struct {
	me     meta.LeaseHolder
	lease  meta.Lease
	leased bool // the lease row exists
	// reg is regStar's registration; registered says it exists.
	reg        meta.Registration
	registered bool
	now        time.Time
	deadAfter  time.Duration
	// self is this star as a witness of the metastore's reachability at
	// now (leadership.witness); zero when it cannot testify.
	self leader.Witness
}

// claimDecision is decideClaim's verdict.
type claimDecision struct {
	act claimAction
	// from names what an acquired lease is taken from (unled, released,
	// dead, own): the label of starlog_leader_lease_acquisitions_total.
	from string
	// target and address name the leader to forward to.
	target  meta.LeaseHolder
	address string
}

// regStar is the star whose registration decideClaim needs for a lease:
// the star a released lease was handed to, or the holder of a held one;
// "" when there is none (unled, released to nobody or to this star, held
// by this incarnation).
func regStar(l meta.Lease, leased bool, me meta.LeaseHolder) string {
	switch {
	case !leased:
		return ""
	case l.Released:
		if l.To == me.Star {
			return ""
		}
		return l.To
	case l.LeaseHolder == me:
		return ""
	}
	return l.Star
}

// decideClaim judges a stream's lease (docs/design.md §9), doing no I/O:
//
//   - this incarnation's unreleased lease is held;
//   - a lease released to another star is forwarded there while that
//     star is live (state live, not draining) and has an address, so a
//     handoff is not undone by a peer or the releasing star taking the
//     lease first; otherwise anyone may take it;
//   - a lease held by a live incarnation is forwarded to it;
//   - a holder whose heartbeat is stale is marked dead first, but only by
//     a star whose own heartbeats landed without a gap for a whole
//     dead-after bound after the holder's last one (leader.PresumeDead,
//     this star its witness): after a metastore outage every star looks
//     stale, and the first one back must not depose the rest;
//   - a lease the auditor took to delete the stream on empty, or that a
//     delete retired (meta.Lease.Deleted), is never taken (404);
//   - anything else (unled, dead, stopped, superseded, never registered,
//     an earlier incarnation of this star) is acquired.
//
// The table test in lease_internal_test.go covers every case.
func decideClaim(v claimView) claimDecision {
	if !v.leased {
		return claimDecision{act: claimAcquire, from: "unled"}
	}
	l := v.lease
	if l.Emptied || l.Deleted {
		return claimDecision{act: claimEmptied}
	}
	if l.Released {
		if v.registered && l.To != "" && l.To != v.me.Star && v.reg.State == meta.StarLive &&
			leader.Live(v.reg, v.reg.Incarnation, v.now, v.deadAfter) && v.reg.Address != "" {
			return claimDecision{act: claimForward, target: meta.LeaseHolder{Star: l.To, Incarnation: v.reg.Incarnation}, address: v.reg.Address}
		}
		return claimDecision{act: claimAcquire, from: "released"}
	}
	if l.LeaseHolder == v.me {
		return claimDecision{act: claimHeld}
	}
	if v.registered && leader.Live(v.reg, l.Incarnation, v.now, v.deadAfter) {
		if v.reg.Address == "" {
			return claimDecision{act: claimNoAddress}
		}
		return claimDecision{act: claimForward, target: l.LeaseHolder, address: v.reg.Address}
	}
	// This star's own row is never judged stale here: an earlier
	// incarnation's lease is simply this incarnation's to take.
	if l.Star != v.me.Star && v.registered && leader.Stale(v.reg, v.now, v.deadAfter) {
		if _, dead := leader.PresumeDead(l.Star, v.reg, []leader.Witness{v.self}, v.now, v.deadAfter); !dead {
			return claimDecision{act: claimWait}
		}
		return claimDecision{act: claimMarkDead}
	}
	if l.Star == v.me.Star {
		return claimDecision{act: claimAcquire, from: "own"}
	}
	return claimDecision{act: claimAcquire, from: "dead"}
}

// readClaim reads what decideClaim judges for stream id: the lease (and
// its version) and the registration regStar names.
func (n *Node) readClaim(ctx context.Context, id string) (claimView, int64, error) {
	v := claimView{me: n.lease.me, deadAfter: n.cfg.DeadAfter}
	l, ver, ok, err := leader.ReadLease(ctx, n.meta, id)
	if err != nil {
		return v, 0, err
	}
	v.lease, v.leased = l, ok
	if star := regStar(l, ok, n.lease.me); star != "" {
		if v.reg, _, v.registered, err = leader.ReadRegistration(ctx, n.meta, star); err != nil {
			return v, 0, err
		}
	}
	v.now = time.Now()
	v.self = n.lease.witness(v.now, n.cfg.DeadAfter)
	return v, ver, nil
}

// judge reads and judges stream id's lease; a stale holder is marked dead
// (the janitor does the same) and the lease judged once more.
func (n *Node) judge(ctx context.Context, id string) (claimView, int64, claimDecision, error) {
	v, ver, err := n.readClaim(ctx, id)
	if err != nil {
		return v, 0, claimDecision{}, err
	}
	d := decideClaim(v)
	if d.act != claimMarkDead {
		return v, ver, d, nil
	}
	r, dead, by, err := leader.MarkPresumedDead(ctx, n.meta, v.lease.Star, []leader.Witness{v.self}, v.now, n.cfg.DeadAfter)
	if err != nil {
		return v, 0, claimDecision{}, err
	}
	if dead && by != "" {
		n.log.Warn("marked star dead: heartbeat too old", "dead_star", v.lease.Star, "incarnation", r.Incarnation, "heartbeat", time.UnixMilli(r.Heartbeat),
			"connected_since", time.UnixMilli(v.self.Reg.ConnectedSince))
	}
	// MarkPresumedDead returns the row as it stands: dead or stopped now,
	// or live again (a heartbeat landed first); if still stale, this
	// star's testimony no longer covers it (it beat since), and
	// decideClaim waits.
	v.reg, v.registered, v.now = r, true, time.Now()
	if d = decideClaim(v); d.act == claimMarkDead {
		return v, 0, claimDecision{}, fmt.Errorf("star %s: still stale after marking it dead", v.lease.Star)
	}
	return v, ver, d, nil
}

// claim returns the stream's lease once this incarnation holds it,
// acquiring it by CAS when decideClaim says so. A live peer's lease is a
// *NotLeaderError.
func (n *Node) claim(ctx context.Context, id, name string) (meta.Lease, int64, error) {
	for {
		v, ver, d, err := n.judge(ctx, id)
		if err != nil {
			return meta.Lease{}, 0, n.storageErr("resolve lease", err)
		}
		switch d.act {
		case claimHeld:
			return v.lease, ver, nil
		case claimForward:
			f := &NotLeaderError{StreamID: id, Leader: d.target, Address: d.address}
			n.lease.fwd.remember(f, n.cfg.LeaseCacheTTL)
			n.lease.forwards.Inc()
			return meta.Lease{}, 0, f
		case claimWait:
			return meta.Lease{}, 0, api.Unavailable("stream %q is led by star %s, whose heartbeat looks stale, but this star only just regained the metastore; retry", name, v.lease.Star)
		case claimNoAddress:
			return meta.Lease{}, 0, api.Unavailable("stream %q is led by star %s, which advertises no address", name, v.lease.Star)
		case claimEmptied:
			if v.lease.Deleted {
				return meta.Lease{}, 0, api.StreamNotFound("stream %q was deleted", name)
			}
			return meta.Lease{}, 0, api.StreamNotFound("stream %q is being deleted: it was empty for its delete_on_empty min age", name)
		}
		// claimAcquire. A draining star forwards to live leaders but takes
		// no lease.
		if err := n.drainingErr(id); err != nil {
			return meta.Lease{}, 0, err
		}
		var prev *meta.Lease
		if v.leased {
			prev = &v.lease
		}
		// A lease this incarnation released is taken again by CAS like any
		// released lease: a peer may be taking it at the same time.
		next := leader.Successor(prev, n.lease.me, time.Now())
		nv, err := leader.Acquire(ctx, n.meta, id, next, ver)
		if errors.Is(err, leader.ErrLost) {
			if err := ctx.Err(); err != nil {
				return meta.Lease{}, 0, catalog.ContextError(err)
			}
			continue
		}
		if err != nil {
			return meta.Lease{}, 0, n.storageErr("acquire lease", err)
		}
		n.lease.acquired.WithLabelValues(d.from).Inc()
		n.log.Info("lease acquired", "stream", name, "id", id, "from", d.from, "version", next.Version, "pending", len(next.Pending))
		return next, nv, nil
	}
}

// gate is the open gate of a lease this star holds (or retired: see
// retireLease): every earlier holder on Pending has its chains settled
// (both classes: the stream's class may have changed since), then Pending
// is cleared by CAS. Concurrent opens join one settle run per chain; the
// wait ends with ctx, the run does not.
func (n *Node) gate(ctx context.Context, id string, l meta.Lease, ver int64) error {
	holder := l.LeaseHolder
	for len(l.Pending) > 0 {
		for _, h := range l.Pending {
			for _, class := range []meta.Class{meta.Standard, meta.Express} {
				key := settleKey{star: h.Star, class: class, inc: h.Incarnation}
				if err := n.lease.runner.wait(ctx, key, n.settleFn); err != nil {
					if e := catalog.ContextError(err); e != nil {
						return e
					}
					n.log.Error("open gate: settling a previous leader's chain failed", "stream", id, "chain", h.Star+"/"+string(class), "err", err)
					return api.Unavailable("settling the previous leader's chain failed; retry")
				}
			}
		}
		cleared := l
		cleared.Pending = nil
		_, err := leader.Acquire(ctx, n.meta, id, cleared, ver)
		if err == nil {
			return nil
		}
		if !errors.Is(err, leader.ErrLost) {
			return n.storageErr("clear lease pending", err)
		}
		// A concurrent opener here cleared it, or a peer took the lease.
		var ok bool
		l, ver, ok, err = leader.ReadLease(ctx, n.meta, id)
		if err != nil {
			return n.storageErr("read lease", err)
		}
		if !ok || l.LeaseHolder != holder {
			return api.Unavailable("the stream's lease moved while this star opened it; retry")
		}
	}
	return nil
}

// settleFn settles what incarnation key.inc (and earlier) of key.star left
// on its key.class chain. A head owned by a later incarnation needs
// nothing: that incarnation settled the chain before it minted. The loop
// covers an epoch minted by a cut-off writer between the settle's read of
// the head and its fence claim.
func (n *Node) settleFn(ctx context.Context, key settleKey) error {
	ch := chain.New(key.star, key.class, chain.Incarnation(n.cfg.StarID, n.regn.Incarnation), n.meta, n.objects)
	abs := &absorb.Absorber{Star: key.star, Class: key.class, Meta: n.meta, Rip: n.cfg.ripening(key.class), UpdateEpoch: ch.UpdateEpoch}
	for round := 0; ; round++ {
		h, _, ok, err := ch.Head(ctx)
		if err != nil || !ok {
			return err
		}
		owner, err := chain.ParseIncarnation(h.Owner, key.star)
		if err != nil {
			return err
		}
		if owner > key.inc || h.State == meta.HeadSettled {
			return nil
		}
		if round == maxSettleRounds {
			return fmt.Errorf("chain %s/%s: head still unsettled after %d settle rounds", key.star, key.class, round)
		}
		// Never fence past the head judged here: an epoch minted since by a
		// later incarnation (a restart) is that incarnation's to write.
		if err := settle.ChainThrough(ctx, ch, abs, h.Epoch); err != nil {
			return err
		}
		// A marker the closed star left for this epoch is served.
		if err := settle.ClearDue(ctx, n.meta, settle.ChainRef{Star: key.star, Class: key.class}, h.Epoch); err != nil {
			n.log.Warn("settled a chain but could not clear its settle marker (the janitor will)", "chain", key.star+"/"+string(key.class), "err", err)
		}
	}
}

const maxSettleRounds = 8

// settleRunTimeout bounds one settle run of the star-local runner, far
// below forever. A takeover of a few streams' full backlog takes seconds;
// at 10,000 streams the walk writes a ref per stream per 64 slots, and a
// full default backlog can take minutes on DynamoDB (docs/bench.md,
// "Density"). A run the bound cuts off keeps every pass it checkpointed:
// the next open's run walks on from the checkpoint.
const settleRunTimeout = 5 * time.Minute

// settleKey names what one settle run covers: the chain (star, class) up
// to and including incarnation inc's epochs.
type settleKey struct {
	star  string
	class meta.Class
	inc   uint64
}

// settleRunner is the star-local settle runner: one run per key at a time,
// joined by every open that needs it. Runs use the runner's own context
// (cancelled by Close), so a client that gives up stops only its wait.
type settleRunner struct {
	mu      sync.Mutex
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	running map[settleKey]*settleRun
	done    map[settleKey]bool

	runs   *prometheus.CounterVec
	nudged *prometheus.CounterVec
	dur    prometheus.Histogram
}

type settleRun struct {
	done  chan struct{}
	err   error
	cause string // what started it: "gate" (an open) or "nudge" (a closing peer)
}

func newSettleRunner() *settleRunner {
	ctx, cancel := context.WithCancel(context.Background())
	return &settleRunner{
		ctx: ctx, cancel: cancel,
		running: map[settleKey]*settleRun{}, done: map[settleKey]bool{},
		runs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "leader", Name: "gate_settles_total",
			Help: "Open-gate settle runs of a previous leader's chain, by result.",
		}, []string{"result"}),
		nudged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "leader", Name: "nudged_settles_total",
			Help: "Settle runs of a gracefully closed peer's chains that its nudge started, by result.",
		}, []string{"result"}),
		dur: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "starlog", Subsystem: "leader", Name: "gate_settle_duration_seconds",
			Help:    "Duration of open-gate settle runs.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14), // 5 ms … 41 s
		}),
	}
}

// wait joins or starts the run of key and waits for it or ctx. A key that
// settled once stays settled: only its incarnation could add epochs, and
// the run's fence claim stopped that.
func (r *settleRunner) wait(ctx context.Context, key settleKey, fn func(context.Context, settleKey) error) error {
	run, err := r.start(key, "gate", fn)
	if run == nil {
		return err
	}
	select {
	case <-run.done:
		return run.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// start joins or starts the run of key without waiting for it; a nil run
// means the key is settled (nil error) or the runner closed.
func (r *settleRunner) start(key settleKey, cause string, fn func(context.Context, settleKey) error) (*settleRun, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done[key] {
		return nil, nil
	}
	run := r.running[key]
	if run == nil {
		if err := r.ctx.Err(); err != nil {
			return nil, loglet.ErrClosed
		}
		run = &settleRun{done: make(chan struct{}), cause: cause}
		r.running[key] = run
		r.wg.Add(1)
		go r.run(key, run, fn)
	}
	return run, nil
}

func (r *settleRunner) run(key settleKey, run *settleRun, fn func(context.Context, settleKey) error) {
	defer r.wg.Done()
	start := time.Now()
	// A run is bounded, so a settle stuck on a store refusing it (a bucket
	// down for good, a grant missing) ends as an error the metric counts
	// and the log names; the next open that needs the chain starts a new
	// run.
	ctx, cancel := context.WithTimeout(r.ctx, settleRunTimeout)
	err := fn(ctx, key)
	cancel()
	r.dur.Observe(time.Since(start).Seconds())
	res := "ok"
	if err != nil {
		res = "error"
	}
	if run.cause == "nudge" {
		r.nudged.WithLabelValues(res).Inc()
	} else {
		r.runs.WithLabelValues(res).Inc()
	}
	r.mu.Lock()
	delete(r.running, key)
	if err == nil {
		r.done[key] = true
	}
	run.err = err
	r.mu.Unlock()
	close(run.done)
}

// close cancels the runs and waits for them.
func (r *settleRunner) close() {
	r.cancel()
	r.wg.Wait()
}

// LeaderOf names the live peer that leads a stream, for requests that
// change a stream its leader holds open (reconfigure, delete): they are
// forwarded so the leader applies them to its facade at once. It is nil
// when the stream is open here, unled, released, led by a star that is
// not live, or missing; the request then runs here.
func (n *Node) LeaderOf(ctx context.Context, basin, name string) *NotLeaderError {
	if api.ValidateStreamName(name) != nil {
		return nil
	}
	b, err := n.LiveBasin(ctx, basin)
	if err != nil {
		return nil
	}
	_, e, err := n.Stream(ctx, b, basin, name)
	if err != nil || e == nil {
		return nil
	}
	id := e.Row.ID
	if n.ledIfOpen(id) != nil {
		return nil
	}
	// A change writes the metastore anyway: an old cache entry is judged
	// again here rather than trusted, so it reaches the leader of now.
	if f := n.lease.fwd.fresh(id); f != nil {
		n.lease.forwards.Inc()
		return f
	}
	_, _, d, err := n.judge(ctx, id)
	if err != nil || d.act != claimForward {
		return nil
	}
	f := &NotLeaderError{StreamID: id, Leader: d.target, Address: d.address}
	n.lease.fwd.remember(f, n.cfg.LeaseCacheTTL)
	return f
}
