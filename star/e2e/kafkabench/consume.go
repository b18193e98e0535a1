package kafkabench

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// FillKafka produces n records of body to partition 0 of topic (created
// beforehand) through the Kafka face, pipelined, and returns once all are
// acknowledged.
func FillKafka(ctx context.Context, seed, topic string, n int, body []byte) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed), kgo.DefaultProduceTopic(topic),
		kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.RequiredAcks(kgo.AllISRAcks()),
		kgo.DisableIdempotentWrite(), kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.MaxBufferedRecords(10000), kgo.ProducerLinger(5*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	var failed atomic.Pointer[error]
	for i := 0; i < n && failed.Load() == nil; i++ {
		cl.Produce(ctx, &kgo.Record{Value: body}, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	fctx, cancel := context.WithTimeout(ctx, ackBound)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return fmt.Errorf("fill %s: %w", topic, err)
	}
	if e := failed.Load(); e != nil {
		return fmt.Errorf("fill %s: %w", topic, *e)
	}
	return nil
}

// consumeBound bounds one consume run.
const consumeBound = 5 * time.Minute

// ConsumeFetchBytes is the kgo consumer's fetch size, for the whole fetch
// and for the partition: the star's bound on a fetch (star/kafka
// MaxFetchBytes). kgo's default for a partition is Kafka's 1 MiB, which
// makes a catch-up read of one partition a round trip per MiB.
const ConsumeFetchBytes = 32 << 20

// ConsumeKafka reads partition 0 of topic from its start through the
// Kafka face with a kgo consumer (no group; fetches of fetchBytes) until
// n records have arrived, checking that their offsets run 0 … n-1, and
// returns records per second from the client's creation to the last
// record.
func ConsumeKafka(ctx context.Context, seed, topic string, n int, fetchBytes int32) (float64, error) {
	ctx, cancel := context.WithTimeout(ctx, consumeBound)
	defer cancel()
	t0 := time.Now()
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed),
		kgo.FetchMaxBytes(fetchBytes), kgo.FetchMaxPartitionBytes(fetchBytes),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{topic: {0: kgo.NewOffset().AtStart()}}))
	if err != nil {
		return 0, err
	}
	defer cl.Close()
	next := int64(0)
	for next < int64(n) {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return 0, fmt.Errorf("consume %s: at offset %d of %d: %w", topic, next, n, err)
		}
		var ferr error
		fs.EachError(func(t string, p int32, err error) {
			if !errors.Is(err, context.Canceled) {
				ferr = fmt.Errorf("consume %s/%d: %w", t, p, err)
			}
		})
		if ferr != nil {
			return 0, ferr
		}
		var bad error
		fs.EachRecord(func(r *kgo.Record) {
			if bad == nil && r.Offset != next {
				bad = fmt.Errorf("consume %s: record at offset %d, want %d", topic, r.Offset, next)
			}
			next++
		})
		if bad != nil {
			return 0, bad
		}
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}
