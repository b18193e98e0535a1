package kafka

import (
	"encoding/binary"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
)

// SetFetchWaiting sets a hook run as a fetch starts its long-poll wait.
func (s *Server) SetFetchWaiting(f func()) { s.fetchWaiting = f }

// EncodeTestBatch is a record batch v2 of values at offsets 0…, through
// the face's own encoder.
func EncodeTestBatch(values ...[]byte) []byte {
	// Stamped now: a record older than its topic's retention is not read.
	ts := uint64(time.Now().UnixMilli())
	recs := make([]api.Record, len(values))
	for i, v := range values {
		recs[i] = api.Record{SeqNum: uint64(i), Body: v, Timestamp: api.Uint64(ts)}
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

// EncodeTestCompressedBatch is a record batch v2 of n records whose
// record bytes, compressed with codec (kgo.CompressionCodecType's
// numbering), are records; its length and CRC are set.
func EncodeTestCompressedBatch(codec int8, n int32, records []byte) []byte {
	b := kmsg.RecordBatch{Magic: 2, Attributes: int16(codec), LastOffsetDelta: n - 1,
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: n, Records: records}
	raw := b.AppendTo(nil)
	binary.BigEndian.PutUint32(raw[batchLengthAt:], uint32(len(raw)-12))
	binary.BigEndian.PutUint32(raw[batchCRCAt:], crcOf(raw))
	return raw
}

// EncodeTestIdempotentBatch is EncodeTestBatch of an idempotent producer:
// producer id pid, epoch and the first record's sequence seq.
func EncodeTestIdempotentBatch(pid int64, epoch int16, seq int32, values ...[]byte) []byte {
	raw := EncodeTestBatch(values...)
	binary.BigEndian.PutUint64(raw[43:], uint64(pid))
	binary.BigEndian.PutUint16(raw[51:], uint16(epoch))
	binary.BigEndian.PutUint32(raw[53:], uint32(seq))
	binary.BigEndian.PutUint32(raw[batchCRCAt:], crcOf(raw))
	return raw
}

// SetProducerIDRecheck sets how soon after a read of the producer id
// counter an id past it makes the star read it again.
func (s *Server) SetProducerIDRecheck(d time.Duration) { s.pidRecheck = d }

// SetRequestTimeout sets the bound of one request's work (RequestTimeout).
func (s *Server) SetRequestTimeout(d time.Duration) { s.requestTimeout = d }
