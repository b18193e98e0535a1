package node

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/producer"
)

// Idempotent producers on the S2 face (docs/design.md §16.4): the leader
// decides in its sequencer (star/facade, star/producer); this file loads a
// stream's table when its first marked batch arrives on this star (after
// an open, a restart, a handoff or a failover alike) and checkpoints it
// off the append path.

const (
	// producerLoadTimeout bounds the load of a stream's producer table: the
	// checkpoint and the fold of the records after it.
	producerLoadTimeout = 30 * time.Second
	// producerFoldBatch is how many records one read of the fold asks for.
	producerFoldBatch = 1000
	// ProducerCheckpointEvery is how many records a stream appends after
	// its last producer checkpoint before the leader writes the next: a
	// star that opens the stream folds at most about this many records
	// (and never records older than producer.IdleMs before the tail).
	ProducerCheckpointEvery = 4096
	// producerCheckpointTimeout bounds one checkpoint write.
	producerCheckpointTimeout = 10 * time.Second
)

// producerKey is where a stream's producer checkpoint lives: its own
// partition, keyed by the stream's id (an incarnation), so a recreated
// stream never reads its predecessor's.
func producerKey(streamID string) meta.Key {
	return meta.Key{PK: "producers#" + streamID, SK: "checkpoint"}
}

// marked reports whether an append's first record carries a producer
// header (the facade judges whether it is well formed).
func marked(in *api.AppendInput) bool {
	if len(in.Records) == 0 {
		return false
	}
	_, ok, err := api.ProducerOf(in.Records[0].Headers)
	return ok || err != nil
}

// loadProducers loads the producer table of the appender's stream if it is
// not yet loaded. The load runs on its own, bounded by producerLoadTimeout,
// not by the request that started it: a request that stops waiting (a
// unary append's admission timeout) gets a retryable 503, and its retry
// finds the load done or still going, not started over.
func (a *Appender) loadProducers(ctx context.Context) error {
	l := a.l
	if l.producersLoaded.Load() {
		return nil
	}
	l.producerLoadMu.Lock()
	ld := l.producerLoad
	if ld == nil {
		ld = &producerLoad{done: make(chan struct{})}
		l.producerLoad = ld
		go a.runProducerLoad(ld)
	}
	l.producerLoadMu.Unlock()
	select {
	case <-ld.done:
	case <-ctx.Done():
		return api.Unavailable("the stream's producer state is still being rebuilt; nothing was sequenced; retry")
	}
	if ld.err != nil {
		return api.Unavailable("this star could not rebuild the stream's producer state yet; nothing was sequenced; retry")
	}
	return nil
}

// producerLoad is one load of a stream's producer table in flight.
type producerLoad struct {
	done chan struct{}
	err  error // set before done closes
}

func (a *Appender) runProducerLoad(ld *producerLoad) {
	l := a.l
	ctx, cancel := context.WithTimeout(context.Background(), producerLoadTimeout)
	defer cancel()
	ld.err = l.s.LoadProducers(ctx, func(ctx context.Context, tail facade.Position) (*producer.Table, error) {
		return a.n.foldProducers(ctx, a.basin, a.name, l.s.ID, tail)
	})
	l.producerLoadMu.Lock()
	if ld.err != nil {
		a.n.log.Warn("loading a stream's producers failed", "stream", l.s.ID, "err", ld.err)
		l.producerLoad = nil // the next marked batch tries again
	} else {
		l.producersLoaded.Store(true)
	}
	l.producerLoadMu.Unlock()
	close(ld.done)
}

