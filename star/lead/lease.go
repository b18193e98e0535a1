// Package lead is a star's leadership of its streams: the lease claim
// (decideClaim, a pure function) and the open gate with its settle
// runner, the registry row and its heartbeat, the forward cache and its
// refreshes, retiring a deleted stream's lease, the balancer (its plan
// pure), the drain, and what a star tells its peers (settle nudges, basin
// rechecks).
//
// Layering: lead sits above star/catalog (whose errors it answers with)
// and below star/node, which holds the led streams' slots and asks lead
// whether it may lead, and whom to forward to. lead imports no node.
package lead

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/star/catalog"
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

// Config is what a star's leadership needs to know of the star.
type Config struct {
	// Me is this incarnation of the star.
	Me meta.LeaseHolder
	// Reg is its registration as Register wrote it, at version RegVer;
	// Registered is when (its first beat).
	Reg        meta.Registration
	RegVer     int64
	Registered time.Time
	Meta       meta.Store
	Objects    objstore.Store
	Logger     *slog.Logger
	Registry   prometheus.Registerer
	// DeadAfter is the registry's dead-after bound; LeaseCacheTTL how
	// long a forward target is trusted before a background refresh.
	DeadAfter     time.Duration
	LeaseCacheTTL time.Duration
	// RowCheckEvery is how soon a live star stops leading a deleted
	// stream (the catalog's row check): what a retire's 503 says.
	RowCheckEvery time.Duration
	// Ripening is a storage class's ripening, for the open gate's settle.
	Ripening func(meta.Class) absorb.Ripening
	// PeerTLS and PeerHeader are how this star talks to its peers.
	PeerTLS    *tls.Config
	PeerHeader http.Header
}

// Leadership is the star's multi-star state: its own liveness, the
// lease claims, the forward cache, and the open gate's settle runner.
type Leadership struct {
	cfg  Config
	me   meta.LeaseHolder
	meta meta.Store
	log  *slog.Logger

	// base anchors the monotonic clock of lastBeat, the offset of the
	// last heartbeat that was written (taken before the write).
	base       time.Time
	regVer     int64 // the registry row's version, the heartbeat's to write
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
	// refused counts opens StillHeld refused, by reason: "deleted" (the
	// lease was retired) or "moved" (released, emptied, taken or gone).
	refused *prometheus.CounterVec
	// retiresLost counts a retire's lease writes that lost their CAS to
	// another writer (the retire then judges the lease again).
	retiresLost prometheus.Counter
}

// New starts the leadership state of incarnation cfg.Me, whose
// registration was written at cfg.Registered.
func New(cfg Config) (*Leadership, error) {
	ls := &Leadership{
		cfg: cfg, me: cfg.Me, meta: cfg.Meta, log: cfg.Logger, base: cfg.Registered, regVer: cfg.RegVer, fwd: newForwardCache(),
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
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "leader", Name: "opens_refused_total",
			Help: "Opens refused after reading the stream's rows because the lease was no longer this star's, by reason (deleted: retired; moved: released, emptied, taken or gone).",
		}, []string{"reason"}),
		retiresLost: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "starlog", Subsystem: "leader", Name: "lease_retires_lost_total",
			Help: "Writes of a deleted stream's lease by a retire that lost their CAS to another writer (the retire judges the lease again).",
		}),
	}
	if ls.log == nil {
		ls.log = slog.Default()
	}
	ls.runner = newSettleRunner()
	for _, c := range []prometheus.Collector{ls.acquired, ls.forwards, ls.shed, ls.refused, ls.retiresLost, ls.runner.runs, ls.runner.nudged, ls.runner.dur} {
		if err := cfg.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("leadership metrics: register: %w", err)
		}
	}
	ls.BeatAt(ls.base, true)
	return ls, nil
}

// Me is this incarnation as a lease holder.
func (ls *Leadership) Me() meta.LeaseHolder { return ls.me }

// Close stops the settle runs and the forward refreshes and waits for
// them.
func (ls *Leadership) Close() {
	ls.runner.close()
	ls.fwd.close()
}

// Superseded reports whether the heartbeat found this incarnation's
// registry row taken (MarkSuperseded): it leads nothing more.
func (ls *Leadership) Superseded() bool { return ls.superseded.Load() }

// MarkSuperseded records that a later incarnation registered or peers
// presumed this one dead.
func (ls *Leadership) MarkSuperseded() { ls.superseded.Store(true) }

