package sdk

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/api"
)

// Producer defaults.
const (
	DefaultLinger = 5 * time.Millisecond
	// maxQueuedBatches bounds the batches cut but not yet taken by the
	// session: Submit blocks beyond it, so the session's backpressure
	// reaches the caller.
	maxQueuedBatches = 2
)

// ProducerOptions configures a Producer.
type ProducerOptions struct {
	// Linger is how long the first record of a batch waits for others
	// before the batch is sent. Default DefaultLinger; negative sends each
	// record at once unless more are already waiting.
	Linger time.Duration
	// MaxBatchRecords caps a batch's records (1–1000, default 1000).
	MaxBatchRecords int
	// MaxBatchBytes caps a batch's metered bytes (default and at most
	// 1 MiB).
	MaxBatchBytes int
	// FencingToken, if set, goes on every batch.
	FencingToken *string
	// MatchSeqNum, if set, is the seq num the first record must get; every
	// later batch then carries the seq num its own first record must get,
	// so no other writer can interleave and no batch lands twice.
	MatchSeqNum *uint64
	// Session configures the append session underneath.
	Session AppendSessionOptions
}

// RecordAck is the acknowledgement of one record.
type RecordAck struct {
	// SeqNum is the record's seq num.
	SeqNum uint64
	// Batch is the ack of the batch that carried it.
	Batch api.AppendAck
}

// RecordFuture is the outcome of one submitted record.
type RecordFuture struct {
	done chan struct{}
	ack  RecordAck
	err  error
}

// Done is closed when the outcome is known.
func (f *RecordFuture) Done() <-chan struct{} { return f.done }

// Wait blocks until the record is acknowledged or failed, or ctx ends.
func (f *RecordFuture) Wait(ctx context.Context) (RecordAck, error) {
	select {
	case <-f.done:
		return f.ack, f.err
	case <-ctx.Done():
		return RecordAck{}, context.Cause(ctx)
	}
}

// Result returns the outcome; call it only after Done is closed.
func (f *RecordFuture) Result() (RecordAck, error) { return f.ack, f.err }

// Producer batches records onto an append session: a batch is cut when
// adding a record would pass MaxBatchRecords or MaxBatchBytes, or when its
// first record has lingered for Linger. Records keep their Submit order.
// It is safe for concurrent use. A failure of the session fails every
// unacknowledged record and every later Submit; the producer does not
// reconnect (a resubmission could duplicate records), so make a new one.
type Producer struct {
	sess *AppendSession
	opts ProducerOptions
	acks chan *pendingBatch // submitted batches, in order, to the resolver
	done chan struct{}      // closed when submitter and resolver exit

	mu        sync.Mutex
	cur       *pendingBatch   // the batch records are added to
	queue     []*pendingBatch // cut, not yet taken by the submitter
	queued    chan struct{}   // closed and replaced when the queue grows or closes
	taken     chan struct{}   // closed and replaced when the queue shrinks
	gen       uint64          // bumps at every cut, so a stale linger timer does nothing
	timer     *time.Timer
	nextMatch *uint64
	closed    bool

	// errMu guards err apart from mu: the resolver records failures
	// independently of submitters.
	errMu sync.Mutex
	err   error // the first failure seen
}

type pendingBatch struct {
	in      api.AppendInput
	bytes   int
	futures []*RecordFuture
	fut     *AppendFuture
	err     error // failed before reaching the session
}

// NewProducer opens an append session on the stream and returns a
// producer on it. ctx bounds the producer's life: its end aborts the
// session.
func (s *Stream) NewProducer(ctx context.Context, opts ProducerOptions) (*Producer, error) {
	if opts.Linger == 0 {
		opts.Linger = DefaultLinger
	}
	if opts.MaxBatchRecords <= 0 || opts.MaxBatchRecords > api.MaxBatchRecords {
		opts.MaxBatchRecords = api.MaxBatchRecords
	}
	if opts.MaxBatchBytes <= 0 || opts.MaxBatchBytes > api.MaxBatchMeteredBytes {
		opts.MaxBatchBytes = api.MaxBatchMeteredBytes
	}
	if t := opts.FencingToken; t != nil {
		if err := api.ValidateAppendInput(&api.AppendInput{Records: []api.Record{{}}, FencingToken: t}); err != nil {
			return nil, err
		}
	}
	sess, err := s.AppendSession(ctx, opts.Session)
	if err != nil {
		return nil, err
	}
	p := &Producer{
		sess:   sess,
		opts:   opts,
		acks:   make(chan *pendingBatch, 64),
		done:   make(chan struct{}),
		queued: make(chan struct{}),
		taken:  make(chan struct{}),
	}
	if opts.MatchSeqNum != nil {
		n := *opts.MatchSeqNum
		p.nextMatch = &n
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.submitLoop(ctx) }()
	go func() { defer wg.Done(); p.resolveLoop() }()
	go func() { wg.Wait(); close(p.done) }()
	return p, nil
}

