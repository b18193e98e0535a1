package loglet

import (
	"errors"
	"sync"
)

// ErrOverShare refuses a batch that found the pool full when the stall is
// its own stream's doing: the flusher is cutting as fast as it can
// (ingest_burst, not storage or the metastore) and the stream holds more
// than its fair share of the pool budget. It is definite (nothing was
// sequenced) and the client's to slow down: the API answers 429.
var ErrOverShare = errors.New("loglet: the stream holds more than its share of the write buffer")

// shares counts each stream's bytes pushed and not yet answered (in the
// pool, or cut and uploading), to tell whose doing a full pool is.
type shares struct {
	mu    sync.Mutex
	bytes map[string]int64 // only streams with bytes outstanding
}

func (s *shares) add(id string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bytes == nil {
		s.bytes = make(map[string]int64)
	}
	s.bytes[id] += n
}

func (s *shares) sub(id string, n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bytes[id] -= n; s.bytes[id] <= 0 {
		delete(s.bytes, id)
	}
}

// over reports whether id holds more than its fair share of budget: an
// even split over the streams with bytes outstanding, and at most half
// (so one stream alone that fills the buffer is over it, and two that
// hold it evenly are not).
func (s *shares) over(id string, budget int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	held := s.bytes[id]
	return held > 0 && held*int64(max(len(s.bytes), 2)) > budget
}

// OverShare reports whether a wait for pool budget that ran out is the
// stream's own doing (see ErrOverShare).
func (l *Loglet) OverShare(streamID string) bool {
	if l.blocked.load() != CauseIngestBurst {
		return false
	}
	return l.shares.over(streamID, l.pool.Budget())
}

// track counts b's charge against its stream until b is answered.
func (l *Loglet) track(b *Batch, size int64) {
	l.shares.add(b.StreamID, size)
	done := b.Done
	b.Done = func(err error) {
		l.shares.sub(b.StreamID, size)
		done(err)
	}
}
