package kafka

import "github.com/starlog/starlog/shared/api"

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