// foldProducers rebuilds a stream's producers as of its durable tail: the
// checkpoint, then the records after it. Records whose timestamp is more
// than producer.IdleMs below the tail's hold no producer any later batch
// (stamped at or after the tail) remembers, so the fold skips them.
func (n *Node) foldProducers(ctx context.Context, basin, name, id string, tail facade.Position) (*producer.Table, error) {
	t, from := producer.New(), uint64(0)
	it, err := n.meta.Get(ctx, producerKey(id).PK, producerKey(id).SK)
	switch {
	case err == nil:
		c, err := producer.DecodeCheckpoint(it.Val)
		if err != nil {
			return nil, err
		}
		if c.Next <= tail.SeqNum {
			t, from = producer.FromCheckpoint(c), c.Next
		}
	case !errors.Is(err, meta.ErrNotFound):
		return nil, fmt.Errorf("node: producer checkpoint of %s: %w", id, err)
	}
	if from >= tail.SeqNum {
		return t, nil
	}
	noWait, folded := time.Duration(0), 0
	if tail.Timestamp > producer.IdleMs {
		one := uint64(1)
		b, err := n.Read(ctx, basin, name, api.ReadRequest{From: api.FromTimestamp, Value: tail.Timestamp - producer.IdleMs, Count: &one, Wait: &noWait}, nil)
		if err != nil {
			return nil, fmt.Errorf("node: producers of %s: the fold's start: %w", id, err)
		}
		if len(b.Records) == 1 {
			from = max(from, b.Records[0].SeqNum)
		}
	}
	for from < tail.SeqNum {
		count := min(producerFoldBatch, tail.SeqNum-from)
		b, err := n.Read(ctx, basin, name, api.ReadRequest{From: api.FromSeqNum, Value: from, Clamp: true, Count: &count, Wait: &noWait}, nil)
		if err != nil {
			return nil, fmt.Errorf("node: producers of %s: fold from %d: %w", id, from, err)
		}
		recs := b.Records
		for len(recs) > 0 && recs[len(recs)-1].SeqNum >= tail.SeqNum {
			recs = recs[:len(recs)-1]
		}
		if len(recs) == 0 {
			break // nothing retained below the tail from here
		}
		t.Fold(recs)
		from = recs[len(recs)-1].SeqNum + 1
		folded += len(recs)
		if folded >= ProducerCheckpointEvery && from < tail.SeqNum {
			// The fold so far is the table as of from: a later load
			// resumes here if this one does not finish.
			n.putProducerCheckpoint(ctx, id, t, from, recs[len(recs)-1])
			folded = 0
		}
	}
	if folded > 0 {
		n.putProducerCheckpoint(ctx, id, t, tail.SeqNum, api.Record{Timestamp: &tail.Timestamp})
	}
	return t, nil
}

// putProducerCheckpoint writes a fold's table as of next (every record
// below it folded; last is the last one), best effort: a failure only
// makes a later fold longer.
func (n *Node) putProducerCheckpoint(ctx context.Context, id string, t *producer.Table, next uint64, last api.Record) {
	var ts uint64
	if last.Timestamp != nil {
		ts = *last.Timestamp
	}
	c, ok := t.Snapshot(next, ts)
	if !ok {
		return
	}
	b, err := c.Encode()
	if err == nil {
		k := producerKey(id)
		_, err = n.meta.Put(ctx, k.PK, k.SK, b, meta.Always())
	}
	if err != nil {
		n.log.Warn("producer checkpoint of a fold failed", "stream", id, "err", err)
	}
}

// maybeCheckpointProducers writes the producer checkpoint of a loaded
// stream in the background once ProducerCheckpointEvery records were
// appended since the last one: never on the ack path, one write at a time.
func (n *Node) maybeCheckpointProducers(l *ledStream) {
	if !l.producersLoaded.Load() || l.s.Tail().SeqNum-l.producerCkpt.Load() < ProducerCheckpointEvery {
		return
	}
	if !l.producerCkptBusy.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer l.producerCkptBusy.Store(false)
		ctx, cancel := context.WithTimeout(context.Background(), producerCheckpointTimeout)
		defer cancel()
		if err := n.checkpointProducers(ctx, l); err != nil {
			n.log.Warn("producer checkpoint failed", "stream", l.s.ID, "err", err)
		}
	}()
}

// checkpointProducers writes the stream's producer table as of its durable
// tail, if it can be told now (producer.Table.Snapshot).
func (n *Node) checkpointProducers(ctx context.Context, l *ledStream) error {
	c, ok := l.s.ProducerCheckpoint()
	if !ok || c.Next <= l.producerCkpt.Load() {
		return nil
	}
	b, err := c.Encode()
	if err != nil {
		return err
	}
	k := producerKey(l.s.ID)
	if _, err := n.meta.Put(ctx, k.PK, k.SK, b, meta.Always()); err != nil {
		return err
	}
	l.producerCkpt.Store(c.Next)
	return nil
}

// endTimestamp reads the timestamp of a retry's last record when its
// original was rebuilt from the records (streams.Ack.EndTimestampUnknown).
func (n *Node) endTimestamp(ctx context.Context, basin, name string, end uint64) (uint64, error) {
	one, noWait := uint64(1), time.Duration(0)
	b, err := n.Read(ctx, basin, name, api.ReadRequest{From: api.FromSeqNum, Value: end - 1, Count: &one, Wait: &noWait}, nil)
	if err != nil {
		return 0, err
	}
	if len(b.Records) != 1 || b.Records[0].SeqNum != end-1 || b.Records[0].Timestamp == nil {
		return 0, fmt.Errorf("node: record %d of %s/%s is not readable", end-1, basin, name)
	}
	return *b.Records[0].Timestamp, nil
}
