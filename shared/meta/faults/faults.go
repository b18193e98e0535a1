// Package faults wraps a meta.Store to make it slow, unavailable or failing
// on demand, and counts its calls by kind. Fault tests of the write path
// use it for "metastore slow" and "metastore down"; the cost model reads
// its counts. Latency draws come from a seeded generator, so a run is
// reproducible given the same sequence of calls.
package faults

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// ErrUnavailable is what every call returns while the store is unavailable.
var ErrUnavailable = errors.New("meta/faults: metastore unavailable")

// Op is the kind of a call.
type Op uint8

const (
	OpGet Op = iota
	OpPut
	OpDelete
	OpQuery
	OpBatch // BatchPut and BatchDelete
	numOps
)

func (o Op) String() string {
	switch o {
	case OpGet:
		return "get"
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpQuery:
		return "query"
	case OpBatch:
		return "batch"
	}
	return fmt.Sprintf("op(%d)", uint8(o))
}

// Latency is a distribution of added delay. The zero value adds none.
type Latency struct {
	base  time.Duration // constant, or the median of the lognormal
	sigma float64       // 0: constant
}

// Constant adds d to every call.
func Constant(d time.Duration) Latency { return Latency{base: max(d, 0)} }

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263478740408408

// LogNormal draws each delay from the lognormal distribution with median
// p50 and 99th percentile p99 (a p99 below p50 is taken as p50).
func LogNormal(p50, p99 time.Duration) Latency {
	if p50 <= 0 {
		return Latency{}
	}
	if p99 < p50 {
		p99 = p50
	}
	return Latency{base: p50, sigma: math.Log(float64(p99)/float64(p50)) / z99}
}

func (l Latency) sample(r *rand.Rand) time.Duration {
	if l.sigma == 0 {
		return l.base
	}
	d := float64(l.base) * math.Exp(l.sigma*r.NormFloat64())
	return time.Duration(min(d, float64(time.Hour))) // bound the tail
}

// Counts are the calls that reached the wrapped store, by kind. Calls
// failed by an injected fault before reaching it are in Injected instead.
type Counts struct {
	Get, Put, Delete, Query, Batch int64
	BatchItems                     int64 // items and keys written by batch calls
	QueryItems                     int64 // items returned by queries
	Injected                       int64 // calls failed by injection or unavailability
}

// Writes is the billed write count: single writes plus batched items.
func (c Counts) Writes() int64 { return c.Put + c.Delete + c.BatchItems }

// When says whether an injected error hides the call or its reply.
type When uint8

const (
	// Before fails the call without reaching the store: nothing applied.
	Before When = iota
	// After lets the call apply, then loses its reply: the indefinite case.
	After
)

type injection struct {
	left int
	err  error
	when When
	ops  [numOps]bool
}

// Store is the wrapping meta.Store.
type Store struct {
	inner meta.Store

	mu          sync.Mutex
	rng         *rand.Rand
	lat         [numOps]Latency
	unavailable bool
	inject      []*injection
	counts      Counts
}

var _ meta.Store = (*Store)(nil)

