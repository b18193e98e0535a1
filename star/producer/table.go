package producer

import (
	"time"

	"github.com/starlog/starlog/shared/api"
)

// Bounds of a stream's producer state (docs/api.md "Idempotent producers").
const (
	// Idle is how long a producer id is remembered after its last batch,
	// by the timestamps of the batches' first records.
	Idle = time.Hour
	// IdleMs is Idle in milliseconds, the unit of record timestamps.
	IdleMs = uint64(Idle / time.Millisecond)
	// MaxProducers is how many producer ids a stream remembers; a new one
	// beyond it forgets the one whose last batch is the oldest.
	MaxProducers = 1000
	// MaxAcks is how many of a producer's latest batches keep their acks:
	// a retry of an older one is refused with producer_ack_forgotten.
	MaxAcks = 8
)

// Pos is a stream position: a seq num and a timestamp in ms.
type Pos struct {
	SeqNum    uint64 `json:"seq_num"`
	Timestamp uint64 `json:"timestamp"`
}

// Batch is one applied batch of a producer: its producer seq and the
// stream positions of its ack. End is zero when the batch was rebuilt from
// the records (its length is not in them).
type Batch struct {
	Seq uint64 `json:"seq"`
	// Records is the mark's record count when its seq counts records
	// (api.HeaderProducerRecords), else 0.
	Records uint64 `json:"records,omitempty"`
	Start   Pos    `json:"start"`
	End     Pos    `json:"end"`
}

// EndKnown reports whether the batch's end was recorded.
func (b Batch) EndKnown() bool { return b.End.SeqNum != 0 }

// entry is one producer's state.
type entry struct {
	epoch uint64
	next  uint64 // the seq its next batch must carry
	// lastUsed is the first record's timestamp of its latest batch (ms),
	// order that batch's first seq num: expiry and eviction.
	lastUsed, order uint64
	batches         []Batch // the latest, by ascending seq, at most MaxAcks
}

// Kind is what a decision says to do with a batch.
type Kind uint8

const (
	// Apply: the batch is the producer's next; sequence it, then Applied.
	Apply Kind = iota
	// Duplicate: a retry of Batch, already applied; append nothing.
	Duplicate
	// Gap: the seq is past the producer's next (Expected).
	Gap
	// Stale: the epoch is older than the producer's (Current).
	Stale
	// Forgotten: applied, but too long ago for its ack to be remembered
	// (Expected is the producer's next seq).
	Forgotten
)

// Decision is the verdict on one marked batch.
type Decision struct {
	Kind     Kind
	Batch    Batch  // Duplicate
	Expected uint64 // Gap, Forgotten
	Current  uint64 // Stale
}

// Err is the API refusal of a Gap, Stale or Forgotten decision, nil
// otherwise.
func (d Decision) Err(m api.ProducerMark) *api.Error {
	switch d.Kind {
	case Gap:
		return api.ProducerSeqGap(m.ID, m.Epoch, m.Seq, d.Expected)
	case Stale:
		return api.ProducerEpochStale(m.ID, m.Epoch, d.Current)
	case Forgotten:
		return api.ProducerAckForgotten(m.ID, m.Epoch, m.Seq, d.Expected)
	}
	return nil
}

// Table is one stream's producers. Not safe for concurrent use.
type Table struct {
	byID map[string]*entry
}

// New returns an empty table.
func New() *Table { return &Table{byID: map[string]*entry{}} }

// Len is the number of producer ids remembered (expired ones included
// until a later Applied sweeps them).
func (t *Table) Len() int { return len(t.byID) }

// live returns the producer's entry unless it is absent or idle past
// IdleMs at nowMs.
func (t *Table) live(id string, nowMs uint64) *entry {
	e := t.byID[id]
	if e == nil || expired(e, nowMs) {
		return nil
	}
	return e
}

func expired(e *entry, nowMs uint64) bool {
	return nowMs > e.lastUsed && nowMs-e.lastUsed > IdleMs
}

// Decide judges a marked batch at nowMs (ms). It changes nothing.
//
// An unknown (or forgotten) producer starts at seq 0 of any epoch. A known
// one's older epoch is Stale; a newer epoch must start at seq 0; in its
// epoch, its next seq is applied, the seq of a batch among its last
// MaxAcks is a retry (Duplicate), a seq below those is a retry whose ack
// is forgotten (Forgotten), and any other seq is a Gap: past the next, or
// among the remembered batches without starting one (a seq counted in
// records, m.Records set, may name a record inside a batch). Seqs counted
// in records wrap at api.ProducerSeqWrap, so below and past are taken
// modulo it, below meaning less than half of it behind the next.
func (t *Table) Decide(m api.ProducerMark, nowMs uint64) Decision {
	e := t.live(m.ID, nowMs)
	switch {
	case e == nil || m.Epoch > e.epoch:
		if m.Seq != 0 {
			return Decision{Kind: Gap, Expected: 0}
		}
		return Decision{Kind: Apply}
	case m.Epoch < e.epoch:
		return Decision{Kind: Stale, Current: e.epoch}
	case m.Seq == e.next:
		return Decision{Kind: Apply}
	}
	for _, b := range e.batches {
		if b.Seq == m.Seq {
			return Decision{Kind: Duplicate, Batch: b}
		}
	}
	if belowRemembered(m, e) {
		return Decision{Kind: Forgotten, Expected: e.next}
	}
	return Decision{Kind: Gap, Expected: e.next}
}

// belowRemembered reports whether m's seq is behind the producer's next
// and before its oldest remembered batch: a batch applied, its ack gone.
func belowRemembered(m api.ProducerMark, e *entry) bool {
	if m.Records == 0 {
		return m.Seq < e.next && (len(e.batches) == 0 || m.Seq < e.batches[0].Seq)
	}
	const wrap = api.ProducerSeqWrap
	behind := func(seq uint64) uint64 { return (e.next + wrap - seq%wrap) % wrap }
	b := behind(m.Seq)
	return b < wrap/2 && (len(e.batches) == 0 || b > behind(e.batches[0].Seq))
}

// Applied records a batch that Decide said to Apply (or, in a fold, one the
// records show applied): b.Seq must be m.Seq, b.Records m.Records.
func (t *Table) Applied(m api.ProducerMark, b Batch) {
	e := t.byID[m.ID]
	if e == nil || expired(e, b.Start.Timestamp) {
		if e == nil {
			t.makeRoom(b.Start.Timestamp)
		}
		e = &entry{epoch: m.Epoch}
		t.byID[m.ID] = e
	}
	if m.Epoch != e.epoch {
		e.epoch, e.batches = m.Epoch, e.batches[:0]
	}
	if len(e.batches) == MaxAcks {
		copy(e.batches, e.batches[1:])
		e.batches = e.batches[:MaxAcks-1]
	}
	e.batches = append(e.batches, b)
	e.next = m.NextSeq()
	e.lastUsed, e.order = max(e.lastUsed, b.Start.Timestamp), b.Start.SeqNum
}

// makeRoom keeps a new id within MaxProducers: it drops the ids idle past
// IdleMs at nowMs and, if none was, the one whose latest batch is oldest.
func (t *Table) makeRoom(nowMs uint64) {
	if len(t.byID) < MaxProducers {
		return
	}
	var oldest string
	var first = true
	for id, e := range t.byID {
		if expired(e, nowMs) {
			delete(t.byID, id)
			continue
		}
		if first || e.order < t.byID[oldest].order {
			oldest, first = id, false
		}
	}
	if len(t.byID) >= MaxProducers {
		delete(t.byID, oldest)
	}
}
