package node

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/catalog"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/lead"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/streams"
)

// ledStream is a stream this star leads: its facade joined to the loglet
// of its storage class. The class is pinned while the stream stays open
// here: a reconfigured storage class applies the next time a star opens
// the stream, because moving a live stream between chains would need its
// unabsorbed tail window covered first (a handoff, docs/design.md §9).
type ledStream struct {
	s      *streams.Stream
	key    catalog.StreamKey
	name   string
	class  meta.Class
	loglet *loglet.Loglet
	// deleted ends sessions still holding the stream after its delete.
	deleted atomic.Bool
	// lost is the node's permanent loss of leadership (zombie).
	lost func() error

	// admit orders Submit (read side) against a handoff's stop (write
	// side), so the stop sees the end of every batch admitted before it.
	admit sync.RWMutex
	// moving is the error new requests get while a handoff runs.
	moving atomic.Pointer[error]
	// maxEnd is the greatest end seq num sequenced so far.
	maxEnd atomic.Uint64
	// released says a handoff dropped the stream.
	released atomic.Bool

	// users counts the open appenders and cursors, lastUse is when a
	// request last used the stream (unix ns): the idle release
	// (hygiene.go) takes only a stream with no user for a while.
	users   atomic.Int64
	lastUse atomic.Int64

	// foundTrim is the trim point findTrim found in the records, once
	// trimFound is set (trimpoint.go); findSem (capacity 1) runs one find
	// at a time: a channel, not a mutex, so a waiter gives up with its
	// request and is durably blocked in the simulations' synctest bubbles.
	foundTrim atomic.Uint64
	trimFound atomic.Bool
	findSem   chan struct{}

	// The stream's idempotent producers (producers.go): loaded into its
	// sequencer, the tail of the last checkpoint, a checkpoint in flight.
	producersLoaded  atomic.Bool
	producerCkpt     atomic.Uint64
	producerCkptBusy atomic.Bool
	producerLoadMu   sync.Mutex
	producerLoad     *producerLoad // the load in flight, if any
}

// slotLock is a mutex made of a channel: an open holds its slot's lock
// across metastore and object store calls, and a goroutine waiting for it
// must be durably blocked in the simulations' synctest bubbles (which a
// sync.Mutex waiter is not: a row check waiting on a slot an open held
// across a scheduled call stalled the catalog simulation's seed 9).
type slotLock struct{ c chan struct{} }

func newSlotLock() slotLock { return slotLock{c: make(chan struct{}, 1)} }

func (l slotLock) Lock()   { l.c <- struct{}{} }
func (l slotLock) Unlock() { <-l.c }

// TryLock takes the lock if it is free, without waiting.
func (l slotLock) TryLock() bool {
	select {
	case l.c <- struct{}{}:
		return true
	default:
		return false
	}
}

func (l *ledStream) touch() { l.lastUse.Store(time.Now().UnixNano()) }

func (l *ledStream) acquire() { l.users.Add(1); l.touch() }

func (l *ledStream) release() { l.touch(); l.users.Add(-1) }

// movingErr is the error of a request while a handoff runs, else nil.
func (l *ledStream) movingErr() error {
	if p := l.moving.Load(); p != nil {
		return *p
	}
	return nil
}

// gone is the error of a request or session on a stream this star must
// not serve any more: deleted under it, handed off, or shed because the
// star lost leadership for good (its loglet was deposed, or it is a
// zombie). A late heartbeat is not among them: appends go on through a
// metastore outage (see selfLive), and answers from memory check the
// clock guard themselves.
func (l *ledStream) gone() error {
	if l.deleted.Load() {
		return api.StreamDeletionPending("stream %q is being deleted", l.name)
	}
	if errors.Is(l.loglet.Err(), loglet.ErrDeposed) {
		return api.Unavailable("this star no longer leads stream %q; retry", l.name)
	}
	if l.released.Load() {
		return api.Unavailable("this star handed stream %q off; retry", l.name)
	}
	if err := l.movingErr(); err != nil {
		return err
	}
	if l.lost != nil {
		return l.lost()
	}
	return nil
}

