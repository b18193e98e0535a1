// Package streams joins a stream's facade to its class's loglet: it opens
// the streams this star leads at their durable tail, sequences appends under
// the stream's lock, hands them to the loglet and waits for their release.
package streams

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/producer"
)

// ErrAckUnknown is returned when the caller stopped waiting for an ack of a
// batch already sequenced: it may or may not become durable (indefinite).
var ErrAckUnknown = errors.New("streams: stopped waiting for the ack; the append may or may not be durable")

// ErrRejectionUnconfirmed is returned for a batch the facade rejected
// (412: match_seq_num or fencing token) on state that batches before it
// had not yet made durable, when those did not become durable (they
// failed, or the caller stopped waiting). The rejection cannot be
// answered: it named a tail or token that may never exist. Nothing was
// sequenced: the outcome is definite and the batch may be retried.
var ErrRejectionUnconfirmed = errors.New("streams: the rejection rests on earlier batches not yet durable")

// recordOverhead is charged per record on top of its metered size, for the
// block framing and bookkeeping the pool holds.
const recordOverhead = 48

// Stream is one stream this star leads.
type Stream struct {
	ID     string
	Class  meta.Class
	loglet *loglet.Loglet

	mu   sync.Mutex
	fac  *facade.Stream
	last *Ticket // the latest batch handed to the loglet
	now  func() time.Time
	// trim is the trim point as of the acknowledged batches (acks come
	// in order): what reads skip below from the trim's ack on.
	trim uint64
	// marked are the producer batches in flight, by first seq num: a
	// retry of one waits for its outcome.
	marked map[uint64]*Ticket
	// loading serialises LoadProducers.
	loading sync.Mutex
}

// Open opens a stream at its durable tail, read from its greatest row, and
// seeds the loglet's absorber with the stream's chained totals.
func Open(ctx context.Context, ms meta.Store, l *loglet.Loglet, id string, class meta.Class, cfg facade.Config) (*Stream, error) {
	pg, err := ms.Query(ctx, meta.Query{PK: "stream#" + id, From: meta.RefPrefix, To: meta.RefPrefix + "~", Backward: true, Limit: 1})
	if err != nil {
		return nil, fmt.Errorf("streams: open %s: greatest row: %w", id, err)
	}
	var st facade.State
	var totals absorb.StreamTotals
	if len(pg.Items) == 1 {
		var r meta.Ref
		if err := meta.Decode(pg.Items[0].Val, &r); err != nil {
			return nil, err
		}
		st = facade.State{NextSeq: r.EndSeq, LastTimestamp: r.MaxTimestamp, FencingToken: r.FencingToken, TrimPoint: r.TrimPoint}
		totals = absorb.StreamTotals{CumBytes: r.CumBytes, FencingToken: r.FencingToken, TrimPoint: r.TrimPoint}
		if r.Settled != nil {
			totals.Settled = r.CumBytes // the size trigger counts from here
		}
	}
	l.Absorber().Seed(id, totals)
	return &Stream{ID: id, Class: class, loglet: l, fac: facade.New(cfg, st), now: time.Now, trim: st.TrimPoint, marked: map[uint64]*Ticket{}}, nil
}

// Ack is the outcome of an append.
type Ack struct {
	Start, End facade.Position
	Tail       facade.Position
	// EndTimestampUnknown marks the ack of a retry whose original was
	// rebuilt from the records: End.Timestamp is for the caller to read
	// (facade.DuplicateError).
	EndTimestampUnknown bool
}

// Ticket waits for one submitted batch.
type Ticket struct {
	s    *Stream
	seq  facade.Sequenced
	done chan error
	fin  chan struct{} // closed once the outcome is known (err set)
	err  error
	// A retry's ticket (Duplicate) answers with the original's ack:
	// orig is the original while it was in flight, else nil and durable.
	dup  *facade.DuplicateError
	orig *Ticket
}

// Duplicate is the original batch a retry's ticket answers for, if it is
// one.
func (t *Ticket) Duplicate() *facade.DuplicateError { return t.dup }

