package node

import (
	"context"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/api"
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
	// producerCheckpointTimeout bounds one checkpoint write.
	producerCheckpointTimeout = 10 * time.Second
)

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
		read := func(ctx context.Context, req api.ReadRequest) ([]api.Record, error) {
			b, err := a.n.Read(ctx, a.basin, a.name, req, nil)
			return b.Records, err
		}
		return producer.Rebuild(ctx, a.n.meta, l.s.ID, tail.SeqNum, tail.Timestamp, read, a.n.log)
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

// maybeCheckpointProducers writes the producer checkpoint of a loaded
// stream in the background once producer.CheckpointEvery records were
// appended since the last one: never on the ack path, one write at a time.
func (n *Node) maybeCheckpointProducers(l *ledStream) {
	if !l.producersLoaded.Load() || l.s.Tail().SeqNum-l.producerCkpt.Load() < producer.CheckpointEvery {
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
	if err := producer.SaveCheckpoint(ctx, n.meta, l.s.ID, c); err != nil {
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
