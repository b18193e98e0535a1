package clientcmd

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/star/clientcmd/hist"
)

// benchConfig is what bench runs.
type benchConfig struct {
	streams      int
	prefix       string
	producers    int
	readers      int
	recordSize   int
	rate         float64
	duration     time.Duration
	linger       time.Duration
	maxUnacked   int64
	create       bool
	storageClass string
	catchUp      time.Duration
	asJSON       bool
	progress     time.Duration
	mode         string      // benchModeSession or benchModeUnary
	unary        unaryConfig // --mode unary (benchunary.go)
}

func (c *conn) benchCmd() *cobra.Command {
	cfg := benchConfig{}
	cmd := &cobra.Command{
		Use:   "bench",
		Short: "Measure append throughput, ack latency and end-to-end latency",
		Long: `Run --producers producers spread over --streams streams of the basin, each
appending records of --record-size bytes through an append session with
automatic batching, and --readers tailing read sessions per stream, for
--duration. The total rate is capped by --rate records/s (0: as fast as
the server acks).

Each record carries its send time, so readers measure the end-to-end
latency from Submit to delivery on a live read session; the ack latency is
from Submit to the record's ack. At the end it reports append throughput
(MiB/s of metered bytes and records/s), ack and end-to-end latency
percentiles (p50, p90, p99, p99.9, max), and read throughput; --json
prints the same as one JSON object. On a terminal a progress line is
updated every second.

The streams are named <prefix><i> and created if missing (--create).
After the producers stop, readers get --catch-up to receive every acked
record; records they never receive are reported as missing, and make the
command fail, as do failed appends.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.validate(); err != nil {
				return err
			}
			c.encoding = cfg.unary.sdkEncoding()
			b, err := c.basinHandle()
			if err != nil {
				return err
			}
			ctx, stop := interruptible(cmd.Context())
			defer stop()
			out := cmd.OutOrStdout()
			if isTerminal(out) && !cfg.asJSON {
				cfg.progress = time.Second
			}
			res, err := runBench(ctx, b, cfg, out)
			if res != nil {
				if cfg.asJSON {
					if perr := printJSON(out, res); perr != nil {
						return perr
					}
				} else {
					res.print(out)
				}
			}
			return err
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.streams, "streams", 1, "number of streams")
	f.StringVar(&cfg.prefix, "stream-prefix", "bench-", "stream names are this prefix and a number")
	f.IntVar(&cfg.producers, "producers", 1, "number of producers, spread round-robin over the streams")
	f.IntVar(&cfg.readers, "readers", 1, "tailing readers per stream (0 for none)")
	f.IntVar(&cfg.recordSize, "record-size", 1024, "record body size in bytes (at least 16)")
	f.Float64Var(&cfg.rate, "rate", 0, "total target rate in records/s (0: as fast as possible)")
	f.DurationVar(&cfg.duration, "duration", 10*time.Second, "how long the producers run")
	f.DurationVar(&cfg.linger, "linger", 5*time.Millisecond, "producer linger before a batch is sent")
	f.Int64Var(&cfg.maxUnacked, "max-unacked-bytes", sdk.DefaultMaxUnackedBytes, "per-producer bound on unacked bytes (backpressure)")
	f.BoolVar(&cfg.create, "create", true, "create missing streams")
	f.StringVar(&cfg.storageClass, "storage-class", "", "storage class of created streams: standard or express (default: the basin's)")
	f.DurationVar(&cfg.catchUp, "catch-up", 10*time.Second, "how long readers may take to receive the last acked records")
	f.BoolVar(&cfg.asJSON, "json", false, "print the result as JSON")
	f.StringVar(&cfg.mode, "mode", benchModeSession, "how producers append: session (an append session, batching by --linger and --max-unacked-bytes) or unary (appends of --batch records, --in-flight at a time)")
	cfg.unary.register(f)
	cmd.PreRun = func(cmd *cobra.Command, _ []string) {
		// In session mode --in-flight caps unacked records (as bytes).
		if cfg.mode == benchModeSession && cmd.Flags().Changed("in-flight") && !cmd.Flags().Changed("max-unacked-bytes") {
			cfg.maxUnacked = int64(cfg.unary.inFlight) * int64(8+cfg.recordSize)
		}
	}
	// Other modes are subcommands in their own files.
	cmd.AddCommand(c.benchReadCmd())
	return cmd
}

func (cfg *benchConfig) validate() error {
	switch {
	case cfg.streams < 1:
		return errors.New("--streams must be at least 1")
	case cfg.producers < 1:
		return errors.New("--producers must be at least 1")
	case cfg.readers < 0:
		return errors.New("--readers must not be negative")
	case cfg.recordSize < benchHeaderLen || cfg.recordSize > api.MaxBatchMeteredBytes-8:
		return fmt.Errorf("--record-size must be %d to %d", benchHeaderLen, api.MaxBatchMeteredBytes-8)
	case cfg.rate < 0 || math.IsNaN(cfg.rate) || math.IsInf(cfg.rate, 0):
		return errors.New("--rate must be a non-negative number")
	case cfg.duration <= 0:
		return errors.New("--duration must be positive")
	}
	if cfg.storageClass != "" {
		if _, err := parseStorageClass(cfg.storageClass); err != nil {
			return err
		}
	}
	switch cfg.mode {
	case benchModeSession:
	case benchModeUnary:
		return cfg.unary.validate(cfg.recordSize)
	default:
		return fmt.Errorf("--mode must be %s or %s, got %q", benchModeSession, benchModeUnary, cfg.mode)
	}
	return nil
}

// Bench records start with a header: magic, send time (Unix ns), producer.
const (
	benchMagic     = "SLB1"
	benchHeaderLen = 16
)

// encodeBenchBody fills body's header; the rest is left as is.
func encodeBenchBody(body []byte, sent time.Time, producer uint32) {
	copy(body, benchMagic)
	binary.BigEndian.PutUint64(body[4:], uint64(sent.UnixNano()))
	binary.BigEndian.PutUint32(body[12:], producer)
}

// decodeBenchBody reads a bench record's header; ok is false for other
// records.
func decodeBenchBody(body []byte) (sent time.Time, producer uint32, ok bool) {
	if len(body) < benchHeaderLen || string(body[:4]) != benchMagic {
		return time.Time{}, 0, false
	}
	ns := binary.BigEndian.Uint64(body[4:])
	if ns > math.MaxInt64 {
		return time.Time{}, 0, false
	}
	return time.Unix(0, int64(ns)), binary.BigEndian.Uint32(body[12:]), true
}

// benchState is the shared counters of a run.
type benchState struct {
	ackLat       hist.Histogram
	e2eLat       hist.Histogram
	appended     atomic.Uint64
	appendBytes  atomic.Uint64
	appendErrors atomic.Uint64
	read         atomic.Uint64
	readBytes    atomic.Uint64
	// ends[i] is the highest acked end seq num of stream i.
	ends []atomic.Uint64
	// firstErr is the first failure.
	mu       sync.Mutex
	firstErr error
}

func (st *benchState) noteErr(err error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.firstErr == nil {
		st.firstErr = err
	}
}

// runBench runs the benchmark and returns its result.
func runBench(ctx context.Context, b *sdk.Basin, cfg benchConfig, progressOut io.Writer) (*benchResult, error) {
	names := make([]string, cfg.streams)
	for i := range names {
		names[i] = fmt.Sprintf("%s%d", cfg.prefix, i)
	}
	if cfg.create {
		if err := createStreams(ctx, b, names, cfg.storageClass); err != nil {
			return nil, err
		}
	}
	st := &benchState{ends: make([]atomic.Uint64, cfg.streams)}

	// Readers start at the tail before any producer, so they see every
	// bench record.
	readCtx, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	var readers sync.WaitGroup
	var rds []*benchReader
	var closing atomic.Bool
	for i, name := range names {
		for range cfg.readers {
			rs, err := b.Stream(name).ReadSession(readCtx, api.ReadRequest{}, sdk.ReadSessionOptions{})
			if err != nil {
				return nil, fmt.Errorf("open reader on %s: %w", name, err)
			}
			rd := &benchReader{rs: rs, stream: i}
			rds = append(rds, rd)
			readers.Go(func() {
				if err := rd.run(st); err != nil && !closing.Load() {
					st.noteErr(fmt.Errorf("reader on %s: %w", name, err))
				}
			})
		}
	}

	start := time.Now()
	stopProgress := startProgress(ctx, cfg, st, start, progressOut)
	prodCtx, stopProducers := context.WithTimeout(ctx, cfg.duration)
	defer stopProducers()
	var producers sync.WaitGroup
	pad := make([]byte, cfg.recordSize)
	_, _ = rand.NewChaCha8([32]byte{1}).Read(pad) // incompressible; never fails
	produce := benchProduce
	switch cfg.mode {
	case benchModeUnary:
		produce = benchProduceUnary
	}
	for p := range cfg.producers {
		stream := p % cfg.streams
		producers.Go(func() {
			if err := produce(ctx, prodCtx, b.Stream(names[stream]), stream, uint32(p), cfg, pad, st); err != nil {
				st.noteErr(err)
			}
		})
	}
	producers.Wait()
	appendElapsed := time.Since(start)

	// Readers get until the catch-up deadline to reach every acked end.
	deadline := time.After(cfg.catchUp)
	tick := time.NewTicker(5 * time.Millisecond)
wait:
	for _, rd := range rds {
		for rd.next.Load() < st.ends[rd.stream].Load() {
			select {
			case <-tick.C:
			case <-deadline:
				break wait
			case <-ctx.Done():
				break wait
			}
		}
	}
	tick.Stop()
	closing.Store(true)
	for _, rd := range rds {
		rd.rs.Close()
	}
	stopReaders()
	readers.Wait()
	readElapsed := time.Since(start)
	stopProgress()

	res := st.result(cfg, appendElapsed, readElapsed)
	switch {
	case ctx.Err() != nil:
		return res, context.Cause(ctx)
	case res.Append.Errors > 0:
		st.mu.Lock()
		defer st.mu.Unlock()
		return res, fmt.Errorf("%d appends failed; first: %w", res.Append.Errors, st.firstErr)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case res.Read.Missing > 0 && st.firstErr != nil:
		return res, fmt.Errorf("readers missed %d acked records: %w", res.Read.Missing, st.firstErr)
	case res.Read.Missing > 0:
		return res, fmt.Errorf("readers missed %d acked records", res.Read.Missing)
	}
	return res, st.firstErr
}

func createStreams(ctx context.Context, b *sdk.Basin, names []string, class string) error {
	var cfg *api.StreamConfig
	if class != "" {
		sc := api.StorageClass(class)
		cfg = &api.StreamConfig{StorageClass: &sc}
	}
	for _, n := range names {
		_, err := b.CreateStream(ctx, n, cfg)
		var ae *api.Error
		if err != nil && !(errors.As(err, &ae) && ae.Status == http.StatusConflict && ae.Code == api.CodeResourceAlreadyExists) {
			return fmt.Errorf("create stream %s: %w", n, err)
		}
	}
	return nil
}

type sent struct {
	f  *sdk.RecordFuture
	at time.Time
}

// benchProduce appends records until prodCtx ends, then drains its
// producer. ctx bounds the drain.
func benchProduce(ctx, prodCtx context.Context, s *sdk.Stream, stream int, id uint32, cfg benchConfig, pad []byte, st *benchState) error {
	p, err := s.NewProducer(ctx, sdk.ProducerOptions{
		Linger:  cfg.linger,
		Session: sdk.AppendSessionOptions{MaxUnackedBytes: cfg.maxUnacked},
	})
	if err != nil {
		return fmt.Errorf("open producer on %s: %w", s.Name(), err)
	}
	pending := make(chan sent, 8192)
	var collector sync.WaitGroup
	metered := uint64(8 + cfg.recordSize)
	collector.Go(func() { collectAcks(pending, stream, metered, st) })

	var interval time.Duration
	if cfg.rate > 0 {
		interval = time.Duration(float64(time.Second) * float64(cfg.producers) / cfg.rate)
	}
	next := time.Now()
	var submitErr error
	for prodCtx.Err() == nil {
		if interval > 0 {
			next = next.Add(interval)
			if d := time.Until(next); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-t.C:
				case <-prodCtx.Done():
					t.Stop()
				}
				if prodCtx.Err() != nil {
					break
				}
			}
		}
		body := make([]byte, cfg.recordSize)
		copy(body, pad)
		now := time.Now()
		encodeBenchBody(body, now, id)
		f, err := p.Submit(prodCtx, api.Record{Body: body})
		if err != nil {
			if prodCtx.Err() == nil {
				submitErr = err
				st.appendErrors.Add(1)
			}
			break
		}
		pending <- sent{f, now}
	}
	closeErr := p.Close(ctx)
	close(pending)
	collector.Wait()
	if submitErr != nil {
		return fmt.Errorf("producer %d: %w", id, submitErr)
	}
	if closeErr != nil {
		return fmt.Errorf("producer %d: close: %w", id, closeErr)
	}
	return nil
}

// collectAcks waits for each record's ack, in order, and records its
// latency; each record is metered bytes.
func collectAcks(pending <-chan sent, stream int, metered uint64, st *benchState) {
	for s := range pending {
		<-s.f.Done()
		lat := time.Since(s.at)
		ack, err := s.f.Result()
		if err != nil {
			st.appendErrors.Add(1)
			st.noteErr(err)
			continue
		}
		st.ackLat.Record(lat)
		st.appended.Add(1)
		st.appendBytes.Add(metered)
		for {
			cur := st.ends[stream].Load()
			if ack.Batch.End.SeqNum <= cur || st.ends[stream].CompareAndSwap(cur, ack.Batch.End.SeqNum) {
				break
			}
		}
	}
}

// benchReader is one tailing reader.
type benchReader struct {
	rs     *sdk.ReadSession
	stream int
	// next is the seq num after the last record received.
	next atomic.Uint64
}

// run consumes the session until it ends, measuring each bench record's
// end-to-end latency.
func (rd *benchReader) run(st *benchState) error {
	for {
		b, err := rd.rs.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		now := time.Now()
		for _, r := range b.Records {
			if sentAt, _, ok := decodeBenchBody(r.Body); ok {
				st.e2eLat.Record(now.Sub(sentAt))
				st.read.Add(1)
				st.readBytes.Add(r.MeteredSize())
			}
		}
		rd.next.Store(b.Records[len(b.Records)-1].SeqNum + 1)
	}
}

// startProgress prints a progress line every cfg.progress (when positive)
// until the returned stop is called.
func startProgress(ctx context.Context, cfg benchConfig, st *benchState, start time.Time, w io.Writer) func() {
	if cfg.progress <= 0 {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		t := time.NewTicker(cfg.progress)
		defer t.Stop()
		var lastRecs, lastBytes, lastRead uint64
		last := start
		for {
			select {
			case <-done:
				fmt.Fprint(w, "\r\x1b[K")
				return
			case <-ctx.Done():
				return
			case now := <-t.C:
				recs, bytes, read := st.appended.Load(), st.appendBytes.Load(), st.read.Load()
				dt := now.Sub(last).Seconds()
				fmt.Fprintf(w, "\r\x1b[K%5.1fs  append %7.2f MiB/s %8.0f rec/s  ack p50 %v p99 %v  read %8.0f rec/s  e2e p50 %v p99 %v",
					now.Sub(start).Seconds(),
					float64(bytes-lastBytes)/dt/(1<<20), float64(recs-lastRecs)/dt,
					roundDur(st.ackLat.Quantile(0.5)), roundDur(st.ackLat.Quantile(0.99)),
					float64(read-lastRead)/dt,
					roundDur(st.e2eLat.Quantile(0.5)), roundDur(st.e2eLat.Quantile(0.99)))
				lastRecs, lastBytes, lastRead, last = recs, bytes, read, now
			}
		}
	})
	return func() { close(done); wg.Wait() }
}

func roundDur(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	}
	return d.Round(time.Microsecond)
}