// Submit sequences req and hands it to the loglet without waiting for its
// ack, so a session can pipeline: batches submitted one after another are
// acknowledged in that order. It blocks only for pool budget.
func (s *Stream) Submit(ctx context.Context, req facade.Request) (*Ticket, error) {
	size := int64(0)
	for _, in := range req.Records {
		r := facadeRecord(in)
		size += int64(r.MeteredSize()) + recordOverhead
	}
	hook := stepTracer(ctx)
	t0 := time.Now()
	res, err := s.loglet.Reserve(ctx, size)
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) && s.loglet.OverShare(s.ID) {
			// The admission timeout ran out and the full pool is this
			// stream's doing. (A cancelled wait is a session or client
			// gone: nobody to tell.)
			return nil, fmt.Errorf("%w: %w", loglet.ErrOverShare, err)
		}
		return nil, err
	}
	admitted := time.Now()
	traceStep(hook, "admit", t0, admitted)
	s.mu.Lock()
	seq, err := s.fac.Sequence(req, uint64(s.now().UnixMilli()))
	if err != nil {
		if dup, ok := errors.AsType[facade.DuplicateError](err); ok {
			t, err := s.duplicate(dup)
			s.mu.Unlock()
			res.Cancel()
			return t, err
		}
		last := s.last
		s.mu.Unlock()
		res.Cancel()
		return nil, s.confirmRejection(ctx, err, last)
	}
	t := &Ticket{s: s, seq: seq, done: make(chan error, 1), fin: make(chan struct{})}
	if seq.Producer != nil {
		s.marked[seq.Start.SeqNum] = t
	}
	sequenced := time.Now()
	s.loglet.Push(res, &loglet.Batch{StreamID: s.ID, Seq: seq, Done: t.complete, Trace: hook})
	s.last = t
	s.mu.Unlock()
	traceStep(hook, "sequence", admitted, sequenced)
	return t, nil
}

// ErrOriginalFailed answers a retry whose original batch failed on this
// star (its ack was never released): indefinite, like the original's
// failure; a later retry gets the ack if the batch is durable after all
// (a new leader folds it from the records) or applies it.
var ErrOriginalFailed = errors.New("streams: the original batch of this retry failed; it may or may not be durable")

// duplicate is the ticket of a retry (under s.mu): the original's ack at
// once if it is durable, else the original's outcome once known. An
// original neither durable nor in flight failed here.
func (s *Stream) duplicate(dup facade.DuplicateError) (*Ticket, error) {
	t := &Ticket{s: s, seq: facade.Sequenced{Start: dup.Start, End: dup.End}, dup: &dup, fin: make(chan struct{})}
	if o := s.marked[dup.Start.SeqNum]; o != nil {
		t.orig = o
		return t, nil
	}
	if dup.End.SeqNum > s.fac.Tail().SeqNum {
		return nil, ErrOriginalFailed
	}
	close(t.fin)
	return t, nil
}

// confirmRejection returns the facade's rejection of a batch once every
// batch sequenced before it is durable. The facade judges match_seq_num
// and fencing tokens on its sequenced state, which counts batches still
// in flight: answered at once, a 412 would name a tail (or token) that a
// read after it does not see yet, and that never exists if those batches
// fail (found by star/e2e/verify: a 412 reporting seq 9642, then a read
// answering 416 with the durable tail 9628, while the batches between
// waited out a zone halt). Acks are in order, so the latest batch's
// outcome stands for every earlier one; once it is durable the durable
// tail is exactly what the rejection saw, and the 412 is linearized
// there. Other rejections (invalid input) do not depend on the state.
// maxConfirmWait bounds confirmRejection's wait for earlier batches.
const maxConfirmWait = 30 * time.Second

func (s *Stream) confirmRejection(ctx context.Context, err error, last *Ticket) error {
	var seq facade.SeqNumMismatchError
	var fence facade.FencingTokenMismatchError
	var prod facade.ProducerError // a producer's next seq or epoch, likewise
	if last == nil || !errors.As(err, &seq) && !errors.As(err, &fence) && !errors.As(err, &prod) {
		return err
	}
	// The wait is the request's (a unary append's admission timeout, a
	// session's life), and never longer than maxConfirmWait: the loglet
	// resolves every batch (acked, or failed at its flight deadline), so
	// the cap only bounds a session's wait behind a stalled chain.
	ctx, cancel := context.WithTimeout(ctx, maxConfirmWait)
	defer cancel()
	select {
	case <-last.fin:
		if last.err != nil {
			return fmt.Errorf("%w: an earlier batch failed: %v", ErrRejectionUnconfirmed, last.err)
		}
		return err
	case <-ctx.Done():
		return fmt.Errorf("%w: %v", ErrRejectionUnconfirmed, ctx.Err())
	}
}