// Submit adds a record to the current batch and returns its future. It
// blocks while the session applies backpressure, until ctx ends (the
// record is then not taken). A record too big for any batch fails at once
// with a definite 422.
func (p *Producer) Submit(ctx context.Context, r api.Record) (*RecordFuture, error) {
	size := int(r.MeteredSize())
	if size > p.opts.MaxBatchBytes {
		return nil, api.Invalid("record of %d metered bytes exceeds the batch limit of %d", size, p.opts.MaxBatchBytes)
	}
	if _, err := api.ParseCommand(&r); err != nil {
		return nil, err
	}
	for {
		p.mu.Lock()
		if err := p.failure(); err != nil {
			p.mu.Unlock()
			return nil, &SessionError{Cause: err}
		}
		if p.closed {
			p.mu.Unlock()
			return nil, ErrSessionClosed
		}
		if len(p.queue) >= maxQueuedBatches {
			// Backpressure: wait for the submitter, without the lock.
			taken := p.taken
			p.mu.Unlock()
			select {
			case <-taken:
				continue
			case <-p.sess.done:
				continue // the failure check above reports it
			case <-ctx.Done():
				return nil, context.Cause(ctx)
			}
		}
		if p.cur != nil && (len(p.cur.in.Records) >= p.opts.MaxBatchRecords || p.cur.bytes+size > p.opts.MaxBatchBytes) {
			p.cutLocked()
		}
		f := &RecordFuture{done: make(chan struct{})}
		if p.cur == nil {
			p.cur = &pendingBatch{in: api.AppendInput{FencingToken: p.opts.FencingToken}}
			if p.opts.Linger > 0 {
				gen := p.gen
				p.timer = time.AfterFunc(p.opts.Linger, func() { p.lingerExpired(gen) })
			}
		}
		p.cur.in.Records = append(p.cur.in.Records, r)
		p.cur.bytes += size
		p.cur.futures = append(p.cur.futures, f)
		if p.opts.Linger < 0 || len(p.cur.in.Records) >= p.opts.MaxBatchRecords {
			p.cutLocked()
		}
		p.mu.Unlock()
		return f, nil
	}
}

// Flush cuts the current batch now, without waiting for the linger.
func (p *Producer) Flush() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cur != nil {
		p.cutLocked()
	}
}

// Close sends the last batch, waits for every record's ack and closes the
// session. It returns the failure that ended the session, if any. If ctx
// ends first, the session is aborted and unacknowledged records fail.
func (p *Producer) Close(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		if p.cur != nil {
			p.cutLocked()
		}
		p.closed = true
		p.signal(&p.queued)
	}
	p.mu.Unlock()
	select {
	case <-p.done:
	case <-ctx.Done():
		p.sess.Abort()
		<-p.done
		return context.Cause(ctx)
	}
	return p.sess.Close(ctx)
}

// lingerExpired cuts the batch its timer was started for, if still open.
func (p *Producer) lingerExpired(gen uint64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.gen == gen && p.cur != nil && !p.closed {
		p.cutLocked()
	}
}

// cutLocked queues the current batch for the submitter; it never blocks.
// Match seq nums are assigned here, in cut order, which is send order.
func (p *Producer) cutLocked() {
	b := p.cur
	p.cur = nil
	p.gen++
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if p.nextMatch != nil {
		m := *p.nextMatch
		b.in.MatchSeqNum = &m
		*p.nextMatch += uint64(len(b.in.Records))
	}
	p.queue = append(p.queue, b)
	p.signal(&p.queued)
}

// signal wakes the waiters on *ch. Called with mu held.
func (p *Producer) signal(ch *chan struct{}) {
	close(*ch)
	*ch = make(chan struct{})
}

// next takes the oldest queued batch, waiting for one; nil once the
// producer is closed and drained.
func (p *Producer) next() *pendingBatch {
	for {
		p.mu.Lock()
		if len(p.queue) > 0 {
			b := p.queue[0]
			p.queue[0] = nil
			p.queue = p.queue[1:]
			p.signal(&p.taken)
			p.mu.Unlock()
			return b
		}
		if p.closed {
			p.mu.Unlock()
			return nil
		}
		queued := p.queued
		p.mu.Unlock()
		<-queued
	}
}

// submitLoop submits queued batches to the session in order.
func (p *Producer) submitLoop(ctx context.Context) {
	defer close(p.acks)
	for {
		b := p.next()
		if b == nil {
			return
		}
		fut, err := p.sess.Submit(ctx, &b.in)
		if err != nil {
			b.err = err
		}
		b.fut = fut
		p.acks <- b
	}
}

// resolveLoop waits for each batch's ack, in order, and settles its
// records' futures.
func (p *Producer) resolveLoop() {
	for b := range p.acks {
		if b.err != nil {
			p.noteErr(b.err)
			b.fail(b.err)
			continue
		}
		<-b.fut.done
		ack, err := b.fut.Result()
		if err != nil {
			p.noteErr(err)
			b.fail(err)
			continue
		}
		for i, f := range b.futures {
			f.ack = RecordAck{SeqNum: ack.Start.SeqNum + uint64(i), Batch: ack}
			close(f.done)
		}
	}
}

func (p *Producer) noteErr(err error) {
	if errors.Is(err, ErrSessionClosed) {
		return
	}
	p.errMu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.errMu.Unlock()
}

// failure is the first failure seen, or the session's if it has ended
// with one that no batch has reported yet.
func (p *Producer) failure() error {
	p.errMu.Lock()
	err := p.err
	p.errMu.Unlock()
	if err == nil {
		err = p.sess.Err()
	}
	return err
}

func (b *pendingBatch) fail(err error) {
	for _, f := range b.futures {
		f.err = err
		close(f.done)
	}
	b.futures = nil
}
