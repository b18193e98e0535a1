package clientcmd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/spf13/pflag"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// Bench modes (--mode): how producers append.
const (
	// benchModeSession appends through an append session with automatic
	// batching (the Producer): the default.
	benchModeSession = "session"
	// benchModeUnary sends unary appends of --batch records, --in-flight of
	// them outstanding per producer: the request/response path one-in-flight
	// clients and batch writers use.
	benchModeUnary = "unary"
)

// unaryConfig is the unary mode's part of benchConfig.
type unaryConfig struct {
	batch    int    // records per append
	inFlight int    // appends outstanding per producer
	encoding string // json or proto
}

func (u *unaryConfig) register(f *pflag.FlagSet) {
	f.IntVar(&u.batch, "batch", 1, "unary mode: records per append (1 to 1000)")
	f.IntVar(&u.inFlight, "in-flight", 1, "unary mode: appends each producer keeps outstanding (each on its own connection)")
	f.StringVar(&u.encoding, "encoding", "json", "unary mode: body encoding, json (base64 records) or proto")
}

func (u *unaryConfig) validate(recordSize int) error {
	switch {
	case u.batch < 1 || u.batch > api.MaxBatchRecords:
		return fmt.Errorf("--batch must be 1 to %d", api.MaxBatchRecords)
	case int64(u.batch)*int64(8+recordSize) > api.MaxBatchMeteredBytes:
		return fmt.Errorf("--batch %d of --record-size %d exceeds a batch's %d metered bytes", u.batch, recordSize, api.MaxBatchMeteredBytes)
	case u.inFlight < 1:
		return errors.New("--in-flight must be at least 1")
	case u.encoding != "json" && u.encoding != "proto":
		return fmt.Errorf("--encoding must be json or proto, got %q", u.encoding)
	}
	return nil
}

func (u *unaryConfig) sdkEncoding() sdk.Encoding {
	if u.encoding == "proto" {
		return sdk.EncodingProto
	}
	return sdk.EncodingJSON
}

// benchProduceUnary runs cfg.unary.inFlight appenders on s until prodCtx
// ends; each sends a batch of cfg.unary.batch records and waits for its ack
// before the next. Every record of a batch gets the batch's ack latency.
// ctx bounds the appends already sent when prodCtx ends.
func benchProduceUnary(ctx, prodCtx context.Context, s *sdk.Stream, stream int, id uint32, cfg benchConfig, pad []byte, st *benchState) error {
	var interval time.Duration
	if cfg.rate > 0 {
		// The rate is in records; each appender sends whole batches.
		interval = time.Duration(float64(time.Second) * float64(cfg.producers*cfg.unary.inFlight*cfg.unary.batch) / cfg.rate)
	}
	metered := uint64(8 + cfg.recordSize)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for range cfg.unary.inFlight {
		wg.Go(func() {
			next := time.Now()
			for prodCtx.Err() == nil {
				if interval > 0 {
					next = next.Add(interval)
					if !sleepUntil(prodCtx, next) {
						return
					}
				}
				now := time.Now()
				in := &api.AppendInput{Records: make([]api.Record, cfg.unary.batch)}
				for i := range in.Records {
					body := make([]byte, cfg.recordSize)
					copy(body, pad)
					encodeBenchBody(body, now, id)
					in.Records[i] = api.Record{Body: body}
				}
				ack, err := s.Append(ctx, in)
				if err != nil {
					if ctx.Err() == nil {
						st.appendErrors.Add(uint64(cfg.unary.batch))
						st.noteErr(err)
						mu.Lock()
						if firstErr == nil {
							firstErr = err
						}
						mu.Unlock()
					}
					return
				}
				lat := time.Since(now)
				for range cfg.unary.batch {
					st.ackLat.Record(lat)
				}
				st.appended.Add(uint64(cfg.unary.batch))
				st.appendBytes.Add(metered * uint64(cfg.unary.batch))
				for {
					cur := st.ends[stream].Load()
					if ack.End.SeqNum <= cur || st.ends[stream].CompareAndSwap(cur, ack.End.SeqNum) {
						break
					}
				}
			}
		})
	}
	wg.Wait()
	if firstErr != nil {
		return fmt.Errorf("producer %d: %w", id, firstErr)
	}
	return nil
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-ctx.Done():
		return false
	}
}
