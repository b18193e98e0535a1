package kafkabench

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// Body is a record body of size random (incompressible) bytes, the same
// for both faces.
func Body(size int) []byte {
	b := make([]byte, size)
	_, _ = rand.Read(b)
	return b
}

// ackBound bounds the wait for a run's last acknowledgements after its
// submissions stop.
const ackBound = 60 * time.Second

// driver runs one producer's closed loop: at most inFlight records
// unacknowledged; submit is called for each record with the function to
// call on its acknowledgement. It submits until dur has passed, then waits
// for every acknowledgement, and returns the records acknowledged and
// their latencies (submit to ack).
type driver struct {
	sem chan struct{}

	mu   sync.Mutex
	lat  []time.Duration
	err  error
	done sync.WaitGroup
}

func newDriver(inFlight int) *driver {
	return &driver{sem: make(chan struct{}, inFlight), lat: make([]time.Duration, 0, 1<<14)}
}

// acquire waits for a free slot (false when ctx ends first).
func (d *driver) acquire(ctx context.Context) bool {
	select {
	case d.sem <- struct{}{}:
		d.done.Add(1)
		return true
	case <-ctx.Done():
		return false
	}
}

// acked records one outcome submitted at t0 and frees its slot.
func (d *driver) acked(t0 time.Time, err error) {
	el := time.Since(t0)
	d.mu.Lock()
	if err != nil {
		if d.err == nil {
			d.err = err
		}
	} else {
		d.lat = append(d.lat, el)
	}
	d.mu.Unlock()
	<-d.sem
	d.done.Done()
}

// fail records a submission that never reached the client.
func (d *driver) fail(err error) {
	d.mu.Lock()
	if d.err == nil {
		d.err = err
	}
	d.mu.Unlock()
	<-d.sem
	d.done.Done()
}

func (d *driver) failed() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// wait waits (bounded) for every outstanding acknowledgement.
func (d *driver) wait() error {
	ch := make(chan struct{})
	go func() { d.done.Wait(); close(ch) }()
	select {
	case <-ch:
		return d.failed()
	case <-time.After(ackBound):
		return fmt.Errorf("acknowledgements still outstanding %v after the run", ackBound)
	}
}

// summarize merges the producers' latencies into one Sample.
func summarize(ds []*driver, elapsed time.Duration) Sample {
	var all []time.Duration
	for _, d := range ds {
		all = append(all, d.lat...)
	}
	n := len(all)
	return Sample{Rate: float64(n) / elapsed.Seconds(), P50: Quantile(all, 0.50), P99: Quantile(all, 0.99), Lat: all}
}

// KafkaOptions are the kgo producers' settings besides the workload's.
type KafkaOptions struct {
	Seed        string // broker address
	Compression kgo.CompressionCodec
}

// CreateTopic creates topic with n partitions through the Kafka face.
func CreateTopic(ctx context.Context, seed, topic string, n int32) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(seed))
	if err != nil {
		return err
	}
	defer cl.Close()
	req := kmsg.NewPtrCreateTopicsRequest()
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic, rt.NumPartitions, rt.ReplicationFactor = topic, n, -1
	req.Topics = append(req.Topics, rt)
	req.TimeoutMillis = 30000
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return fmt.Errorf("create topic %s: %w", topic, err)
	}
	for _, t := range resp.Topics {
		if err := kerr.ErrorForCode(t.ErrorCode); err != nil {
			return fmt.Errorf("create topic %s: %w", topic, err)
		}
	}
	return nil
}

