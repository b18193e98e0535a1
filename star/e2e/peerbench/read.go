package peerbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// The read row: one stream of n messages is written once on each system
// before the runs (not timed as a row, only reported), and every run reads
// all n from the start, as fast as the client can.

// How many append batches (star) or async publishes (JetStream) a fill
// keeps unacked.
const (
	FillStarBatches = 4
	FillNATSPending = 4096
)

func body(size int) []byte {
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(i * 131)
	}
	return b
}

// FillNATS creates the JetStream stream name (file storage, one subject of
// the same name) and publishes n messages of size bytes into it, keeping
// FillNATSPending unacked; it returns once all are acked.
func FillNATS(ctx context.Context, url, name string, n, size int) error {
	nc, err := nats.Connect(url, nats.Timeout(10*time.Second))
	if err != nil {
		return fmt.Errorf("nats connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(FillNATSPending))
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = js.CreateOrUpdateStream(sctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}, Storage: jetstream.FileStorage})
	cancel()
	if err != nil {
		return fmt.Errorf("create stream %s: %w", name, err)
	}
	b := body(size)
	for i := 0; i < n; i++ {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if _, err := js.PublishAsync(name, b, jetstream.WithStallWait(ackTimeout)); err != nil {
			return fmt.Errorf("async publish: %w", err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		return ctx.Err()
	}
	info, err := js.Stream(ctx, name)
	if err != nil {
		return err
	}
	if got := info.CachedInfo().State.Msgs; got != uint64(n) {
		return fmt.Errorf("stream %s holds %d messages after the fill, want %d", name, got, n)
	}
	return nil
}

// ReadNATS reads the n messages of the JetStream stream name from its
// start with an ordered consumer (no acks) pulling up to ReadPullBytes at
// a time, on a new connection, and returns messages per second (from before
// the consumer's creation to the last message).
func ReadNATS(ctx context.Context, url, name string, n int) (float64, error) {
	nc, err := nats.Connect(url, nats.Timeout(10*time.Second))
	if err != nil {
		return 0, fmt.Errorf("nats connect: %w", err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	cons, err := js.OrderedConsumer(ctx, name, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverAllPolicy})
	if err != nil {
		return 0, fmt.Errorf("ordered consumer on %s: %w", name, err)
	}
	it, err := cons.Messages(jetstream.PullMaxBytes(ReadPullBytes))
	if err != nil {
		return 0, err
	}
	defer it.Stop()
	// The ordered consumer delivers in order without gaps (it recreates
	// itself on one), so only the last message's seq is checked: parsing
	// every message's metadata would bill the client for our check.
	var last jetstream.Msg
	for i := 1; i <= n; i++ {
		if last, err = it.Next(); err != nil {
			return 0, fmt.Errorf("consumer, message %d of %d: %w", i, n, err)
		}
	}
	secs := time.Since(t0).Seconds()
	if n > 0 {
		md, err := last.Metadata()
		if err != nil {
			return 0, err
		}
		if md.Sequence.Stream != uint64(n) {
			return 0, fmt.Errorf("consumer: message %d has stream seq %d", n, md.Sequence.Stream)
		}
	}
	return float64(n) / secs, nil
}

// FillStar creates the star stream s and appends n records of size bytes
// to it in unary batches of api.MaxBatchRecords, FillStarBatches in flight.
func FillStar(ctx context.Context, b *sdk.Basin, name string, n, size int) error {
	if _, err := b.CreateStream(ctx, name, nil); err != nil {
		return fmt.Errorf("create stream %s: %w", name, err)
	}
	s := b.Stream(name)
	rec := body(size)
	batches := make(chan int)
	go func() {
		defer close(batches)
		for left := n; left > 0; left -= api.MaxBatchRecords {
			select {
			case batches <- min(left, api.MaxBatchRecords):
			case <-ctx.Done():
				return
			}
		}
	}()
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	for range FillStarBatches {
		wg.Go(func() {
			for k := range batches {
				recs := make([]api.Record, k)
				for i := range recs {
					recs[i].Body = rec
				}
				err := appendRetrying(ctx, s, &api.AppendInput{Records: recs})
				if err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = fmt.Errorf("append to %s: %w", name, err)
					}
					mu.Unlock()
					for range batches {
					}
					return
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return firstErr
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	tail, err := s.CheckTail(ctx)
	if err != nil {
		return err
	}
	if tail.SeqNum != uint64(n) {
		return fmt.Errorf("stream %s has tail %d after the fill, want %d", name, tail.SeqNum, n)
	}
	return nil
}

// appendRetrying appends in, waiting out the stream's throughput limit:
// the fill runs against star dev's defaults (S2's 100 MiB/s a stream), and
// a 429 rate_limited append was not applied.
func appendRetrying(ctx context.Context, s *sdk.Stream, in *api.AppendInput) error {
	for {
		actx, cancel := context.WithTimeout(ctx, ackTimeout)
		_, err := s.Append(actx, in)
		cancel()
		var ae *api.Error
		if err == nil || !errors.As(err, &ae) || ae.Code != api.CodeRateLimited {
			return err
		}
		select {
		case <-time.After(max(ae.RetryAfter, time.Millisecond)):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// ReadStar reads the n records of the star stream s from seq 0 on one S2S
// read session of the Go SDK and returns records per second (from before
// the session's opening to the last record).
func ReadStar(ctx context.Context, s *sdk.Stream, n int) (float64, error) {
	t0 := time.Now()
	rs, err := s.ReadSession(ctx, api.ReadRequest{From: api.FromSeqNum, Value: 0, Count: api.Uint64(uint64(n))}, sdk.ReadSessionOptions{})
	if err != nil {
		return 0, err
	}
	defer rs.Close()
	next := uint64(0)
	for {
		b, err := rs.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("read session, at seq %d of %d: %w", next, n, err)
		}
		for _, r := range b.Records {
			if r.SeqNum != next {
				return 0, fmt.Errorf("read session: record %d has seq num %d", next, r.SeqNum)
			}
			next++
		}
	}
	if next != uint64(n) {
		return 0, fmt.Errorf("read session ended after %d records of %d", next, n)
	}
	return float64(n) / time.Since(t0).Seconds(), nil
}
