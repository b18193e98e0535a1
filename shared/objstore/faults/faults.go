// Package faults wraps an objstore.Store to inject, per bucket and
// changeable while it runs, latency drawn from a distribution, slowness,
// outages and errors (definite, or indefinite with or without the write
// having happened), and counts requests and bytes by kind. The same wrapper
// drives fault tests, benchmarks and the cost model (docs/design.md §4.1, §15).
//
// Given a seed, every random draw is deterministic per bucket: a bucket's
// latencies and probabilistic faults depend only on the seed, the bucket's
// name and the order of that bucket's own calls.
package faults

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/objstore"
)

// ErrInjected is the cause of every injected failure.
var ErrInjected = errors.New("faults: injected failure")

// ErrDown is the cause of the failures of a bucket that is down.
var ErrDown = errors.New("faults: bucket down")

// Fault is what an injected failure does.
type Fault uint8

const (
	// Definite fails the call with ErrInjected without doing anything.
	Definite Fault = iota + 1
	// LostReply performs the call, then reports an IndefiniteError: the
	// write happened but the caller never heard.
	LostReply
	// NotDone reports an IndefiniteError without doing anything.
	NotDone
)

func (f Fault) String() string {
	switch f {
	case Definite:
		return "definite"
	case LostReply:
		return "lost-reply"
	case NotDone:
		return "not-done"
	}
	return "none"
}

// Down describes an outage.
type Down struct {
	// Hang blocks every call until its context ends (a black hole);
	// otherwise calls fail after Delay.
	Hang  bool
	Delay time.Duration
}

// Store is the wrapper. Its methods are safe for concurrent use.
type Store struct {
	inner objstore.Store
	seed  uint64

	mu      sync.Mutex
	buckets map[string]*state
}

// Option configures Wrap.
type Option func(*Store)

// WithSeed makes the random draws deterministic.
func WithSeed(seed uint64) Option { return func(s *Store) { s.seed = seed } }

// Wrap wraps inner with no faults and no added latency.
func Wrap(inner objstore.Store, opts ...Option) *Store {
	s := &Store{inner: inner, seed: rand.Uint64(), buckets: make(map[string]*state)}
	for _, o := range opts {
		o(s)
	}
	return s
}

// rule fails matching calls: the next remaining ones (remaining > 0), or
// each with probability prob.
type rule struct {
	ops       uint32 // bit per objstore.Op
	fault     Fault
	remaining int
	prob      float64
}

// state is one bucket's configuration, random source and counters.
type state struct {
	mu      sync.Mutex
	rng     *rand.Rand
	latency Latency
	slow    time.Duration
	down    *Down
	rules   []rule
	counts  BucketCounts
}

func (s *Store) state(bucket string) *state {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.buckets[bucket]
	if st == nil {
		h := fnv.New64a()
		h.Write([]byte(bucket))
		st = &state{rng: rand.New(rand.NewPCG(s.seed, h.Sum64()))}
		s.buckets[bucket] = st
	}
	return st
}

func (s *Store) update(bucket string, f func(*state)) {
	st := s.state(bucket)
	st.mu.Lock()
	defer st.mu.Unlock()
	f(st)
}

// SetLatency draws every call's latency on bucket from l (nil: none).
func (s *Store) SetLatency(bucket string, l Latency) {
	s.update(bucket, func(st *state) { st.latency = l })
}

// SetSlow adds extra to every call on bucket, on top of its latency
// (0: not slow).
func (s *Store) SetSlow(bucket string, extra time.Duration) {
	s.update(bucket, func(st *state) { st.slow = max(extra, 0) })
}

// SetDown takes bucket down: every call fails with an IndefiniteError
// wrapping ErrDown after d.Delay, or hangs until its context ends.
func (s *Store) SetDown(bucket string, d Down) {
	s.update(bucket, func(st *state) { st.down = &d })
}

// SetUp ends an outage.
func (s *Store) SetUp(bucket string) {
	s.update(bucket, func(st *state) { st.down = nil })
}

func opMask(ops []objstore.Op) uint32 {
	if len(ops) == 0 {
		return 1<<objstore.NumOps - 1
	}
	var m uint32
	for _, op := range ops {
		m |= 1 << op
	}
	return m
}

// FailNext makes the next n calls on bucket of the given kinds (all kinds
// if none) fail with f. Rules queue: a call consumes the first that matches.
func (s *Store) FailNext(bucket string, n int, f Fault, ops ...objstore.Op) {
	if n <= 0 {
		return
	}
	s.update(bucket, func(st *state) {
		st.rules = append(st.rules, rule{ops: opMask(ops), fault: f, remaining: n})
	})
}