// ledSlot opens a stream at most once; deleted stays set so a request that
// raced the delete cannot open a second facade for the same stream id.
// releases counts the stream's releases here (drop): a request opens the
// stream only if none happened since it began to judge the lease, because
// a judgment taken before a release (the lease read as held by this star)
// says nothing after it (a successor took the released lease without
// fencing this star).
type ledSlot struct {
	mu       slotLock
	l        *ledStream
	deleted  bool
	releases uint64
}

// lead returns the led stream for e, or a *NotLeaderError naming the star
// to forward to. This is the one leadership check (docs/design.md §9):
//
//   - a stream open here is served until this star loses it for good (its
//     loglet deposed, or it is a zombie), then shed (dropped, so the next
//     request resolves the lease again); no metastore operation, and no
//     clock: see selfLive;
//   - a stream this star knows to be led elsewhere is forwarded from the
//     forward cache, also without a metastore operation (forward.go);
//   - otherwise, while this star's heartbeat is recent, the lease decides
//     (decideClaim): led by a live peer, forward; unled, led by a star
//     that is not live, or released, acquire it by CAS;
//   - a new holder passes the open gate (settles every earlier holder's
//     chain that may hold records no row covers) and opens the stream at
//     the end of its greatest row.
func (n *Node) lead(ctx context.Context, b *catalog.BasinEntry, e *catalog.StreamEntry) (*ledStream, error) {
	return n.leadIn(ctx, n.slot(e.Row.ID), b, e)
}

// leadIn is lead through slot, the slot it took for e's stream id (which
// the idle release may forget meanwhile: see forget).
func (n *Node) leadIn(ctx context.Context, slot *ledSlot, b *catalog.BasinEntry, e *catalog.StreamEntry) (*ledStream, error) {
	id := e.Row.ID
	open, releases, err := n.ledOpen(slot, e.Key.Name)
	if open != nil || err != nil {
		return open, err
	}
	if err := n.zombie(); err != nil {
		return nil, err
	}
	if n.isClosed() {
		return nil, api.Unavailable("this star is shutting down; retry")
	}
	if !lead.IsForwarded(ctx) {
		if f := n.lease.CachedForward(id); f != nil {
			return nil, f
		}
	}
	// No new lease for a star its peers may be about to presume dead.
	if err := n.selfLive(); err != nil {
		return nil, err
	}
	b, e, err = n.cat.FreshRows(ctx, e)
	if err != nil {
		return nil, err
	}
	lease, ver, err := n.lease.Claim(ctx, id, e.Key.Name, n.drain.Refusal)
	if err != nil {
		return nil, err
	}
	if err := n.lease.Gate(ctx, id, lease, ver); err != nil {
		return nil, err
	}
	if h := n.hooks.BeforeOpen; h != nil {
		h(ctx, id)
	}

	slot.mu.Lock()
	defer slot.mu.Unlock()
	if !n.slotIs(id, slot) {
		// The idle release forgot this empty slot meanwhile: never open
		// beside the current one.
		return nil, api.Unavailable("stream %q was released while this star opened it; retry", e.Key.Name)
	}
	if slot.deleted {
		return nil, api.StreamDeletionPending("stream %q is being deleted", e.Key.Name)
	}
	if slot.l != nil {
		return slot.l, nil
	}
	if slot.releases != releases {
		return nil, api.Unavailable("stream %q was released while this star opened it; retry", e.Key.Name)
	}
	// A stream shed by this incarnation is never reopened by it: its pool
	// and flight index may still hold the stream's seq nums.
	if err := n.zombie(); err != nil {
		return nil, err
	}
	// A star leaving opens nothing: its drain or close released what it
	// found open, and would not see a stream opened after.
	if n.drain.Draining() {
		return nil, &NotLeaderError{StreamID: id}
	}
	if n.isClosed() {
		return nil, api.Unavailable("this star is shutting down; retry")
	}
	resolved := e.Row.Config.Resolve(b.Row.Config.DefaultStreamConfig)
	class := meta.Class(resolved.StorageClass)
	l := n.loglets[class]
	if l == nil {
		return nil, api.Other("no loglet for storage class %q", class)
	}
	s, err := streams.Open(ctx, n.meta, l, id, class, facadeConfig(resolved))
	if err != nil {
		return nil, n.storageErr("open stream", err)
	}
	// The rows just read are whole only if the lease is still ours: the
	// janitor retires a deleted stream's lease before deleting its rows.
	if err := n.lease.StillHeld(ctx, id, e.Key.Name); err != nil {
		l.Absorber().Forget(id)
		return nil, err
	}
	slot.l = &ledStream{s: s, key: e.Key, name: e.Key.Name, class: class, loglet: l, lost: n.zombie, findSem: make(chan struct{}, 1)}
	slot.l.touch()
	n.log.Debug("leading stream", "basin", e.Key.Basin, "stream", e.Key.Name, "id", id, "class", class, "tail", s.Tail().SeqNum, "lease_version", lease.Version)
	return slot.l, nil
}

