package node

import (
	"context"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/reader"
)

// A trim shows at once (docs/design.md §11, "On the read path"): reads
// of a led stream skip what lies below its trim point from the trim's
// acknowledgement on, long before the auditor reclaims anything. The
// leader learns the point from two places: the trims it acknowledges
// itself (streams.Stream.TrimPoint), and, once per leadership before its
// first read, the trim commands in the records its predecessors
// acknowledged that no catalog row counts yet (findTrim). A catalog row's
// trim point counts every trim below its end (the settle read them); a
// span ref's is only what its writer opened the stream with. So a
// restart, a handoff or a failover between a trim's ack and its settle
// loses nothing: the command is in the records, and the new leader reads
// them. Nothing is written for it, on the append path or off it.

// findTrimTimeout bounds the read of a stream's unsettled records for its
// trim commands: at most what the settle policy lets a stream keep in
// transit.
const findTrimTimeout = 30 * time.Second

// rowPage is how many rows one backward query for the greatest catalog
// row reads.
const rowPage = 256

// trimPoint is the point reads of l skip below.
func (l *ledStream) trimPoint() uint64 { return max(l.s.TrimPoint(), l.foundTrim.Load()) }

// findTrim reads, once per leadership of l, the trim point its records
// hold (trimInRecords). Reads wait for it; appends never do.
func (n *Node) findTrim(ctx context.Context, l *ledStream, basin string) error {
	if l.trimFound.Load() {
		return nil
	}
	l.findMu.Lock()
	defer l.findMu.Unlock()
	if l.trimFound.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, findTrimTimeout)
	defer cancel()
	p, err := trimInRecords(ctx, n.meta, n.reader, reader.Stream{ID: l.s.ID, Basin: basin})
	if err != nil {
		return n.storageErr("find the stream's trim point", err)
	}
	l.foundTrim.Store(p)
	l.trimFound.Store(true)
	return nil
}

// trimInRecords is stream st's trim point as its rows and records hold
// it: its greatest catalog row's, moved by the trim commands in the
// records above that row's end (span refs, read through the reader).
func trimInRecords(ctx context.Context, ms meta.Store, r *reader.Reader, st reader.Stream) (uint64, error) {
	trim, from, err := settledTrim(ctx, ms, st.ID)
	if err != nil {
		return 0, err
	}
	for {
		res, err := r.Read(ctx, st, reader.AtSeq(from), reader.Limits{}, nil)
		if err != nil {
			return 0, err
		}
		for i := range res.Records {
			rec := &res.Records[i]
			trim = api.ApplyTrim(trim, rec.Headers, rec.Body, rec.SeqNum)
		}
		if res.Stop != reader.StopBatch || res.Next <= from {
			return trim, nil // the rows' end: the frontier
		}
		from = res.Next
	}
}

// settledTrim is the trim point and end of stream id's greatest catalog
// row (0, 0 when it has none).
func settledTrim(ctx context.Context, ms meta.Store, id string) (trim, end uint64, err error) {
	q := meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~", Backward: true, Limit: rowPage}
	for {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return 0, 0, fmt.Errorf("rows of %s: %w", id, err)
		}
		for _, it := range pg.Items {
			var ref meta.Ref
			if err := meta.Decode(it.Val, &ref); err != nil {
				return 0, 0, fmt.Errorf("row %s/%s: %w", it.PK, it.SK, err)
			}
			if ref.Settled != nil {
				return ref.TrimPoint, ref.EndSeq, nil
			}
		}
		if pg.Next == "" {
			return 0, 0, nil
		}
		q.PageToken = pg.Next
	}
}