// FailRate makes each call on bucket of the given kinds (all kinds if
// none) fail with f with probability p, until ClearFaults.
func (s *Store) FailRate(bucket string, p float64, f Fault, ops ...objstore.Op) {
	if p <= 0 {
		return
	}
	s.update(bucket, func(st *state) {
		st.rules = append(st.rules, rule{ops: opMask(ops), fault: f, prob: min(p, 1)})
	})
}

// ClearFaults drops bucket's FailNext and FailRate rules.
func (s *Store) ClearFaults(bucket string) {
	s.update(bucket, func(st *state) { st.rules = nil })
}

// Counters snapshots the traffic of every bucket that has seen a call.
func (s *Store) Counters() Counters {
	s.mu.Lock()
	states := make(map[string]*state, len(s.buckets))
	for name, st := range s.buckets {
		states[name] = st
	}
	s.mu.Unlock()
	out := make(Counters, len(states))
	for name, st := range states {
		st.mu.Lock()
		out[name] = st.counts
		st.mu.Unlock()
	}
	return out
}

// ResetCounters zeroes every counter.
func (s *Store) ResetCounters() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, st := range s.buckets {
		st.mu.Lock()
		st.counts = BucketCounts{}
		st.mu.Unlock()
	}
}

// plan is what happens to one call, decided under the bucket's lock.
type plan struct {
	delay time.Duration
	down  *Down
	fault Fault
}

func (st *state) plan(op objstore.Op) plan {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.down != nil {
		d := *st.down
		return plan{down: &d}
	}
	p := plan{delay: st.slow}
	if st.latency != nil {
		p.delay += st.latency.Sample(st.rng)
	}
	for i := range st.rules {
		r := &st.rules[i]
		if r.ops&(1<<op) == 0 {
			continue
		}
		if r.remaining > 0 {
			r.remaining--
			p.fault = r.fault
			break
		}
		if r.prob > 0 && st.rng.Float64() < r.prob {
			p.fault = r.fault
			break
		}
	}
	st.rules = slices.DeleteFunc(st.rules, func(r rule) bool { return r.prob == 0 && r.remaining == 0 })
	return p
}

func (st *state) record(op objstore.Op, requests, bytes int64, err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	c := &st.counts[op]
	c.Requests += requests
	c.Bytes += bytes
	if err != nil {
		c.Errors++
	}
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// indefinite wraps err for a call that may have mutated the store.
func indefinite(op objstore.Op, err error) error {
	if op.Mutates() {
		return &objstore.IndefiniteError{Err: err}
	}
	return err
}

// before runs the plan up to the inner call. It returns the fault left for
// after the call (LostReply), or the error that ends the call now.
func (st *state) before(ctx context.Context, bucket string, op objstore.Op) (Fault, error) {
	p := st.plan(op)
	if p.down != nil {
		if p.down.Hang {
			<-ctx.Done()
			return 0, indefinite(op, fmt.Errorf("faults: %s %s: %w: %w", op, bucket, ErrDown, ctx.Err()))
		}
		if err := sleep(ctx, p.down.Delay); err != nil {
			return 0, indefinite(op, fmt.Errorf("faults: %s %s: %w", op, bucket, err))
		}
		// A down bucket never answers, so even a read's failure says
		// nothing definite.
		return 0, &objstore.IndefiniteError{Err: fmt.Errorf("faults: %s %s: %w", op, bucket, ErrDown)}
	}
	if err := sleep(ctx, p.delay); err != nil {
		// The request was in flight when the caller gave up.
		return 0, indefinite(op, fmt.Errorf("faults: %s %s: %w", op, bucket, err))
	}
	switch p.fault {
	case Definite:
		return 0, fmt.Errorf("faults: %s %s: %w", op, bucket, ErrInjected)
	case NotDone:
		return 0, &objstore.IndefiniteError{Err: fmt.Errorf("faults: %s %s (not done): %w", op, bucket, ErrInjected)}
	}
	return p.fault, nil
}

// after turns a LostReply into the indefinite outcome of a call that ran.
func after(fault Fault, bucket string, op objstore.Op, err error) error {
	if fault != LostReply {
		return err
	}
	// The caller hears nothing of the real outcome, so err is reported
	// (%v) but not wrapped: an ErrExists must not leak through.
	outcome := "ok"
	if err != nil {
		outcome = err.Error()
	}
	return &objstore.IndefiniteError{Err: fmt.Errorf("faults: %s %s (done, reply lost; was %s): %w", op, bucket, outcome, ErrInjected)}
}