// ProduceKafka runs w through the Kafka face: topic (created beforehand
// with w.Producers partitions) gets one kgo client per partition, acks=all,
// producing body for dur.
func ProduceKafka(ctx context.Context, o KafkaOptions, topic string, w Workload, body []byte, dur time.Duration) (Sample, error) {
	clients := make([]*kgo.Client, w.Producers)
	defer func() {
		for _, cl := range clients {
			if cl != nil {
				cl.Close()
			}
		}
	}()
	for i := range clients {
		opts := []kgo.Opt{
			kgo.SeedBrokers(o.Seed),
			kgo.DefaultProduceTopic(topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()),
			kgo.ProducerLinger(w.Linger),
			kgo.MaxBufferedRecords(w.InFlight + 1),
			kgo.ProducerBatchCompression(o.Compression),
			kgo.RecordRetries(0), // a failure fails the run, it is not hidden
		}
		if !w.Idempotent {
			opts = append(opts, kgo.DisableIdempotentWrite())
		}
		cl, err := kgo.NewClient(opts...)
		if err != nil {
			return Sample{}, err
		}
		clients[i] = cl
		// Connect and learn the partition's metadata before the clock
		// starts, as the S2 side opens its sessions first.
		pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err = cl.ProduceSync(pctx, &kgo.Record{Value: body, Partition: int32(i)}).FirstErr()
		cancel()
		if err != nil {
			return Sample{}, fmt.Errorf("kafka producer %d: first record: %w", i, err)
		}
	}
	ds := make([]*driver, w.Producers)
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for i, cl := range clients {
		d := newDriver(w.InFlight)
		ds[i] = d
		wg.Go(func() {
			for time.Now().Before(deadline) && d.failed() == nil {
				if !d.acquire(ctx) {
					return
				}
				t0 := time.Now()
				cl.Produce(ctx, &kgo.Record{Value: body, Partition: int32(i)}, func(_ *kgo.Record, err error) { d.acked(t0, err) })
			}
		})
	}
	wg.Wait()
	for _, d := range ds {
		if err := d.wait(); err != nil {
			return Sample{}, fmt.Errorf("kafka produce: %w", err)
		}
	}
	return summarize(ds, time.Since(start)), ctx.Err()
}

// ProduceS2S runs w through the S2 face: stream names[i] gets producer i,
// an SDK producer (batching as kgo does, with the same linger) on an S2S
// append session of its own client (so its own connection, as each kgo
// client has), producing body for dur.
func ProduceS2S(ctx context.Context, cfg sdk.Config, basin string, names []string, w Workload, body []byte, dur time.Duration) (Sample, error) {
	linger := w.Linger
	if linger == 0 {
		linger = -1 // the SDK's "no linger"
	}
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	prods := make([]*sdk.Producer, len(names))
	for i, name := range names {
		cl, err := sdk.New(cfg)
		if err != nil {
			return Sample{}, err
		}
		p, err := cl.Basin(basin).Stream(name).NewProducer(pctx, sdk.ProducerOptions{Linger: linger})
		if err != nil {
			return Sample{}, fmt.Errorf("s2s producer %d: %w", i, err)
		}
		prods[i] = p
		f, err := p.Submit(ctx, api.Record{Body: body})
		if err == nil {
			wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			_, err = f.Wait(wctx)
			cancel()
		}
		if err != nil {
			return Sample{}, fmt.Errorf("s2s producer %d: first record: %w", i, err)
		}
	}
	ds := make([]*driver, len(prods))
	start := time.Now()
	deadline := start.Add(dur)
	var wg sync.WaitGroup
	for i, p := range prods {
		d := newDriver(w.InFlight)
		ds[i] = d
		type pend struct {
			f  *sdk.RecordFuture
			t0 time.Time
		}
		futs := make(chan pend, w.InFlight)
		wg.Go(func() {
			for f := range futs {
				<-f.f.Done()
				_, err := f.f.Result()
				d.acked(f.t0, err)
			}
		})
		wg.Go(func() {
			defer close(futs)
			for time.Now().Before(deadline) && d.failed() == nil {
				if !d.acquire(ctx) {
					return
				}
				t0 := time.Now()
				f, err := p.Submit(ctx, api.Record{Body: body})
				if err != nil {
					d.fail(err)
					return
				}
				futs <- pend{f, t0}
			}
			p.Flush()
		})
	}
	wg.Wait()
	for _, d := range ds {
		if err := d.wait(); err != nil {
			return Sample{}, fmt.Errorf("s2s produce: %w", err)
		}
	}
	el := time.Since(start)
	for _, p := range prods {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		if err := p.Close(cctx); err != nil && !errors.Is(err, sdk.ErrSessionClosed) {
			cancel()
			return Sample{}, fmt.Errorf("s2s producer close: %w", err)
		}
		cancel()
	}
	return summarize(ds, el), ctx.Err()
}