// Route is the leadership check of a data request (append, check-tail,
// read, and their sessions) before the server reads its body: nil when
// this star leads the stream (it acquires and opens it as the request
// would) or the stream is missing and the request may create it here, a
// *NotLeaderError naming the leader to forward to, or the error the
// request itself would get.
func (n *Node) Route(ctx context.Context, basin, name string, create *api.StreamConfig, onAppend bool) error {
	// A missing stream is not created here: the request creates it once
	// it passes its own checks (a new stream has no leader to forward to).
	b, e, err := n.cat.LiveStream(ctx, basin, name, catalog.AutoCreate{OnAppend: onAppend, OnRead: !onAppend, Config: create, Lazy: true})
	if err != nil || e == nil {
		return err
	}
	_, err = n.lead(ctx, b, e)
	return err
}

// slot returns id's slot, creating it.
func (n *Node) slot(id string) *ledSlot {
	n.mu.Lock()
	defer n.mu.Unlock()
	slot := n.led[id]
	if slot == nil {
		slot = &ledSlot{mu: newSlotLock()}
		n.led[id] = slot
	}
	return slot
}

// ledOpen returns the stream open in slot, shedding it when this star may
// no longer serve it; (nil, releases, nil) when nothing is open, with the
// slot's release count as the open must find it again (ledSlot).
func (n *Node) ledOpen(slot *ledSlot, name string) (*ledStream, uint64, error) {
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.deleted {
		return nil, 0, api.StreamDeletionPending("stream %q is being deleted", name)
	}
	if slot.l == nil {
		return nil, slot.releases, nil
	}
	if err := slot.l.movingErr(); err != nil {
		return nil, 0, err
	}
	if err := slot.l.gone(); err != nil {
		// Only a permanent loss sheds (a handoff drops the stream itself):
		// reopening in this incarnation could reassign the seq nums of
		// flights still in its pool or flight index.
		if n.zombie() != nil || errors.Is(slot.l.loglet.Err(), loglet.ErrDeposed) {
			n.log.Warn("shedding stream: this star no longer leads it", "stream", name, "id", slot.l.s.ID, "err", err)
			slot.l = nil
			n.lease.CountShed()
		}
		return nil, 0, err
	}
	slot.l.touch()
	return slot.l, 0, nil
}

// ledIfOpen returns the led stream of id if it is open here.
func (n *Node) ledIfOpen(id string) *ledStream {
	n.mu.Lock()
	slot := n.led[id]
	n.mu.Unlock()
	if slot == nil {
		return nil
	}
	slot.mu.Lock()
	defer slot.mu.Unlock()
	return slot.l
}

// unlead stops leading a deleted stream for good.
func (n *Node) unlead(id string) {
	n.mu.Lock()
	slot := n.led[id]
	if slot == nil {
		slot = &ledSlot{mu: newSlotLock()}
		n.led[id] = slot
	}
	n.mu.Unlock()
	slot.mu.Lock()
	defer slot.mu.Unlock()
	if slot.l != nil {
		slot.l.deleted.Store(true)
		slot.l.loglet.Absorber().Forget(id)
	}
	slot.l, slot.deleted = nil, true
}

// facadeConfig is the facade's part of a resolved stream config.
func facadeConfig(c api.EffectiveStreamConfig) facade.Config {
	mode := facade.ClientPrefer
	switch c.TimestampingMode {
	case api.ClientRequire:
		mode = facade.ClientRequire
	case api.Arrival:
		mode = facade.Arrival
	}
	return facade.Config{Mode: mode, Uncapped: c.Uncapped}
}
