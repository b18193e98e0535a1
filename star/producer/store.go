package producer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
)

// A stream's table in the metastore (docs/design.md §16.4): its
// checkpoint, and the rebuild of the table from that checkpoint and the
// records after it. The star that leads the stream calls both
// (star/node/producers.go); the reads go through it.

const (
	// CheckpointEvery is how many records a stream appends after its last
	// producer checkpoint before the leader writes the next: a star that
	// opens the stream folds at most about this many records (and never
	// records older than IdleMs before the tail).
	CheckpointEvery = 4096
	// foldBatch is how many records one read of the fold asks for.
	foldBatch = 1000
)

// CheckpointKey is where a stream's producer checkpoint lives: its own
// partition, keyed by the stream's id (an incarnation), so a recreated
// stream never reads its predecessor's.
func CheckpointKey(streamID string) meta.Key {
	return meta.Key{PK: "producers#" + streamID, SK: "checkpoint"}
}

// SaveCheckpoint writes stream streamID's checkpoint c.
func SaveCheckpoint(ctx context.Context, ms meta.Store, streamID string, c Checkpoint) error {
	b, err := c.Encode()
	if err != nil {
		return err
	}
	k := CheckpointKey(streamID)
	_, err = ms.Put(ctx, k.PK, k.SK, b, meta.Always())
	return err
}

// ReadFunc reads a stream's records for a rebuild, without waiting.
type ReadFunc func(ctx context.Context, req api.ReadRequest) ([]api.Record, error)

// Rebuild rebuilds stream streamID's table as of its durable tail (seq
// tailSeq, timestamp tailTs): the checkpoint, then the records after it,
// read through read. Records whose timestamp is more than IdleMs below the
// tail's hold no producer any later batch (stamped at or after the tail)
// remembers, so the fold skips them. It writes a checkpoint every
// CheckpointEvery records it folds and one at the tail, best effort
// (failures are logged to log): a later rebuild resumes there.
func Rebuild(ctx context.Context, ms meta.Store, streamID string, tailSeq, tailTs uint64, read ReadFunc, log *slog.Logger) (*Table, error) {
	t, from := New(), uint64(0)
	k := CheckpointKey(streamID)
	it, err := ms.Get(ctx, k.PK, k.SK)
	switch {
	case err == nil:
		c, err := DecodeCheckpoint(it.Val)
		if err != nil {
			return nil, err
		}
		if c.Next <= tailSeq {
			t, from = FromCheckpoint(c), c.Next
		}
	case !errors.Is(err, meta.ErrNotFound):
		return nil, fmt.Errorf("producer: checkpoint of %s: %w", streamID, err)
	}
	if from >= tailSeq {
		return t, nil
	}
	noWait, folded := time.Duration(0), 0
	if tailTs > IdleMs {
		one := uint64(1)
		recs, err := read(ctx, api.ReadRequest{From: api.FromTimestamp, Value: tailTs - IdleMs, Count: &one, Wait: &noWait})
		if err != nil {
			return nil, fmt.Errorf("producer: producers of %s: the fold's start: %w", streamID, err)
		}
		if len(recs) == 1 {
			from = max(from, recs[0].SeqNum)
		}
	}
	save := func(next uint64, last api.Record) {
		var ts uint64
		if last.Timestamp != nil {
			ts = *last.Timestamp
		}
		c, ok := t.Snapshot(next, ts)
		if !ok {
			return
		}
		if err := SaveCheckpoint(ctx, ms, streamID, c); err != nil {
			log.Warn("producer checkpoint of a fold failed", "stream", streamID, "err", err)
		}
	}
	for from < tailSeq {
		count := min(foldBatch, tailSeq-from)
		recs, err := read(ctx, api.ReadRequest{From: api.FromSeqNum, Value: from, Clamp: true, Count: &count, Wait: &noWait})
		if err != nil {
			return nil, fmt.Errorf("producer: producers of %s: fold from %d: %w", streamID, from, err)
		}
		for len(recs) > 0 && recs[len(recs)-1].SeqNum >= tailSeq {
			recs = recs[:len(recs)-1]
		}
		if len(recs) == 0 {
			break // nothing retained below the tail from here
		}
		t.Fold(recs)
		from = recs[len(recs)-1].SeqNum + 1
		folded += len(recs)
		if folded >= CheckpointEvery && from < tailSeq {
			// The fold so far is the table as of from: a later load
			// resumes here if this one does not finish.
			save(from, recs[len(recs)-1])
			folded = 0
		}
	}
	if folded > 0 {
		save(tailSeq, api.Record{Timestamp: &tailTs})
	}
	return t, nil
}
