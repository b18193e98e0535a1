package producer

import "github.com/starlog/starlog/shared/api"

// Fold applies the records of a stream, in seq order, as the leader that
// appended them did: a record whose headers carry a valid producer mark
// opens a batch (only a batch's first record may carry one), applied if
// Decide, at that record's timestamp, says Apply. The rebuilt batches have
// no end (see Batch).
func (t *Table) Fold(recs []api.Record) {
	for i := range recs {
		r := &recs[i]
		m, ok, err := api.ProducerOf(r.Headers)
		if !ok || err != nil {
			continue
		}
		var ts uint64
		if r.Timestamp != nil {
			ts = *r.Timestamp
		}
		if t.Decide(m, ts).Kind != Apply {
			continue
		}
		t.Applied(m, Batch{Seq: m.Seq, Records: m.Records, Start: Pos{SeqNum: r.SeqNum, Timestamp: ts}})
	}
}
