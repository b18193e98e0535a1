package producer

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/starlog/starlog/shared/api"
)

// Checkpoint is a table as of a stream's durable tail Next: what a star
// that opens the stream starts its fold from, so that it reads only the
// records after Next. It is JSON in the metastore.
type Checkpoint struct {
	Next      uint64          `json:"next"`
	Producers []CheckpointRow `json:"producers"`
}

// CheckpointRow is one producer of a checkpoint.
type CheckpointRow struct {
	ID       string  `json:"id"`
	Epoch    uint64  `json:"epoch"`
	Next     uint64  `json:"next"`
	LastUsed uint64  `json:"last_used"`
	Order    uint64  `json:"order"`
	Batches  []Batch `json:"batches"`
}

// Snapshot is the table as of the durable tail: the batches at or past
// tail are pending (sequenced, not yet durable) and left out. ok is false
// when that state cannot be told from the table (a producer all of whose
// remembered batches are pending: what it had before them is gone), so
// the caller tries again later; nowMs drops the ids idle past IdleMs.
func (t *Table) Snapshot(tail, nowMs uint64) (c Checkpoint, ok bool) {
	c.Next = tail
	for id, e := range t.byID {
		if expired(e, nowMs) {
			continue
		}
		n := len(e.batches)
		for n > 0 && e.batches[n-1].Start.SeqNum >= tail {
			n--
		}
		if n == 0 {
			return Checkpoint{}, false
		}
		row := CheckpointRow{ID: id, Epoch: e.epoch, Next: e.next, LastUsed: e.lastUsed, Order: e.order,
			Batches: append([]Batch(nil), e.batches[:n]...)}
		if n < len(e.batches) {
			last := e.batches[n-1]
			row.Next, row.Order = api.ProducerMark{Seq: last.Seq, Records: last.Records}.NextSeq(), last.Start.SeqNum
			// lastUsed is a max over the batches; the pending ones only
			// raised it, and the remaining last one is the durable bound.
			row.LastUsed = last.Start.Timestamp
		}
		c.Producers = append(c.Producers, row)
	}
	sort.Slice(c.Producers, func(i, j int) bool { return c.Producers[i].ID < c.Producers[j].ID })
	return c, true
}

// FromCheckpoint rebuilds a table; its fold continues at c.Next.
func FromCheckpoint(c Checkpoint) *Table {
	t := New()
	for _, r := range c.Producers {
		t.byID[r.ID] = &entry{epoch: r.Epoch, next: r.Next, lastUsed: r.LastUsed, order: r.Order,
			batches: append([]Batch(nil), r.Batches...)}
	}
	return t
}

// Encode renders a checkpoint.
func (c Checkpoint) Encode() ([]byte, error) { return json.Marshal(c) }

// DecodeCheckpoint parses a checkpoint, checking what a table relies on.
func DecodeCheckpoint(b []byte) (Checkpoint, error) {
	var c Checkpoint
	if err := json.Unmarshal(b, &c); err != nil {
		return Checkpoint{}, fmt.Errorf("producer: checkpoint: %w", err)
	}
	if len(c.Producers) > MaxProducers {
		return Checkpoint{}, fmt.Errorf("producer: checkpoint holds %d producers, at most %d", len(c.Producers), MaxProducers)
	}
	for _, r := range c.Producers {
		if len(r.Batches) == 0 || len(r.Batches) > MaxAcks {
			return Checkpoint{}, fmt.Errorf("producer: checkpoint: producer %q has %d batches", r.ID, len(r.Batches))
		}
	}
	return c, nil
}
