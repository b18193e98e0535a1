// Package pool is the star-wide FIFO of admitted, uncut batches; a star runs
// one per storage class.
//
// Producers Admit batches, charging their size against a byte budget; the
// flusher Cuts entries off the head into a flight and Releases their bytes.
// Bytes stay charged from admission until Release; the loglet releases them
// as it cuts, so the budget bounds what is admitted and not yet cut (a cut
// flight is charged to the chain's backlog budget instead). At the budget
// admission blocks; nothing is ever dropped.
package pool

import (
	"container/list"
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Entry is one admitted batch.
type Entry[T any] struct {
	Value T
	// Size is the number of bytes charged for it.
	Size int64
	// Admitted is when it entered the pool.
	Admitted time.Time
}

// Stats is a snapshot of a pool, for metrics.
type Stats struct {
	Budget int64
	// Charged is every byte admitted and not yet released.
	Charged int64
	// UncutEntries and UncutBytes describe what waits to be cut.
	UncutEntries int
	UncutBytes   int64
	// Waiters is the number of Admit calls blocked now.
	Waiters int
	// BlockedTotal counts Admit calls that had to wait, and BlockedWait
	// their total waiting time (cancelled waits included).
	BlockedTotal uint64
	BlockedWait  time.Duration
}

// Pool is a byte-budgeted FIFO. It is safe for concurrent use.
type Pool[T any] struct {
	budget int64
	clock  func() time.Time
	ready  chan struct{}

	mu      sync.Mutex
	charged int64
	queue   []Entry[T] // uncut entries; queue[head:] is live
	head    int
	uncut   int64
	waiters list.List // of *waiter[T], in arrival order

	blockedTotal uint64
	blockedWait  time.Duration
}

type waiter[T any] struct {
	value   T
	size    int64
	enqueue bool          // Admit (append value) rather than Reserve
	granted chan struct{} // closed once granted; nil on the fast path
}

// Reservation is budget charged by Reserve, awaiting its value. It is for
// one goroutine: Commit or Cancel it exactly once (Cancel after Commit is a
// no-op, so `defer r.Cancel()` is safe).
type Reservation[T any] struct {
	p    *Pool[T]
	size int64
	done bool
}

// Size returns the reserved bytes.
func (r *Reservation[T]) Size() int64 { return r.size }

// Commit appends v to the pool with the reserved size; the bytes stay charged
// until Release, as for Admit. Committing twice, or after Cancel, panics.
func (r *Reservation[T]) Commit(v T) {
	if r.done {
		panic("pool: reservation already committed or cancelled")
	}
	r.done = true
	p := r.p
	p.mu.Lock()
	defer p.mu.Unlock()
	p.enqueueLocked(v, r.size)
}

// Cancel credits the reserved bytes back, unless already committed or
// cancelled.
func (r *Reservation[T]) Cancel() {
	if r.done {
		return
	}
	r.done = true
	r.p.Release(r.size)
}

// New returns a pool with the given byte budget. clock stamps admission
// times; nil means time.Now. It panics if budget is not positive, a
// configuration error.
func New[T any](budget int64, clock func() time.Time) *Pool[T] {
	if budget <= 0 {
		panic(fmt.Sprintf("pool: budget must be positive, got %d", budget))
	}
	if clock == nil {
		clock = time.Now
	}
	return &Pool[T]{budget: budget, clock: clock, ready: make(chan struct{}, 1)}
}

// ErrNegativeSize rejects an Admit with a negative size.
var ErrNegativeSize = errors.New("pool: negative size")

// Admit charges size against the budget and appends v to the pool, blocking
// while it does not fit.
//
// Admission is FIFO-fair: once anyone waits, later callers queue behind them
// even if they would fit, so a big batch is never starved by a stream of
// small ones. A size larger than the whole budget is admitted only when
// nothing at all is charged (the pool is empty and every flight released);
// it then overdraws the budget alone, instead of deadlocking.
//
// ctx is consulted only while Admit must wait. If it ends first, Admit
// returns ctx.Err() and charges nothing. If it ends in the same instant the
// batch is admitted, the admission stands and Admit returns nil: the batch is
// in the pool and will be flushed.
func (p *Pool[T]) Admit(ctx context.Context, v T, size int64) error {
	return p.wait(ctx, &waiter[T]{value: v, size: size, enqueue: true})
}

// Reserve charges size against the budget like Admit, under the same
// fairness and oversize rules, but appends nothing: the caller then Commits
// the value or Cancels the reservation.
//
// It exists for the append path, which must not assign seq nums to a batch
// that may then fail to enter the pool: reserve the batch's bytes first
// (cancellable, nothing sequenced yet), then sequence it and Commit. Until
// Commit the bytes count in Charged but not in Len. ctx behaves as for Admit.
func (p *Pool[T]) Reserve(ctx context.Context, size int64) (*Reservation[T], error) {
	if err := p.wait(ctx, &waiter[T]{size: size}); err != nil {
		return nil, err
	}
	return &Reservation[T]{p: p, size: size}, nil
}

// TryReserve is Reserve without waiting: false when the size does not fit
// now (or earlier callers wait), and nothing is charged.
func (p *Pool[T]) TryReserve(size int64) (*Reservation[T], bool) {
	if size < 0 {
		return nil, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiters.Len() > 0 || !p.fits(size) {
		return nil, false
	}
	p.charged += size
	return &Reservation[T]{p: p, size: size}, true
}

// Uncut returns the values of the uncut entries, in admission order,
// without removing them.
func (p *Pool[T]) Uncut() []T {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]T, 0, len(p.queue)-p.head)
	for _, e := range p.queue[p.head:] {
		out = append(out, e.Value)
	}
	return out
}