// CountShed counts an open stream dropped because this star lost
// leadership.
func (ls *Leadership) CountShed() { ls.shed.Inc() }

// NextBeat is what a heartbeat written at t says in ConnectedSince, and
// whether it begins a new run: it does after a beat that failed, and after
// a gap of half the dead-after bound or more since the last beat that
// landed (the process was paused, or the write was slow: nothing shows
// the metastore was reachable in between).
func (ls *Leadership) NextBeat(t time.Time, deadAfter time.Duration) (connectedSince int64, newRun bool) {
	ls.run.Lock()
	defer ls.run.Unlock()
	if ls.run.failing || t.Sub(ls.base)-time.Duration(ls.lastBeat.Load()) >= deadAfter/2 {
		return t.UnixMilli(), true
	}
	return ls.run.connectedSince, false
}

// BeatAt records a heartbeat written at t (monotonic) that landed; newRun
// is NextBeat's verdict for it.
func (ls *Leadership) BeatAt(t time.Time, newRun bool) {
	ls.run.Lock()
	defer ls.run.Unlock()
	if newRun {
		ls.run.connectedSince = t.UnixMilli()
	}
	ls.run.failing = false
	ls.lastBeat.Store(int64(t.Sub(ls.base)))
}

// BeatFailed records a heartbeat that did not land.
func (ls *Leadership) BeatFailed() {
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
func (ls *Leadership) witness(now time.Time, deadAfter time.Duration) leader.Witness {
	ls.run.Lock()
	defer ls.run.Unlock()
	if ls.run.failing || ls.SinceBeat() >= deadAfter/2 {
		return leader.Witness{}
	}
	return leader.Witness{Star: ls.me.Star, Reg: meta.Registration{
		Incarnation: ls.me.Incarnation, State: meta.StarLive,
		StartedAt: ls.base.UnixMilli(), ConnectedSince: ls.run.connectedSince, Heartbeat: now.UnixMilli(),
	}}
}

// SinceBeat is the time since the last heartbeat that was written.
func (ls *Leadership) SinceBeat() time.Duration {
	return time.Since(ls.base) - time.Duration(ls.lastBeat.Load())
}

type forwardedKey struct{}

// Forwarded marks ctx as a request another star forwarded here: the
// Leadership check skips the forward cache and reads the lease, since the
// sender's view is newer than the cached one when a stream was just handed
// to this star.
func Forwarded(ctx context.Context) context.Context {
	return context.WithValue(ctx, forwardedKey{}, true)
}

// IsForwarded reports whether ctx is marked Forwarded.
func IsForwarded(ctx context.Context) bool { return ctx.Value(forwardedKey{}) != nil }

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
	// now (Leadership.witness); zero when it cannot testify.
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
// testdata/claim.txt (TestDecideClaim) covers every case.
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
func (ls *Leadership) readClaim(ctx context.Context, id string) (claimView, int64, error) {
	v := claimView{me: ls.me, deadAfter: ls.cfg.DeadAfter}
	l, ver, ok, err := leader.ReadLease(ctx, ls.meta, id)
	if err != nil {
		return v, 0, err
	}
	v.lease, v.leased = l, ok
	if star := regStar(l, ok, ls.me); star != "" {
		if v.reg, _, v.registered, err = leader.ReadRegistration(ctx, ls.meta, star); err != nil {
			return v, 0, err
		}
	}
	v.now = time.Now()
	v.self = ls.witness(v.now, ls.cfg.DeadAfter)
	return v, ver, nil
}

// judge reads and judges stream id's lease; a stale holder is marked dead
// (the janitor does the same) and the lease judged once more.
func (ls *Leadership) judge(ctx context.Context, id string) (claimView, int64, claimDecision, error) {
	v, ver, err := ls.readClaim(ctx, id)
	if err != nil {
		return v, 0, claimDecision{}, err
	}
	d := decideClaim(v)
	if d.act != claimMarkDead {
		return v, ver, d, nil
	}
	r, dead, by, err := leader.MarkPresumedDead(ctx, ls.meta, v.lease.Star, []leader.Witness{v.self}, v.now, ls.cfg.DeadAfter)
	if err != nil {
		return v, 0, claimDecision{}, err
	}
	if dead && by != "" {
		ls.log.Warn("marked star dead: heartbeat too old", "dead_star", v.lease.Star, "incarnation", r.Incarnation, "heartbeat", time.UnixMilli(r.Heartbeat),
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

// Claim returns the stream's lease once this incarnation holds it,
// acquiring it by CAS when decideClaim says so. A live peer's lease is a
// *NotLeaderError. draining refuses a new lease of stream id while the
// star drains (nil: it may take it).
func (ls *Leadership) Claim(ctx context.Context, id, name string, draining func(id string) error) (meta.Lease, int64, error) {
	for {
		v, ver, d, err := ls.judge(ctx, id)
		if err != nil {
			return meta.Lease{}, 0, ls.storageErr("resolve lease", err)
		}
		switch d.act {
		case claimHeld:
			return v.lease, ver, nil
		case claimForward:
			f := &NotLeaderError{StreamID: id, Leader: d.target, Address: d.address}
			ls.fwd.remember(f, ls.cfg.LeaseCacheTTL)
			ls.forwards.Inc()
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
		if err := draining(id); err != nil {
			return meta.Lease{}, 0, err
		}
		var prev *meta.Lease
		if v.leased {
			prev = &v.lease
		}
		// A lease this incarnation released is taken again by CAS like any
		// released lease: a peer may be taking it at the same time.
		next := leader.Successor(prev, ls.me, time.Now())
		nv, err := leader.Acquire(ctx, ls.meta, id, next, ver)
		if errors.Is(err, leader.ErrLost) {
			if err := ctx.Err(); err != nil {
				return meta.Lease{}, 0, catalog.ContextError(err)
			}
			continue
		}
		if err != nil {
			return meta.Lease{}, 0, ls.storageErr("acquire lease", err)
		}
		ls.acquired.WithLabelValues(d.from).Inc()
		ls.log.Info("lease acquired", "stream", name, "id", id, "from", d.from, "version", next.Version, "pending", len(next.Pending))
		return next, nv, nil
	}
}

// Gate is the open gate of a lease this star holds (or retired: see
// retireLease): every earlier holder on Pending has its chains settled
// (both classes: the stream's class may have changed since), then Pending
// is cleared by CAS. Concurrent opens join one settle run per chain; the
// wait ends with ctx, the run does not.
func (ls *Leadership) Gate(ctx context.Context, id string, l meta.Lease, ver int64) error {
	holder := l.LeaseHolder
	for len(l.Pending) > 0 {
		for _, h := range l.Pending {
			for _, class := range []meta.Class{meta.Standard, meta.Express} {
				key := settleKey{star: h.Star, class: class, inc: h.Incarnation}
				if err := ls.runner.wait(ctx, key, ls.settleFn); err != nil {
					if e := catalog.ContextError(err); e != nil {
						return e
					}
					ls.log.Error("open gate: settling a previous leader's chain failed", "stream", id, "chain", h.Star+"/"+string(class), "err", err)
					return api.Unavailable("settling the previous leader's chain failed; retry")
				}
			}
		}
		cleared := l
		cleared.Pending = nil
		_, err := leader.Acquire(ctx, ls.meta, id, cleared, ver)
		if err == nil {
			return nil
		}
		if !errors.Is(err, leader.ErrLost) {
			return ls.storageErr("clear lease pending", err)
		}
		// A concurrent opener here cleared it, or a peer took the lease.
		var ok bool
		l, ver, ok, err = leader.ReadLease(ctx, ls.meta, id)
		if err != nil {
			return ls.storageErr("read lease", err)
		}
		if !ok || l.LeaseHolder != holder {
			return api.Unavailable("the stream's lease moved while this star opened it; retry")
		}
	}
	return nil
}

func (ls *Leadership) storageErr(what string, err error) error {
	return catalog.StorageErr(ls.log, what, err)
}

// StillHeld is the check an open makes after it read the stream's rows:
// nil while this incarnation holds stream id's lease. The janitor retires
// a deleted stream's lease before it deletes any of the stream's rows
// (shared/reclaim), so rows read under a lease still held after the read
// were whole; a retired, released or taken lease refuses the open, which
// would otherwise start at whatever remainder of the rows it read.
func (ls *Leadership) StillHeld(ctx context.Context, id, name string) error {
	l, _, ok, err := leader.ReadLease(ctx, ls.meta, id)
	switch {
	case err != nil:
		return ls.storageErr("read lease", err)
	case ok && l.Deleted:
		ls.refused.WithLabelValues("deleted").Inc()
		return api.StreamNotFound("stream %q was deleted", name)
	case !ok || l.LeaseHolder != ls.me || l.Released || l.Emptied:
		ls.refused.WithLabelValues("moved").Inc()
		return api.Unavailable("the stream's lease moved while this star opened it; retry")
	}
	return nil
}