// New wraps inner; seed fixes the latency draws.
func New(inner meta.Store, seed uint64) *Store {
	return &Store{inner: inner, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

func opSet(ops []Op) [numOps]bool {
	var set [numOps]bool
	for i := range set {
		set[i] = len(ops) == 0
	}
	for _, o := range ops {
		if o < numOps {
			set[o] = true
		}
	}
	return set
}

// SetLatency sets the added delay of the given kinds of call (all when
// none are named). It applies from the next call on.
func (s *Store) SetLatency(l Latency, ops ...Op) {
	set := opSet(ops)
	s.mu.Lock()
	defer s.mu.Unlock()
	for o, on := range set {
		if on {
			s.lat[o] = l
		}
	}
}

// SetUnavailable makes every call fail with ErrUnavailable (after its
// latency) until it is turned off again.
func (s *Store) SetUnavailable(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.unavailable = on
}

// FailNext makes the next n calls of the given kinds (all when none are
// named) fail with err, before or after reaching the store. Injections
// queue: a call consumes the earliest one that matches it.
func (s *Store) FailNext(n int, err error, when When, ops ...Op) {
	if n <= 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inject = append(s.inject, &injection{left: n, err: err, when: when, ops: opSet(ops)})
}

// Counts returns the counts so far.
func (s *Store) Counts() Counts {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts
}

// ResetCounts zeroes the counts.
func (s *Store) ResetCounts() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.counts = Counts{}
}

// enter applies latency and faults to one call of kind op. It returns the
// error to fail the call with now, or an error to return after the call.
func (s *Store) enter(ctx context.Context, op Op) (after error, err error) {
	s.mu.Lock()
	delay := s.lat[op].sample(s.rng)
	s.mu.Unlock()
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("meta/faults: %s: %w", op, context.Cause(ctx))
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.unavailable {
		s.counts.Injected++
		return nil, fmt.Errorf("meta/faults: %s: %w", op, ErrUnavailable)
	}
	for i, in := range s.inject {
		if !in.ops[op] {
			continue
		}
		if in.left--; in.left == 0 {
			s.inject = append(s.inject[:i], s.inject[i+1:]...)
		}
		if in.when == After {
			return in.err, nil
		}
		s.counts.Injected++
		return nil, in.err
	}
	return nil, nil
}

func (s *Store) count(f func(*Counts)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.counts)
}

// exit turns a call's result into the wrapper's: an After injection
// replaces a success (the reply was lost) and counts as injected.
func (s *Store) exit(after, err error) error {
	if after != nil && err == nil {
		s.count(func(c *Counts) { c.Injected++ })
		return after
	}
	return err
}

// Get implements meta.Store.
func (s *Store) Get(ctx context.Context, pk, sk string) (meta.Item, error) {
	after, err := s.enter(ctx, OpGet)
	if err != nil {
		return meta.Item{}, err
	}
	s.count(func(c *Counts) { c.Get++ })
	it, err := s.inner.Get(ctx, pk, sk)
	if err = s.exit(after, err); err != nil {
		return meta.Item{}, err
	}
	return it, nil
}

// Put implements meta.Store.
func (s *Store) Put(ctx context.Context, pk, sk string, val []byte, cond meta.Cond) (int64, error) {
	after, err := s.enter(ctx, OpPut)
	if err != nil {
		return 0, err
	}
	s.count(func(c *Counts) { c.Put++ })
	v, err := s.inner.Put(ctx, pk, sk, val, cond)
	if err = s.exit(after, err); err != nil {
		return 0, err
	}
	return v, nil
}

// Delete implements meta.Store.
func (s *Store) Delete(ctx context.Context, pk, sk string, cond meta.Cond) error {
	after, err := s.enter(ctx, OpDelete)
	if err != nil {
		return err
	}
	s.count(func(c *Counts) { c.Delete++ })
	return s.exit(after, s.inner.Delete(ctx, pk, sk, cond))
}

// Query implements meta.Store.
func (s *Store) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	after, err := s.enter(ctx, OpQuery)
	if err != nil {
		return meta.Page{}, err
	}
	p, err := s.inner.Query(ctx, q)
	s.count(func(c *Counts) { c.Query++; c.QueryItems += int64(len(p.Items)) })
	if err = s.exit(after, err); err != nil {
		return meta.Page{}, err
	}
	return p, nil
}

// BatchPut implements meta.Store.
func (s *Store) BatchPut(ctx context.Context, items []meta.Item) error {
	after, err := s.enter(ctx, OpBatch)
	if err != nil {
		return err
	}
	s.count(func(c *Counts) { c.Batch++; c.BatchItems += int64(len(items)) })
	return s.exit(after, s.inner.BatchPut(ctx, items))
}

// BatchDelete implements meta.Store.
func (s *Store) BatchDelete(ctx context.Context, keys []meta.Key) error {
	after, err := s.enter(ctx, OpBatch)
	if err != nil {
		return err
	}
	s.count(func(c *Counts) { c.Batch++; c.BatchItems += int64(len(keys)) })
	return s.exit(after, s.inner.BatchDelete(ctx, keys))
}

// Close closes the wrapped store.
func (s *Store) Close() error { return s.inner.Close() }
