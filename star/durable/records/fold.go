package records

import "github.com/starlog/starlog/shared/api"

// ProducerState is what one producer id has appended: its epoch and the
// highest seq accepted in that epoch.
type ProducerState struct {
	Epoch, Seq uint64
}

// State is the fold of a stream's records [0, next): closure,
// producers and the last Stream-Seq. It is rebuilt from the records, so a
// star that never saw a stream (after a kill -9, a handoff) derives the
// same state as the one that wrote it.
type State struct {
	Incarnation string
	Next        uint64
	Closed      bool
	CloseSeq    uint64    // the marker's seq, when closed
	ClosedBy    *Producer // the producer of the closing batch, if any
	StreamSeq   string
	Producers   map[string]ProducerState
	// batchBy is the producer of the append the fold is inside, and
	// batchLeft how many of its data records are still to come: an
	// append's records (its messages, then its closing marker) may be
	// split across two reads of the fold, or a checkpoint.
	batchBy   *Producer
	batchLeft int
	// checkpointed is the next of the last checkpoint written or loaded
	// (checkpoint.go).
	Checkpointed uint64
}

func NewState(incarnation string) *State {
	return &State{Incarnation: incarnation, Producers: map[string]ProducerState{}}
}

// Apply folds records (in seq order, all at or after s.Next).
func (s *State) Apply(recs []api.Record) {
	for i := range recs {
		rec := &recs[i]
		if rec.SeqNum < s.Next {
			continue
		}
		kind := KindOf(rec)
		// Which append the record belongs to: the producer headers open
		// one (on its first record, with its message count), a data
		// record past the open one's messages opens one without a
		// producer, and an S2 command record is its own.
		if p, ok := ProducerOf(rec); ok {
			s.batchBy, s.batchLeft = &p, BatchLen(rec)-1
			ps, seen := s.Producers[p.ID]
			if !seen || p.Epoch > ps.Epoch || (p.Epoch == ps.Epoch && p.Seq > ps.Seq) {
				s.Producers[p.ID] = ProducerState{Epoch: p.Epoch, Seq: p.Seq}
			}
		} else if kind == KindData {
			if s.batchLeft > 0 {
				s.batchLeft--
			} else {
				s.batchBy = nil
			}
		} else if kind == KindControl {
			s.batchBy, s.batchLeft = nil, 0
		}
		if v, ok := HeaderValue(rec, HdrStreamSeq); ok && string(v) > s.StreamSeq {
			s.StreamSeq = string(v)
		}
		if kind == KindClose && !s.Closed {
			s.Closed, s.CloseSeq, s.ClosedBy = true, rec.SeqNum, s.batchBy
		}
		s.Next = rec.SeqNum + 1
	}
}

// End is the offset past the stream's last record a Durable Streams reader
// sees: past the marker of a closed stream, else the tail.
func (s *State) End() uint64 {
	if s.Closed {
		return s.CloseSeq + 1
	}
	return s.Next
}

// Clone is a copy that shares nothing with s.
func (s *State) Clone() *State {
	n := *s
	n.Producers = make(map[string]ProducerState, len(s.Producers))
	for k, v := range s.Producers {
		n.Producers[k] = v
	}
	return &n
}
