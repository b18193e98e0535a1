package peerbench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSConfig is the nats-server configuration the benchmark runs: one
// local JetStream with file storage that fsyncs every message before its
// ack (sync_interval: always), the durability star gives every ack.
func NATSConfig(listen, storeDir string) string {
	return fmt.Sprintf("listen: %q\njetstream {\n  store_dir: %q\n  sync_interval: always\n  max_file_store: 64G\n}\n", listen, storeDir)
}

// RunNATS runs w against the JetStream at url for d and returns the acked
// messages per second. Each producer has its own connection and its own
// stream (prefix + index, one subject), deleted afterwards.
func RunNATS(ctx context.Context, url, prefix string, w Workload, recordSize int, d time.Duration) (float64, error) {
	body := body(recordSize)
	type producer struct {
		nc *nats.Conn
		js jetstream.JetStream
		st string
	}
	ps := make([]producer, w.Producers)
	defer func() {
		for _, p := range ps {
			if p.nc == nil {
				continue
			}
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			_ = p.js.DeleteStream(dctx, p.st)
			cancel()
			p.nc.Close()
		}
	}()
	for i := range ps {
		nc, err := nats.Connect(url, nats.Timeout(10*time.Second))
		if err != nil {
			return 0, fmt.Errorf("nats connect: %w", err)
		}
		js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(max(w.InFlight, w.Batch)))
		if err != nil {
			nc.Close()
			return 0, err
		}
		name := fmt.Sprintf("%s%d", prefix, i)
		ps[i] = producer{nc: nc, js: js, st: name}
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = js.CreateOrUpdateStream(sctx, jetstream.StreamConfig{Name: name, Subjects: []string{name}, Storage: jetstream.FileStorage})
		cancel()
		if err != nil {
			return 0, fmt.Errorf("create stream %s: %w", name, err)
		}
	}
	var acked atomic.Int64
	var firstErr error
	var mu sync.Mutex
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if firstErr == nil {
			firstErr = err
		}
	}
	runCtx, stop := context.WithTimeout(ctx, d)
	defer stop()
	start := time.Now()
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			var err error
			switch w.Shape {
			case "one":
				err = natsOne(runCtx, p.js, p.st, body, &acked)
			case "pipelined":
				err = natsPipelined(runCtx, p.js, p.st, body, &acked)
			case "batch":
				err = natsBatches(runCtx, p.js, p.st, body, w.Batch, &acked)
			default:
				err = fmt.Errorf("unknown shape %q", w.Shape)
			}
			if err != nil {
				fail(err)
			}
		})
	}
	wg.Wait()
	secs := time.Since(start).Seconds()
	if firstErr != nil {
		return 0, firstErr
	}
	return float64(acked.Load()) / secs, nil
}

// ackTimeout bounds the wait for one ack; a loaded machine's fsyncs are slow.
const ackTimeout = 30 * time.Second

func natsOne(ctx context.Context, js jetstream.JetStream, subj string, body []byte, acked *atomic.Int64) error {
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(context.Background(), ackTimeout)
		_, err := js.Publish(pctx, subj, body)
		cancel()
		if err != nil {
			return fmt.Errorf("publish: %w", err)
		}
		acked.Add(1)
	}
	return nil
}

// natsPipelined keeps up to the async window of publishes unacked (the
// client blocks PublishAsync at WithPublishAsyncMaxPending) until ctx ends,
// then waits for the rest; acks are counted as they arrive.
func natsPipelined(ctx context.Context, js jetstream.JetStream, subj string, body []byte, acked *atomic.Int64) error {
	futures := make(chan jetstream.PubAckFuture, 1<<16)
	errc := make(chan error, 1)
	go func() {
		defer close(errc)
		for f := range futures {
			select {
			case <-f.Ok():
				acked.Add(1)
			case err := <-f.Err():
				errc <- fmt.Errorf("async publish: %w", err)
				for range futures {
				}
				return
			}
		}
	}()
	var err error
	for ctx.Err() == nil {
		var f jetstream.PubAckFuture
		if f, err = js.PublishAsync(subj, body, jetstream.WithStallWait(ackTimeout)); err != nil {
			err = fmt.Errorf("async publish: %w", err)
			break
		}
		futures <- f
	}
	close(futures)
	if werr := <-errc; werr != nil {
		return werr
	}
	return err
}

func natsBatches(ctx context.Context, js jetstream.JetStream, subj string, body []byte, n int, acked *atomic.Int64) error {
	for ctx.Err() == nil {
		fs := make([]jetstream.PubAckFuture, n)
		for i := range fs {
			f, err := js.PublishAsync(subj, body, jetstream.WithStallWait(ackTimeout))
			if err != nil {
				return fmt.Errorf("async publish: %w", err)
			}
			fs[i] = f
		}
		for _, f := range fs {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("async publish: %w", err)
			case <-time.After(ackTimeout):
				return errors.New("async publish: no ack within the timeout")
			}
		}
		acked.Add(int64(n))
	}
	return nil
}
