package lead

import (
	"context"
	"sync"
	"time"
)

// The forward cache: where this star last knew each stream it does not
// lead to be led. A forward is served from it without a metastore read,
// however old the entry (invariant 6: a forwarding star's append touches
// the metastore no more than the leader's). An entry older than the lease
// cache TTL is refreshed in the background, never on the request path;
// while the metastore cannot be read, the refresh keeps the entry and the
// star keeps forwarding to the leader it knew. Staleness is harmless to
// safety: the target refuses (not the leader) or fails to answer, and the
// server then forgets the entry (ForgetLeader), so the next request
// resolves the lease afresh.

// forwardRefreshTimeout bounds one background refresh (two point reads).
const forwardRefreshTimeout = 5 * time.Second

// maxForwardRefreshes bounds the refreshes running at once; an entry
// that finds no slot is refreshed by a later request.
const maxForwardRefreshes = 16

type forwardEntry struct {
	err *NotLeaderError
	// until is when the entry turns old: still served, and the first
	// request after it starts a background refresh.
	until      time.Time
	refreshing bool
}

// forwardCache holds the entries, by stream id, and runs their refreshes
// until closed.
type forwardCache struct {
	mu      sync.Mutex
	entries map[string]forwardEntry
	slots   chan struct{}

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

func newForwardCache() *forwardCache {
	ctx, cancel := context.WithCancel(context.Background())
	return &forwardCache{entries: map[string]forwardEntry{}, slots: make(chan struct{}, maxForwardRefreshes), ctx: ctx, cancel: cancel}
}

// get returns the entry of stream id, however old, and whether the caller
// should start its refresh (it is old and none runs).
func (c *forwardCache) get(id string) (f *NotLeaderError, refresh bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok {
		return nil, false
	}
	if !e.refreshing && !time.Now().Before(e.until) {
		e.refreshing = true
		c.entries[id] = e
		refresh = true
	}
	return e.err, refresh
}

// fresh returns the entry of stream id while it is younger than its TTL.
func (c *forwardCache) fresh(id string) *NotLeaderError {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[id]; ok && time.Now().Before(e.until) {
		return e.err
	}
	return nil
}

func (c *forwardCache) remember(f *NotLeaderError, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.entries[f.StreamID] = forwardEntry{err: f, until: time.Now().Add(ttl)}
}

func (c *forwardCache) forget(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.entries, id)
}

// settle applies a refresh's verdict on old, unless the entry was
// forgotten or replaced meanwhile (that view is newer).
func (c *forwardCache) settle(id string, old *NotLeaderError, v forwardVerdict, next *NotLeaderError, ttl time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[id]
	if !ok || e.err != old {
		return
	}
	switch v {
	case forwardKeep:
		// Refreshed again one TTL later, not by the next request: during an
		// outage that bounds the failing reads to one per stream per TTL.
		c.entries[id] = forwardEntry{err: old, until: time.Now().Add(ttl)}
	case forwardReplace:
		c.entries[id] = forwardEntry{err: next, until: time.Now().Add(ttl)}
	case forwardDrop:
		delete(c.entries, id)
	}
}

// run starts fn in the background, bounded by the slots; false when no
// slot is free or the cache is closed.
func (c *forwardCache) run(fn func(context.Context)) bool {
	select {
	case c.slots <- struct{}{}:
	default:
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx.Err() != nil {
		<-c.slots
		return false
	}
	c.wg.Go(func() {
		defer func() { <-c.slots }()
		fn(c.ctx)
	})
	return true
}

// close stops the refreshes and waits for them.
func (c *forwardCache) close() {
	c.mu.Lock()
	c.cancel()
	c.mu.Unlock()
	c.wg.Wait()
}

// forwardVerdict is what a refresh does with an entry.
type forwardVerdict uint8

const (
	forwardKeep    forwardVerdict = iota + 1 // forward on as before
	forwardReplace                           // forward to the leader named now
	forwardDrop                              // forget: the next request resolves the lease itself
)

// decideForward judges a refresh of the cached forward target cached from
// the lease as read now (v, or readErr when it could not be read): it
// keeps what it knew while the metastore cannot say better, follows the
// lease to a live leader, and drops the entry when the request path must
// decide (this star holds or should take the lease, or the leader looks
// dead to a star connected long enough to judge it: the takeover is the
// request path's, which marks it dead and fences).
func decideForward(cached *NotLeaderError, v claimView, readErr error) (forwardVerdict, *NotLeaderError) {
	if readErr != nil {
		return forwardKeep, nil
	}
	d := decideClaim(v)
	switch d.act {
	case claimForward:
		return forwardReplace, &NotLeaderError{StreamID: cached.StreamID, Leader: d.target, Address: d.address}
	case claimWait:
		// Back from an outage, this star cannot judge heartbeats yet.
		return forwardKeep, nil
	}
	return forwardDrop, nil
}

// CachedForward is where to forward a request for stream id, from the
// forward cache (nil: not cached); an old entry is refreshed in the
// background.
func (ls *Leadership) CachedForward(id string) *NotLeaderError {
	f, refresh := ls.fwd.get(id)
	if f == nil {
		return nil
	}
	ls.forwards.Inc()
	if refresh {
		ls.refreshForward(id, f)
	}
	return f
}

// refreshForward re-reads the lease of stream id in the background and
// settles its cached entry old.
func (ls *Leadership) refreshForward(id string, old *NotLeaderError) {
	ttl := ls.cfg.LeaseCacheTTL
	started := ls.fwd.run(func(ctx context.Context) {
		ctx, cancel := context.WithTimeout(ctx, forwardRefreshTimeout)
		defer cancel()
		v, _, err := ls.readClaim(ctx, id)
		verdict, next := decideForward(old, v, err)
		if err != nil {
			ls.log.Debug("forward cache: lease unreadable; forwarding on to the leader last known", "id", id, "leader", old.Leader.Star, "err", err)
		} else if verdict != forwardKeep && (next == nil || next.Leader != old.Leader || next.Address != old.Address) {
			ls.log.Debug("forward cache: leader changed", "id", id, "was", old.Leader.Star, "verdict", verdict)
		}
		ls.fwd.settle(id, old, verdict, next, ttl)
	})
	if !started {
		// Let a later request try again.
		ls.fwd.settle(id, old, forwardKeep, nil, 0)
	}
}

// ForgetForward drops what this star remembers about who leads stream
// id, so the next request resolves the lease.
func (ls *Leadership) ForgetForward(id string) { ls.fwd.forget(id) }

// LeaderNow names the live peer that leads stream id, for a request that
// changes the stream (it writes the metastore anyway): a cache entry
// younger than its TTL, else the lease judged again, so it reaches the
// leader of now; nil when no live peer leads it.
func (ls *Leadership) LeaderNow(ctx context.Context, id string) *NotLeaderError {
	if f := ls.fwd.fresh(id); f != nil {
		ls.forwards.Inc()
		return f
	}
	_, _, d, err := ls.judge(ctx, id)
	if err != nil || d.act != claimForward {
		return nil
	}
	f := &NotLeaderError{StreamID: id, Leader: d.target, Address: d.address}
	ls.fwd.remember(f, ls.cfg.LeaseCacheTTL)
	return f
}

// RememberForward records target as stream target.StreamID's leader (a
// handoff, before the stream is dropped here).
func (ls *Leadership) RememberForward(target *NotLeaderError) {
	ls.fwd.remember(target, ls.cfg.LeaseCacheTTL)
}
