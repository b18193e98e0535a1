package kafka

import (
	"time"

	"github.com/starlog/starlog/shared/api"
)

// SetFetchWaiting sets a hook run as a fetch starts its long-poll wait.
func (s *Server) SetFetchWaiting(f func()) { s.fetchWaiting = f }

// EncodeTestBatch is a record batch v2 of values at offsets 0…, through
// the face's own encoder.
func EncodeTestBatch(values ...[]byte) []byte {
	recs := make([]api.Record, len(values))
	for i, v := range values {
		recs[i] = api.Record{SeqNum: uint64(i), Body: v, Timestamp: api.Uint64(1)}
	}
	return appendBatch(nil, recs)
}

// ExpireTopicCache makes every cached topic row stale, as topicCacheTTL
// passing would.
func (s *Server) ExpireTopicCache() {
	s.topics.mu.Lock()
	defer s.topics.mu.Unlock()
	for k, e := range s.topics.m {
		e.at = time.Time{}
		s.topics.m[k] = e
	}
}
