package durable

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/durable/records"
)

// A fold checkpoint bounds what a star that has not seen a stream (after
// a restart, a takeover) reads before it can serve it: the fold of the
// stream's records [0, Next) kept in a metastore row, from which the
// fold goes on instead of from the start. Records never change once
// written, so the fold of a prefix is the same whoever computed it and
// whenever: a checkpoint is never wrong for the stream it was made of,
// only older. It names that stream twice, by the Durable Streams
// incarnation and by the starlog stream's id (a stream deleted and made
// again under its name, through either face, is another), and a fold
// uses it only when both match and it does not reach past the tail.
//
// The leader writes one off the request path (best effort, at most
// checkpointWriters at once) whenever its fold has gone checkpointEvery
// records past the last it wrote; a failed or skipped write only means
// the next cold fold reads more.
const (
	// checkpointEvery is how many records a fold goes past its last
	// checkpoint before it writes another: a cold fold reads at most
	// about this many records (plus those appended since).
	checkpointEvery = 4096
	// minCheckpointed is the tail below which a cold fold does not look
	// for a checkpoint: reading the records is as cheap.
	minCheckpointed = foldBatch
	// maxCheckpointBytes bounds a checkpoint row (DynamoDB's item limit is
	// 400 KB): a fold with more producer state than fits is not
	// checkpointed, and its cold folds read from the start.
	maxCheckpointBytes = 256 << 10
	// checkpointWriters bounds the checkpoint writes in flight per star.
	checkpointWriters = 4
)

// ckptKey is the checkpoint row of the stream name, beside its row (s#).
func ckptKey(basin, name string) meta.Key { return meta.Key{PK: "ds#" + basin, SK: "f#" + name} }

// loadCheckpoint returns the fold the stream's checkpoint holds, or nil
// when there is none that fits (another incarnation or stream, past the
// tail, unreadable): then the fold starts from the first record.
func (h *Handler) loadCheckpoint(ctx context.Context, name, incarnation string, tail uint64) *records.State {
	if tail < minCheckpointed {
		return nil
	}
	stream, err := h.n.StreamID(ctx, h.basin, name)
	if err != nil {
		return nil
	}
	k := ckptKey(h.basin, name)
	it, err := h.meta.Get(ctx, k.PK, k.SK)
	if err != nil {
		if !errors.Is(err, meta.ErrNotFound) {
			h.checkpoints.WithLabelValues("load_failed").Inc()
		}
		return nil
	}
	var c records.Checkpoint
	if err := json.Unmarshal(it.Val, &c); err != nil || c.Incarnation != incarnation || c.Stream != stream || c.Next > tail {
		h.checkpoints.WithLabelValues("load_unfit").Inc()
		return nil
	}
	h.checkpoints.WithLabelValues("loaded").Inc()
	return c.State()
}

// maybeCheckpoint writes s's checkpoint, off the caller's path, when it
// has gone checkpointEvery records past the last one (s remembers it).
func (h *Handler) maybeCheckpoint(name string, s *records.State) {
	if s.Next < s.Checkpointed+checkpointEvery {
		return
	}
	select {
	case h.ckptSlots <- struct{}{}:
	default:
		h.checkpoints.WithLabelValues("skipped").Inc()
		return // busy: a later fold writes it
	}
	snap := s.Clone()
	s.Checkpointed = s.Next
	go func() {
		defer func() { <-h.ckptSlots }()
		ctx, cancel := context.WithTimeout(context.Background(), checkpointTimeout)
		defer cancel()
		result := "written"
		if err := h.writeCheckpoint(ctx, name, snap); err != nil {
			result = "failed"
			h.log.Debug("fold checkpoint not written", "stream", name, "err", err)
		}
		h.checkpoints.WithLabelValues(result).Inc()
	}()
}

// checkpointTimeout bounds one checkpoint write (its stream id lookup and
// its put).
const checkpointTimeout = 10 * time.Second

func (h *Handler) writeCheckpoint(ctx context.Context, name string, s *records.State) error {
	stream, err := h.n.StreamID(ctx, h.basin, name)
	if err != nil {
		return err
	}
	val, err := json.Marshal(records.CheckpointOf(s, stream))
	if err != nil {
		return err
	}
	if len(val) > maxCheckpointBytes {
		return errors.New("durable: the fold's producer state is too large to checkpoint")
	}
	k := ckptKey(h.basin, name)
	_, err = h.meta.Put(ctx, k.PK, k.SK, val, meta.Always())
	return err
}

// dropCheckpoint deletes a removed stream's checkpoint (best effort: one
// left behind names a stream that no longer exists, so no fold uses it).
func (h *Handler) dropCheckpoint(ctx context.Context, name string) {
	k := ckptKey(h.basin, name)
	if err := h.meta.Delete(ctx, k.PK, k.SK, meta.Always()); err != nil {
		h.log.Debug("fold checkpoint not deleted", "stream", name, "err", err)
	}
}
