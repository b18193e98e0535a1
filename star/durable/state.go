package durable

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/starlog/starlog/shared/api"
)

// producerState is what one producer id has appended: its epoch and the
// highest seq accepted in that epoch.
type producerState struct {
	epoch, seq uint64
}

// streamState is the fold of a stream's records [0, next): closure,
// producers and the last Stream-Seq. It is rebuilt from the records, so a
// star that never saw a stream (after a kill -9, a handoff) derives the
// same state as the one that wrote it.
type streamState struct {
	incarnation string
	next        uint64
	closed      bool
	closeSeq    uint64    // the marker's seq, when closed
	closedBy    *producer // the producer of the closing batch, if any
	streamSeq   string
	producers   map[string]producerState
	// batchBy is the producer of the append the fold is inside, and
	// batchLeft how many of its data records are still to come: an
	// append's records (its messages, then its closing marker) may be
	// split across two reads of the fold, or a checkpoint.
	batchBy   *producer
	batchLeft int
	// checkpointed is the next of the last checkpoint written or loaded
	// (checkpoint.go).
	checkpointed uint64
}

func newState(incarnation string) *streamState {
	return &streamState{incarnation: incarnation, producers: map[string]producerState{}}
}

// apply folds records (in seq order, all at or after s.next).
func (s *streamState) apply(recs []api.Record) {
	for i := range recs {
		rec := &recs[i]
		if rec.SeqNum < s.next {
			continue
		}
		kind := kindOf(rec)
		// Which append the record belongs to: the producer headers open
		// one (on its first record, with its message count), a data
		// record past the open one's messages opens one without a
		// producer, and an S2 command record is its own.
		if p, ok := producerOf(rec); ok {
			s.batchBy, s.batchLeft = &p, batchLen(rec)-1
			ps, seen := s.producers[p.id]
			if !seen || p.epoch > ps.epoch || (p.epoch == ps.epoch && p.seq > ps.seq) {
				s.producers[p.id] = producerState{epoch: p.epoch, seq: p.seq}
			}
		} else if kind == kindData {
			if s.batchLeft > 0 {
				s.batchLeft--
			} else {
				s.batchBy = nil
			}
		} else if kind == kindControl {
			s.batchBy, s.batchLeft = nil, 0
		}
		if v, ok := headerValue(rec, hdrStreamSeq); ok && string(v) > s.streamSeq {
			s.streamSeq = string(v)
		}
		if kind == kindClose && !s.closed {
			s.closed, s.closeSeq, s.closedBy = true, rec.SeqNum, s.batchBy
		}
		s.next = rec.SeqNum + 1
	}
}

// end is the offset past the stream's last record a Durable Streams reader
// sees: past the marker of a closed stream, else the tail.
func (s *streamState) end() uint64 {
	if s.closed {
		return s.closeSeq + 1
	}
	return s.next
}

// states caches folds per stream name. A cached fold is only ever a
// prefix of the records, so catching up from it is always right.
type states struct {
	mu sync.Mutex
	m  map[string]*streamState
	// locks serialize the appends of one stream on this star (the protocol
	// asks validation and append to be serialized per producer); across
	// stars, match_seq_num does.
	locks map[string]*streamLock
	// inDoubt holds, per stream, the seq an append that failed
	// indefinitely matched (settledState).
	inDoubt map[string]uint64
}

func (c *states) setPending(name string, at uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.inDoubt[name]; !ok || at > cur {
		c.inDoubt[name] = at
	}
}

func (c *states) pending(name string) (uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.inDoubt[name]
	return at, ok
}

func (c *states) clearPending(name string, at uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cur, ok := c.inDoubt[name]; ok && cur <= at {
		delete(c.inDoubt, name)
	}
}

type streamLock struct {
	mu   sync.Mutex
	refs int
}

func newStates() *states {
	return &states{m: map[string]*streamState{}, locks: map[string]*streamLock{}, inDoubt: map[string]uint64{}}
}

func (c *states) lock(name string) func() {
	c.mu.Lock()
	l := c.locks[name]
	if l == nil {
		l = &streamLock{}
		c.locks[name] = l
	}
	l.refs++
	c.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		c.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(c.locks, name)
		}
		c.mu.Unlock()
	}
}

func (c *states) get(name, incarnation string) *streamState {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.m[name]
	if s == nil || s.incarnation != incarnation {
		return nil
	}
	return s.clone()
}

func (c *states) put(name string, s *streamState) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[name]; old == nil || old.incarnation != s.incarnation || old.next <= s.next {
		c.m[name] = s.clone()
	}
}

func (c *states) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, name)
}

func (s *streamState) clone() *streamState {
	n := *s
	n.producers = make(map[string]producerState, len(s.producers))
	for k, v := range s.producers {
		n.producers[k] = v
	}
	return &n
}

// foldBatch is how many records one catch-up read asks for.
const foldBatch = 1000

// state returns the fold of a stream this star serves (its leader) up to
// its durable tail, reading only the records the cache has not seen. A
// lease that moved is a *node.NotLeaderError: the request goes to the
// new leader.
func (h *Handler) state(ctx context.Context, name string, row *streamRow) (*streamState, error) {
	return h.fold(ctx, name, row, false)
}

// sourceState is state of a stream this star may not lead (a fork's
// source): read through the star that leads it (peer.go).
func (h *Handler) sourceState(ctx context.Context, name string, row *streamRow) (*streamState, error) {
	return h.fold(ctx, name, row, true)
}

func (h *Handler) fold(ctx context.Context, name string, row *streamRow, anyLeader bool) (*streamState, error) {
	tailOf, read := h.localTail, h.localRead
	if anyLeader {
		tailOf, read = h.peerTailOf, h.peerRead
	}
	tail, err := tailOf(ctx, name)
	if err != nil {
		return nil, err
	}
	s := h.states.get(name, row.Incarnation)
	if s == nil || s.next > tail {
		// Not seen here (or another stream under the name): from the
		// checkpoint if one fits, else from the first record.
		if s = h.loadCheckpoint(ctx, name, row.Incarnation, tail); s == nil {
			s = newState(row.Incarnation)
		}
	}
	for s.next < tail {
		b, err := read(ctx, name, api.ReadRequest{
			From: api.FromSeqNum, Value: s.next, Count: api.Uint64(foldBatch), Bytes: api.Uint64(api.MaxBatchMeteredBytes),
		})
		if err != nil {
			return nil, err
		}
		if len(b.Records) == 0 {
			return nil, fmt.Errorf("durable: fold of %s stopped at %d below the tail %d", name, s.next, tail)
		}
		s.apply(b.Records)
		h.folded.Add(float64(len(b.Records)))
		if last := b.Records[len(b.Records)-1].SeqNum; last+1 > s.next {
			s.next = last + 1 // records below a trim point are gone
		}
	}
	h.maybeCheckpoint(name, s)
	h.states.put(name, s)
	return s, nil
}

func (h *Handler) localTail(ctx context.Context, name string) (uint64, error) {
	pos, err := h.n.CheckTail(ctx, h.basin, name, nil)
	return pos.SeqNum, err
}

func (h *Handler) localRead(ctx context.Context, name string, req api.ReadRequest) (api.ReadBatch, error) {
	return h.n.Read(ctx, h.basin, name, req, nil)
}

// isStatus reports whether err is a node error with the HTTP status.
func isStatus(err error, status int) bool {
	e, ok := errors.AsType[*api.Error](err)
	return ok && e.Status == status
}

var _ = http.StatusOK
