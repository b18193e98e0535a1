package node

import (
	"context"
	"time"

	"github.com/starlog/starlog/star/reader"
)

// A trim shows at once (docs/design.md §11, "On the read path"): reads
// of a led stream skip what lies below its trim point from the trim's
// acknowledgement on, long before the auditor reclaims anything. The
// leader learns the point from two places: the trims it acknowledges
// itself (streams.Stream.TrimPoint), and, once per leadership before its
// first read, the trim commands in the records its predecessors
// acknowledged that no catalog row counts yet (findTrim;
// reader.Reader.TrimInRecords scans them). A catalog row's
// trim point counts every trim below its end (the settle read them); a
// span ref's is only what its writer opened the stream with. So a
// restart, a handoff or a failover between a trim's ack and its settle
// loses nothing: the command is in the records, and the new leader reads
// them. Nothing is written for it, on the append path or off it.

// findTrimTimeout bounds the read of a stream's unsettled records for its
// trim commands: at most what the settle policy lets a stream keep in
// transit.
const findTrimTimeout = 30 * time.Second

// trimPoint is the point reads of l skip below.
func (l *ledStream) trimPoint() uint64 { return max(l.s.TrimPoint(), l.foundTrim.Load()) }

// findTrim reads, once per leadership of l, the trim point its records
// hold (reader.Reader.TrimInRecords). Reads wait for it; appends never do.
func (n *Node) findTrim(ctx context.Context, l *ledStream, basin string) error {
	if l.trimFound.Load() {
		return nil
	}
	select {
	case l.findSem <- struct{}{}:
	case <-ctx.Done():
		return n.storageErr("find the stream's trim point", ctx.Err())
	}
	defer func() { <-l.findSem }()
	if l.trimFound.Load() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, findTrimTimeout)
	defer cancel()
	p, err := n.reader.TrimInRecords(ctx, reader.Stream{ID: l.s.ID, Basin: basin})
	if err != nil {
		return n.storageErr("find the stream's trim point", err)
	}
	l.foundTrim.Store(p)
	l.trimFound.Store(true)
	return nil
}
