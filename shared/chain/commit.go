package chain

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// HaltCause says why an epoch halted.
type HaltCause string

const (
	HaltForeign  HaltCause = "foreign occupant" // a poison, another writer's copy or an unreadable object in one of our slots
	HaltDeadline HaltCause = "flight deadline"  // W confirms not reached in time
)

// HaltError reports that a slot did not commit and the epoch must halt:
// nothing at or past Slot may release until a fence decides its fate.
type HaltError struct {
	Slot  uint64
	Cause HaltCause
	Err   error // the last bucket error seen, if any
}

func (e *HaltError) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("chain: slot %d halted: %s: %v", e.Slot, e.Cause, e.Err)
	}
	return fmt.Sprintf("chain: slot %d halted: %s", e.Slot, e.Cause)
}

func (e *HaltError) Unwrap() error { return e.Err }

// PutObserver hears about every slot PUT attempt (for metrics).
type PutObserver func(bucket string, took time.Duration, err error)

// Writer commits the slots of one epoch: it is the only writer of that
// epoch, holding the nonce minted onto it.
type Writer struct {
	c        *Chain
	Epoch    meta.Epoch
	nonce    format.Nonce
	buckets  []objstore.Bucket
	deadline time.Duration
	observe  PutObserver

	// Straggling copies finish after the slot committed, under their own
	// timeout, until Close.
	bg       context.Context
	bgCancel context.CancelFunc
	bgWG     sync.WaitGroup
	straggle time.Duration
}

// WriterOptions tune a Writer.
type WriterOptions struct {
	// Deadline bounds how long a flight may take to reach W confirms; past
	// it the epoch halts. Zero means 30 s.
	Deadline time.Duration
	// StraggleTimeout bounds the copies still uploading after W confirmed.
	// Zero means 2 × Deadline.
	StraggleTimeout time.Duration
	// Observe hears every PUT (optional).
	Observe PutObserver
}

// Writer returns the writer of epoch e, which this actor must own.
func (c *Chain) Writer(e meta.Epoch, o WriterOptions) (*Writer, error) {
	if e.Owner != c.Me {
		return nil, fmt.Errorf("chain %s/%s: epoch %d is owned by %s, not %s", c.Star, c.Class, e.Epoch, e.Owner, c.Me)
	}
	nonce, err := ParseNonce(e.Params.Nonce)
	if err != nil {
		return nil, err
	}
	if o.Deadline <= 0 {
		o.Deadline = 30 * time.Second
	}
	if o.StraggleTimeout <= 0 {
		o.StraggleTimeout = 2 * o.Deadline
	}
	bg, cancel := context.WithCancel(context.Background())
	return &Writer{
		c: c, Epoch: e, nonce: nonce, buckets: c.buckets(e.Params),
		deadline: o.Deadline, observe: o.Observe,
		bg: bg, bgCancel: cancel, straggle: o.StraggleTimeout,
	}, nil
}

// Nonce is the epoch's writer nonce (rendered into every envelope).
func (w *Writer) Nonce() format.Nonce { return w.nonce }

// Render encodes one flight as the transit bundle of slot.
func (w *Writer) Render(slot uint64, batches []format.Batch) ([]byte, error) {
	return format.EncodeBundle(w.Epoch.Epoch, slot, w.nonce, batches)
}

// Close stops the straggling uploads and waits for them.
func (w *Writer) Close() {
	w.bgCancel()
	w.bgWG.Wait()
}

type putResult struct {
	bucket int
	occ    Occupant
	err    error
}

// PutAttempt is one PUT of one copy of a slot: for a trace of the commit.
type PutAttempt struct {
	Bucket     string
	Start, End time.Time
	Err        error
}

// Commit writes body, the rendered bundle of slot, to every bucket of the
// set with create-once PUTs and returns nil once W copies are ours. It
// returns a *HaltError when a foreign occupant is seen before W, or W is
// not reached within the deadline; ctx's error when the caller gives up.
// Copies still uploading after W finish in the background.
func (w *Writer) Commit(ctx context.Context, slot uint64, body []byte) error {
	return w.CommitObserved(ctx, slot, body, nil)
}

