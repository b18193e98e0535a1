// Package ratelimit keeps token buckets (golang.org/x/time/rate) by key —
// a stream, a stream and a client connection, a client — bounded in
// number, so a client inventing keys cannot grow the map without bound.
package ratelimit

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// DefaultMaxKeys bounds the buckets one Keyed holds: 3.5 MiB of heap when
// full with 48-byte keys (a stream id and a connection), as measured.
const DefaultMaxKeys = 1 << 14

// Keyed is a set of token buckets with the same rate and burst, one per
// key. A bucket left idle long enough to refill is the same as a new one,
// so such buckets are dropped when the set is full; if none is idle, an
// arbitrary one is (its key starts again with a full bucket: a bounded
// leniency, never unbounded memory). Safe for concurrent use.
type Keyed struct {
	limit   rate.Limit
	burst   int
	maxKeys int
	refill  time.Duration // an idle bucket is full again after this

	mu sync.Mutex
	m  map[string]*bucket
}

type bucket struct {
	lim  *rate.Limiter
	used time.Time
}

// NewKeyed returns buckets of perSec tokens a second holding at most burst
// (at least 1). maxKeys ≤ 0 takes DefaultMaxKeys. A nil *Keyed (what
// NewKeyed returns for perSec ≤ 0) limits nothing.
func NewKeyed(perSec float64, burst, maxKeys int) *Keyed {
	if perSec <= 0 {
		return nil
	}
	burst = max(burst, 1)
	if maxKeys <= 0 {
		maxKeys = DefaultMaxKeys
	}
	return &Keyed{
		limit: rate.Limit(perSec), burst: burst, maxKeys: maxKeys,
		refill: time.Duration(float64(burst) / perSec * float64(time.Second)),
		m:      make(map[string]*bucket),
	}
}

// Burst is the most tokens one take may ask for (0 for a nil Keyed).
func (k *Keyed) Burst() int {
	if k == nil {
		return 0
	}
	return k.burst
}

// Take takes n tokens from key's bucket at now if they are there, and
// otherwise takes nothing and says how long until they would be. n above
// the burst is clamped to it (it could never be granted otherwise).
func (k *Keyed) Take(key string, n int, now time.Time) (wait time.Duration, ok bool) {
	if k == nil {
		return 0, true
	}
	r := k.bucket(key, now).ReserveN(now, min(n, k.burst))
	if d := r.DelayFrom(now); d > 0 {
		r.CancelAt(now)
		return d, false
	}
	return 0, true
}

// Reserve takes n tokens from key's bucket at now, borrowing from the
// future if they are not there: the caller waits the returned delay before
// acting, or calls the returned cancel to give them back.
func (k *Keyed) Reserve(key string, n int, now time.Time) (delay time.Duration, cancel func()) {
	if k == nil {
		return 0, func() {}
	}
	r := k.bucket(key, now).ReserveN(now, min(n, k.burst))
	d := r.DelayFrom(now)
	if d > 0 {
		k.touch(key, now.Add(d)) // in debt until then: not idle before
	}
	return d, func() { r.CancelAt(now) }
}

func (k *Keyed) touch(key string, t time.Time) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if b, ok := k.m[key]; ok && t.After(b.used) {
		b.used = t
	}
}

// Len is the number of buckets held.
func (k *Keyed) Len() int {
	if k == nil {
		return 0
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.m)
}

func (k *Keyed) bucket(key string, now time.Time) *rate.Limiter {
	k.mu.Lock()
	defer k.mu.Unlock()
	b, ok := k.m[key]
	if !ok {
		if len(k.m) >= k.maxKeys {
			k.evictLocked(now)
		}
		b = &bucket{lim: rate.NewLimiter(k.limit, k.burst)}
		k.m[key] = b
	}
	if now.After(b.used) {
		b.used = now
	}
	return b.lim
}

// evictSample bounds the buckets one eviction looks at, so a full set
// costs O(1) per new key however many it holds.
const evictSample = 64

// evictLocked drops the buckets idle long enough to be full again among a
// sample of the set (map order is random), or, if none is, one of them.
func (k *Keyed) evictLocked(now time.Time) {
	var victim string
	seen, dropped := 0, false
	for key, b := range k.m {
		if now.Sub(b.used) >= k.refill {
			delete(k.m, key)
			dropped = true
		}
		if victim == "" {
			victim = key
		}
		if seen++; seen == evictSample {
			break
		}
	}
	if !dropped {
		delete(k.m, victim)
	}
}
