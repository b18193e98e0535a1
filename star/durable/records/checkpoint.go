package records

// Checkpoint is the stored form of a State.
type Checkpoint struct {
	Incarnation string                   `json:"incarnation"`
	Stream      string                   `json:"stream"` // the starlog stream's id
	Next        uint64                   `json:"next"`
	Closed      bool                     `json:"closed,omitempty"`
	CloseSeq    uint64                   `json:"close_seq,omitempty"`
	ClosedBy    *checkpointProducer      `json:"closed_by,omitempty"`
	StreamSeq   string                   `json:"stream_seq,omitempty"`
	Producers   map[string]producerEntry `json:"producers,omitempty"`
	// The append the fold is inside (State.batchBy, batchLeft).
	BatchBy   *checkpointProducer `json:"batch_by,omitempty"`
	BatchLeft int                 `json:"batch_left,omitempty"`
}

type producerEntry struct {
	Epoch uint64 `json:"e"`
	Seq   uint64 `json:"s"`
}

type checkpointProducer struct {
	ID string `json:"id"`
	producerEntry
}

// CheckpointOf is the stored form of s, the fold of the starlog stream
// with that id.
func CheckpointOf(s *State, stream string) Checkpoint {
	c := Checkpoint{Incarnation: s.Incarnation, Stream: stream, Next: s.Next, Closed: s.Closed,
		CloseSeq: s.CloseSeq, StreamSeq: s.StreamSeq, Producers: make(map[string]producerEntry, len(s.Producers))}
	for id, p := range s.Producers {
		c.Producers[id] = producerEntry{Epoch: p.Epoch, Seq: p.Seq}
	}
	c.ClosedBy, c.BatchBy, c.BatchLeft = storedProducer(s.ClosedBy), storedProducer(s.batchBy), s.batchLeft
	return c
}

func storedProducer(p *Producer) *checkpointProducer {
	if p == nil {
		return nil
	}
	return &checkpointProducer{ID: p.ID, producerEntry: producerEntry{Epoch: p.Epoch, Seq: p.Seq}}
}

func (c *checkpointProducer) producer() *Producer {
	if c == nil {
		return nil
	}
	return &Producer{ID: c.ID, Epoch: c.Epoch, Seq: c.Seq}
}

// State is the fold the checkpoint holds.
func (c *Checkpoint) State() *State {
	s := &State{Incarnation: c.Incarnation, Next: c.Next, Closed: c.Closed, CloseSeq: c.CloseSeq,
		StreamSeq: c.StreamSeq, Producers: make(map[string]ProducerState, len(c.Producers)), Checkpointed: c.Next}
	for id, p := range c.Producers {
		s.Producers[id] = ProducerState{Epoch: p.Epoch, Seq: p.Seq}
	}
	s.ClosedBy, s.batchBy, s.batchLeft = c.ClosedBy.producer(), c.BatchBy.producer(), c.BatchLeft
	return s
}