func (t *Ticket) complete(err error) {
	t.s.mu.Lock()
	if err == nil {
		t.s.fac.Acked(t.seq.End)
		t.s.trim = max(t.s.trim, t.seq.TrimPoint)
	}
	if t.seq.Producer != nil {
		delete(t.s.marked, t.seq.Start.SeqNum)
	}
	t.s.mu.Unlock()
	t.err = err
	close(t.fin)
	t.done <- err
}

// Sequenced is what the facade assigned to the batch.
func (t *Ticket) Sequenced() facade.Sequenced { return t.seq }

// Wait blocks until the batch is released (durable at W and every earlier
// slot released) or failed. A caller that gives up gets ErrAckUnknown.
func (t *Ticket) Wait(ctx context.Context) (Ack, error) {
	if t.dup != nil {
		return t.waitOriginal(ctx)
	}
	select {
	case err := <-t.done:
		if err != nil {
			return Ack{}, err
		}
		return Ack{Start: t.seq.Start, End: t.seq.End, Tail: t.s.Tail()}, nil
	case <-ctx.Done():
		return Ack{}, fmt.Errorf("%w: %v", ErrAckUnknown, ctx.Err())
	}
}

// waitOriginal is a retry's Wait: the original's outcome, with its ack.
func (t *Ticket) waitOriginal(ctx context.Context) (Ack, error) {
	if o := t.orig; o != nil {
		select {
		case <-o.fin:
			if o.err != nil {
				return Ack{}, fmt.Errorf("%w: %w", ErrOriginalFailed, o.err)
			}
		case <-ctx.Done():
			return Ack{}, fmt.Errorf("%w: %v", ErrAckUnknown, ctx.Err())
		}
	}
	return Ack{Start: t.dup.Start, End: t.dup.End, Tail: t.s.Tail(), EndTimestampUnknown: !t.dup.EndTimestampKnown}, nil
}

// LoadProducers loads the stream's producer table once, before its first
// marked batch: it waits until every batch sequenced so far is durable
// (or failed), then calls load with the durable tail and installs the
// table it returns. Marked batches are refused meanwhile
// (facade.ErrProducersNotLoaded), so the records up to that tail hold
// every producer batch; unmarked ones may go on. ctx bounds the wait and
// the load.
func (s *Stream) LoadProducers(ctx context.Context, load func(ctx context.Context, tail facade.Position) (*producer.Table, error)) error {
	s.loading.Lock()
	defer s.loading.Unlock()
	s.mu.Lock()
	loaded, last := s.fac.ProducersLoaded(), s.last
	s.mu.Unlock()
	if loaded {
		return nil
	}
	if last != nil {
		select {
		case <-last.fin:
			if last.err != nil {
				return fmt.Errorf("streams: load producers: an earlier batch failed: %w", last.err)
			}
		case <-ctx.Done():
			return fmt.Errorf("%w: load producers: %v", ErrAckUnknown, ctx.Err())
		}
	}
	tab, err := load(ctx, s.Tail())
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.fac.LoadProducers(tab)
	s.mu.Unlock()
	return nil
}

// ProducersLoaded reports whether the producer table is loaded.
func (s *Stream) ProducersLoaded() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fac.ProducersLoaded()
}

// ProducerCheckpoint is the producer table as of the durable tail
// (facade.Stream.ProducerCheckpoint).
func (s *Stream) ProducerCheckpoint() (producer.Checkpoint, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fac.ProducerCheckpoint()
}

// Append submits req and waits for its ack.
func (s *Stream) Append(ctx context.Context, req facade.Request) (Ack, error) {
	t, err := s.Submit(ctx, req)
	if err != nil {
		return Ack{}, err
	}
	return t.Wait(ctx)
}

// TrimPoint is the trim point as of the acknowledged batches, and of the
// rows the stream was opened from.
func (s *Stream) TrimPoint() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.trim
}

// Tail is the durable (acknowledged) tail.
func (s *Stream) Tail() facade.Position {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.fac.Tail()
}

// Reconfigure changes the stream's timestamping.
func (s *Stream) Reconfigure(cfg facade.Config) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fac.Reconfigure(cfg)
}