// CommitObserved is Commit telling each (when not nil) about every PUT
// attempt as it ends, from the attempt's goroutine: a straggler's after
// CommitObserved has returned.
func (w *Writer) CommitObserved(ctx context.Context, slot uint64, body []byte, each func(PutAttempt)) error {
	k, q := len(w.buckets), w.Epoch.Params.W
	key := w.c.slotKey(w.Epoch.Epoch, slot)

	sctx, scancel := context.WithTimeout(objstore.WithCopies(w.bg, k), w.deadline+w.straggle)
	results := make(chan putResult, k)
	w.bgWG.Add(k)
	for i := range w.buckets {
		go func() {
			defer w.bgWG.Done()
			occ, err := w.putCopy(sctx, i, key, slot, body, each)
			results <- putResult{i, occ, err}
		}()
	}

	deadline := time.NewTimer(w.deadline)
	defer deadline.Stop()
	tally := NewTally(k, q)
	var lastErr error
	for pending := k; pending > 0; {
		select {
		case r := <-results:
			pending--
			if r.err != nil {
				lastErr = r.err
			}
			tally.Observe(r.bucket, r.occ)
			if tally.Fate() == Committed {
				// Let the stragglers finish (or time out) on their own.
				w.drainLater(results, pending, scancel)
				return nil
			}
			// A poison means a fencer is at work; an unreadable occupant
			// is no copy of ours. Either way, halt once W can no longer
			// be reached from the buckets still uploading.
			if r.occ == Poison || r.occ == Unreadable && tally.Flights()+pending < q {
				scancel()
				return &HaltError{Slot: slot, Cause: HaltForeign}
			}
		case <-deadline.C:
			scancel()
			return &HaltError{Slot: slot, Cause: HaltDeadline, Err: lastErr}
		case <-ctx.Done():
			scancel()
			return ctx.Err()
		}
	}
	scancel()
	return &HaltError{Slot: slot, Cause: HaltDeadline, Err: lastErr}
}

func (w *Writer) drainLater(results <-chan putResult, pending int, cancel context.CancelFunc) {
	if pending == 0 {
		cancel()
		return
	}
	w.bgWG.Add(1)
	go func() {
		defer w.bgWG.Done()
		defer cancel()
		for range pending {
			<-results
		}
	}()
}

// putCopy writes one bucket's copy until it knows the bucket's occupant:
// Flight (ours), Poison (anything that can never be ours), Unreadable (an
// object that does not decode), or Unknown with the last error when ctx
// ends first. Indefinite outcomes are probed; a retried create-once PUT
// can never write twice.
func (w *Writer) putCopy(ctx context.Context, i int, key string, slot uint64, body []byte, each func(PutAttempt)) (Occupant, error) {
	b := w.buckets[i]
	r := w.c.newRetrier("put " + b.Name() + " " + key)
	want := copyID{w.Epoch.Epoch, slot, w.nonce}
	for {
		start := time.Now()
		actx, cancel := w.c.attempt(ctx)
		_, err := b.PutIfAbsent(actx, key, body)
		cancel()
		if w.observe != nil {
			w.observe(b.Name(), time.Since(start), err)
		}
		if each != nil {
			each(PutAttempt{Bucket: b.Name(), Start: start, End: time.Now(), Err: err})
		}
		switch {
		case err == nil:
			return Flight, nil
		case errors.Is(err, objstore.ErrExists) || objstore.IsIndefinite(err):
			occ, perr := w.c.probe(ctx, b, key, want)
			if occ != Unknown {
				return occ, nil
			}
			if perr != nil {
				err = perr
			}
		}
		if !r.wait(ctx) {
			return Unknown, fmt.Errorf("chain: put %s/%s: %w", b.Name(), key, err)
		}
	}
}