// wait charges w.size, and enqueues w.value if w.enqueue, as soon as it fits
// and every earlier waiter has been served.
func (p *Pool[T]) wait(ctx context.Context, w *waiter[T]) error {
	if w.size < 0 {
		return fmt.Errorf("%w: %d", ErrNegativeSize, w.size)
	}
	p.mu.Lock()
	if p.waiters.Len() == 0 && p.fits(w.size) {
		p.grantOneLocked(w)
		p.mu.Unlock()
		return nil
	}
	if err := ctx.Err(); err != nil {
		p.mu.Unlock()
		return err
	}
	w.granted = make(chan struct{})
	elem := p.waiters.PushBack(w)
	p.blockedTotal++
	p.mu.Unlock()

	start := time.Now()
	select {
	case <-w.granted:
		p.addWait(time.Since(start))
		return nil
	case <-ctx.Done():
	}

	p.mu.Lock()
	defer p.mu.Unlock()
	p.blockedWait += time.Since(start)
	select {
	case <-w.granted:
		return nil // granted while we were cancelled: the admission stands
	default:
	}
	wasHead := p.waiters.Front() == elem
	p.waiters.Remove(elem)
	if wasHead {
		// A big head may have been holding back waiters that fit now.
		p.grantLocked()
	}
	return ctx.Err()
}

func (p *Pool[T]) addWait(d time.Duration) {
	p.mu.Lock()
	p.blockedWait += d
	p.mu.Unlock()
}

// fits reports whether size can be charged now.
func (p *Pool[T]) fits(size int64) bool {
	return p.charged+size <= p.budget || p.charged == 0
}

// grantOneLocked charges w and, for an Admit, appends its entry.
func (p *Pool[T]) grantOneLocked(w *waiter[T]) {
	p.charged += w.size
	if w.enqueue {
		p.enqueueLocked(w.value, w.size)
	}
}

func (p *Pool[T]) enqueueLocked(v T, size int64) {
	p.uncut += size
	p.queue = append(p.queue, Entry[T]{Value: v, Size: size, Admitted: p.clock()})
	select {
	case p.ready <- struct{}{}:
	default: // a wake-up is already pending: coalesce
	}
}

