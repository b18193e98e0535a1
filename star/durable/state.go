package durable

import (
	"context"
	"errors"
	"net/http"
	"sync"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/durable/records"
)

// states caches folds per stream name. A cached fold is only ever a
// prefix of the records, so catching up from it is always right.
type states struct {
	mu sync.Mutex
	m  map[string]*records.State
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
	return &states{m: map[string]*records.State{}, locks: map[string]*streamLock{}, inDoubt: map[string]uint64{}}
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

func (c *states) get(name, incarnation string) *records.State {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.m[name]
	if s == nil || s.Incarnation != incarnation {
		return nil
	}
	return s.Clone()
}

func (c *states) put(name string, s *records.State) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old := c.m[name]; old == nil || old.Incarnation != s.Incarnation || old.Next <= s.Next {
		c.m[name] = s.Clone()
	}
}

func (c *states) drop(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, name)
}

// foldBatch is how many records one catch-up read asks for.
const foldBatch = 1000

// state returns the fold of a stream this star serves (its leader) up to
// its durable tail, reading only the records the cache has not seen. A
// lease that moved is a *node.NotLeaderError: the request goes to the
// new leader.
func (h *Handler) state(ctx context.Context, name string, row *streamRow) (*records.State, error) {
	return h.fold(ctx, name, row, false)
}

// sourceState is state of a stream this star may not lead (a fork's
// source): read through the star that leads it (star/durable/peer).
func (h *Handler) sourceState(ctx context.Context, name string, row *streamRow) (*records.State, error) {
	return h.fold(ctx, name, row, true)
}

func (h *Handler) fold(ctx context.Context, name string, row *streamRow, anyLeader bool) (*records.State, error) {
	tailOf, read := h.localTail, h.localRead
	if anyLeader {
		p := h.peers()
		tailOf, read = p.Tail, p.Read
	}
	tail, err := tailOf(ctx, name)
	if err != nil {
		return nil, err
	}
	s := h.states.get(name, row.Incarnation)
	if s == nil || s.Next > tail {
		// Not seen here (or another stream under the name): from the
		// checkpoint if one fits, else from the first record.
		if s = h.loadCheckpoint(ctx, name, row.Incarnation, tail); s == nil {
			s = records.NewState(row.Incarnation)
		}
	}
	for s.Next < tail {
		b, err := read(ctx, name, api.ReadRequest{
			From: api.FromSeqNum, Value: s.Next, Count: api.Uint64(foldBatch), Bytes: api.Uint64(api.MaxBatchMeteredBytes),
		})
		if err != nil {
			return nil, err
		}
		if len(b.Records) == 0 {
			// Retention or a trim removed every record from s.Next to
			// the tail (the stream keeps its tail): nothing left to fold.
			s.Next = tail
			break
		}
		s.Apply(b.Records)
		h.folded.Add(float64(len(b.Records)))
		if last := b.Records[len(b.Records)-1].SeqNum; last+1 > s.Next {
			s.Next = last + 1 // records below a trim point are gone
		}
	}
	switch {
	case !s.Closed && row.ClosedAt > 0 && row.ClosedAt <= s.Next:
		// The closing marker is gone (retention): the row remembers it.
		// Who closed it is not kept (a retry of the closing producer's
		// append is then 409, not its 204).
		s.Closed, s.CloseSeq = true, row.ClosedAt-1
	case s.Closed && row.ClosedAt == 0 && !anyLeader:
		h.recordClose(ctx, name, row.Incarnation, s.End())
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
