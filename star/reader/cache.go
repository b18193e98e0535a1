package reader

import (
	"container/list"
	"context"
	"errors"
	"sync"

	"golang.org/x/sync/singleflight"
)

// lru is a least-recently-used map bounded by the total cost of its
// entries (bytes for data, 1 for a count-bounded cache). Safe for
// concurrent use.
type lru[V any] struct {
	mu       sync.Mutex
	capacity int64
	used     int64
	order    list.List // front: most recently used; values are *lruEntry[V]
	items    map[string]*list.Element
}

type lruEntry[V any] struct {
	key  string
	val  V
	cost int64
}

func newLRU[V any](capacity int64) *lru[V] {
	return &lru[V]{capacity: capacity, items: make(map[string]*list.Element)}
}

func (c *lru[V]) get(key string) (V, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.items[key]
	if !ok {
		var zero V
		return zero, false
	}
	c.order.MoveToFront(el)
	return el.Value.(*lruEntry[V]).val, true
}

// add stores val under key, evicting the least recently used entries to
// stay within capacity. An entry costlier than the whole cache is not
// stored: it would only flush everything else.
func (c *lru[V]) add(key string, val V, cost int64) {
	if cost < 1 {
		cost = 1
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if cost > c.capacity {
		return
	}
	if el, ok := c.items[key]; ok {
		e := el.Value.(*lruEntry[V])
		c.used += cost - e.cost
		e.val, e.cost = val, cost
		c.order.MoveToFront(el)
	} else {
		c.items[key] = c.order.PushFront(&lruEntry[V]{key: key, val: val, cost: cost})
		c.used += cost
	}
	for c.used > c.capacity {
		el := c.order.Back()
		e := el.Value.(*lruEntry[V])
		c.order.Remove(el)
		delete(c.items, e.key)
		c.used -= e.cost
	}
}

// size returns the entry count and total cost held.
func (c *lru[V]) size() (n int, cost int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.items), c.used
}

// loader fills one lru on misses, collapsing concurrent misses of a key
// into one load (a tailing reader's fan-out would otherwise GET the same
// extent once per session).
type loader[V any] struct {
	cache  *lru[V]
	flight singleflight.Group
	kind   string
	m      *metrics
}

func newLoader[V any](capacity int64, kind string, m *metrics) *loader[V] {
	return &loader[V]{cache: newLRU[V](capacity), kind: kind, m: m}
}

// get returns the cached value of key or loads it. load reports the value's
// cost. A caller whose own context is live retries when the shared load it
// joined failed only because the leading caller's context ended.
func (l *loader[V]) get(ctx context.Context, key string, load func(context.Context) (V, int64, error)) (V, error) {
	ctx, ft := startFetch(ctx, l.kind, key) // nil unless traced
	v, err := l.fetch(ctx, key, load, ft)
	ft.end(err)
	return v, err
}

func (l *loader[V]) fetch(ctx context.Context, key string, load func(context.Context) (V, int64, error), ft *fetchTrace) (V, error) {
	for {
		if v, ok := l.cache.get(key); ok {
			l.m.cacheHits.WithLabelValues(l.kind).Inc()
			ft.set(fetchHit)
			return v, nil
		}
		l.m.cacheMisses.WithLabelValues(l.kind).Inc()
		ft.set(fetchJoined) // unless the load below is this caller's
		ch := l.flight.DoChan(key, func() (any, error) {
			ft.set(fetchMiss)
			v, cost, err := load(ctx)
			if err != nil {
				return v, err
			}
			l.cache.add(key, v, cost)
			return v, nil
		})
		select {
		case <-ctx.Done():
			var zero V
			return zero, ctx.Err()
		case res := <-ch:
			if res.Err != nil {
				if isContextErr(res.Err) && ctx.Err() == nil {
					continue // the leader gave up, not us
				}
				var zero V
				return zero, res.Err
			}
			return res.Val.(V), nil
		}
	}
}

func isContextErr(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded)
}