// grantLocked admits waiters from the front, in order, for as long as the
// front one fits. It stops at the first that does not: nobody overtakes it.
func (p *Pool[T]) grantLocked() {
	for e := p.waiters.Front(); e != nil; e = p.waiters.Front() {
		w := e.Value.(*waiter[T])
		if !p.fits(w.size) {
			return
		}
		p.waiters.Remove(e)
		p.grantOneLocked(w)
		close(w.granted)
	}
}

// Cut removes entries from the head, in admission order, while their total
// stays within maxBytes, but always at least one if the pool is not empty.
// Their bytes stay charged until Release.
func (p *Pool[T]) Cut(maxBytes int64) []Entry[T] {
	p.mu.Lock()
	defer p.mu.Unlock()
	live := p.queue[p.head:]
	n, total := takeHead(live, maxBytes)
	if n == 0 {
		return nil
	}
	out := make([]Entry[T], n)
	copy(out, live[:n])
	clear(live[:n]) // drop references so values can be collected
	p.head += n
	p.uncut -= total
	p.compactLocked()
	return out
}

// takeHead is what a cut takes of the uncut entries live: how many from
// the head, in admission order, while their total stays within maxBytes,
// but at least one when there is any (a batch larger than a flight goes
// out alone), and their bytes. Pure.
func takeHead[T any](live []Entry[T], maxBytes int64) (n int, total int64) {
	if len(live) == 0 {
		return 0, 0
	}
	n, total = 1, live[0].Size
	for n < len(live) && total+live[n].Size <= maxBytes {
		total += live[n].Size
		n++
	}
	return n, total
}

// compactLocked reclaims the consumed prefix of the queue once it dominates,
// so the backing array does not grow without bound.
func (p *Pool[T]) compactLocked() {
	if p.head == len(p.queue) {
		p.queue, p.head = p.queue[:0], 0
		return
	}
	if p.head > 64 && p.head*2 >= len(p.queue) {
		n := copy(p.queue, p.queue[p.head:])
		clear(p.queue[n:])
		p.queue, p.head = p.queue[:n], 0
	}
}

// Release credits size bytes back to the budget (their flight was
// acknowledged or failed) and admits waiters that now fit. Releasing more
// than is charged is a caller bug and panics, like a negative WaitGroup.
func (p *Pool[T]) Release(size int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if size < 0 || size > p.charged {
		panic(fmt.Sprintf("pool: release of %d bytes with %d charged", size, p.charged))
	}
	p.charged -= size
	p.grantLocked()
}

// Oldest returns the admission time of the head entry, which anchors the
// flush deadline; false if the pool is empty.
func (p *Pool[T]) Oldest() (time.Time, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.head == len(p.queue) {
		return time.Time{}, false
	}
	return p.queue[p.head].Admitted, true
}

// Len returns the number and bytes of uncut entries.
func (p *Pool[T]) Len() (entries int, bytes int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.queue) - p.head, p.uncut
}

// Charged returns every charged byte: uncut, plus cut but not released.
func (p *Pool[T]) Charged() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.charged
}

// Budget returns the pool's byte budget.
func (p *Pool[T]) Budget() int64 { return p.budget }

// Ready is signalled when an entry is admitted, so the flusher can wake. It
// is buffered 1 and coalescing: one signal may stand for many admissions, so
// after a wake-up the flusher checks Len rather than counting signals.
func (p *Pool[T]) Ready() <-chan struct{} { return p.ready }

// Stats returns a consistent snapshot for metrics.
func (p *Pool[T]) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return Stats{
		Budget:       p.budget,
		Charged:      p.charged,
		UncutEntries: len(p.queue) - p.head,
		UncutBytes:   p.uncut,
		Waiters:      p.waiters.Len(),
		BlockedTotal: p.blockedTotal,
		BlockedWait:  p.blockedWait,
	}
}
