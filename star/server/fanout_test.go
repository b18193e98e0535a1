package server_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

var fanoutReaders = flag.Int("fanout.readers", 100, "live readers of TestTailFanOut (half S2S sessions, half SSE); make bench-read runs 1000")

// TestTailFanOut (issue 19, item 4): one stream with many live readers,
// half S2S read sessions and half SSE, all opened at the tail before the
// first append. An append session then sends batches stamped with their
// send time; every reader must get every record, in order, and the
// end-to-end latency (send to delivery) is reported with the memory the
// process holds per open reader. make test runs 100 readers; make
// bench-read runs 1000.
func TestTailFanOut(t *testing.T) {
	// Not parallel: it measures the process heap, which tests running
	// beside it would grow.
	readers := *fanoutReaders
	const (
		batches = 100
		per     = 10
		total   = batches * per
	)
	e := newEnv(t, func(c *node.Config, o *server.Options) {
		o.MaxConns = 4 * readers
		// Idle pings would only add noise between batches.
		o.HeartbeatMin, o.HeartbeatMax = 5*time.Second, 10*time.Second
	})
	e.setupBasin("fan-basin")
	want(t, e.stream("fan-basin", "POST", "streams", []byte(`{"stream":"s"}`)), 201, "")

	var p1, p2 http.Protocols
	p1.SetHTTP1(true)
	p2.SetUnencryptedHTTP2(true)
	h1 := &http.Transport{Protocols: &p1, DisableCompression: true, MaxIdleConnsPerHost: readers}
	h2 := &http.Transport{Protocols: &p2, DisableCompression: true}
	defer h1.CloseIdleConnections()
	defer h2.CloseIdleConnections()

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	g0 := runtime.NumGoroutine()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	lat := make([][]time.Duration, readers)
	errs := make(chan error, readers)
	var ready, done sync.WaitGroup
	ready.Add(readers)
	done.Add(readers)
	for i := range readers {
		sse := i%2 == 1
		go func() {
			defer done.Done()
			readied := false
			markReady := func() {
				if !readied {
					readied = true
					ready.Done()
				}
			}
			defer markReady()
			next := uint64(0)
			deliver := func(recs []api.Record) error {
				now := time.Now()
				for _, r := range recs {
					sent, seq, ok := parseStamp(r.Body)
					if r.SeqNum != next || !ok || seq != r.SeqNum {
						return fmt.Errorf("reader %d: got seq %d (body %q), want %d", i, r.SeqNum, r.Body, next)
					}
					lat[i] = append(lat[i], now.Sub(time.Unix(0, sent)))
					next++
				}
				return nil
			}
			req, _ := http.NewRequestWithContext(ctx, "GET", e.base+"/v1/streams/s/records?seq_num=0", nil)
			req.Header.Set("s2-basin", "fan-basin")
			client := &http.Client{Transport: h2}
			if sse {
				req.Header.Set("Accept", "text/event-stream")
				client.Transport = h1
			} else {
				req.Header.Set("Content-Type", "s2s/proto")
			}
			res, err := client.Do(req)
			if err != nil {
				errs <- fmt.Errorf("reader %d: %w", i, err)
				return
			}
			defer res.Body.Close()
			if res.StatusCode != 200 {
				errs <- fmt.Errorf("reader %d: %s", i, res.Status)
				return
			}
			if sse {
				sr := api.NewSSEReader(res.Body, 0)
				for next < total {
					ev, err := sr.Next()
					if err != nil {
						errs <- fmt.Errorf("reader %d (sse) after %d records: %w", i, next, err)
						return
					}
					re, derr := api.DecodeReadEvent(ev, api.FormatRaw)
					if derr != nil {
						errs <- fmt.Errorf("reader %d: %v", i, derr)
						return
					}
					switch re.Kind {
					case api.ReadEventPing:
						markReady()
					case api.ReadEventBatch:
						if err := deliver(re.Batch.Records); err != nil {
							errs <- err
							return
						}
					default:
						errs <- fmt.Errorf("reader %d: event %+v", i, re)
						return
					}
				}
				return
			}
			fr := api.NewFrameReader(res.Body)
			for next < total {
				f, err := fr.Next()
				if err != nil {
					errs <- fmt.Errorf("reader %d (s2s) after %d records: %w", i, next, err)
					return
				}
				if f.Terminal {
					errs <- fmt.Errorf("reader %d: terminal %v", i, f.Err())
					return
				}
				b, perr := api.DecodeReadBatchProto(f.Payload)
				if perr != nil {
					errs <- fmt.Errorf("reader %d: %v", i, perr)
					return
				}
				if len(b.Records) == 0 {
					markReady() // the heartbeat on entering live follow
					continue
				}
				if err := deliver(b.Records); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	waitGroup(t, &ready, ctx, "every reader to enter live follow")
	var open runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&open)
	goroutines := runtime.NumGoroutine() - g0

	// Text stamps (send time, seq): SSE readers get raw JSON, which
	// carries only valid UTF-8 losslessly.
	s := e.openAppendSession("fan-basin", "s", api.CompressionNone)
	for b := range batches {
		in := &api.AppendInput{}
		now := time.Now().UnixNano()
		for j := range per {
			body := fmt.Appendf(nil, "%d/%d/", now, b*per+j)
			for len(body) < 64 {
				body = append(body, 'x')
			}
			in.Records = append(in.Records, api.Record{Body: body})
		}
		s.send(t, in)
		if _, aerr := s.ack(t); aerr != nil {
			t.Fatalf("append %d: %v", b, aerr)
		}
	}
	waitGroup(t, &done, ctx, "every reader to get every record")
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	var all []time.Duration
	for i := range lat {
		if len(lat[i]) != total {
			t.Fatalf("reader %d got %d records, want %d", i, len(lat[i]), total)
		}
		all = append(all, lat[i]...)
	}
	p50, p99, pmax := quantile(all, 0.5), quantile(all, 0.99), quantile(all, 1)
	perReader := (int64(open.HeapInuse) - int64(before.HeapInuse)) / int64(readers)
	t.Logf("fan-out: %d readers (%d S2S, %d SSE), %d records each: end-to-end p50 %v, p99 %v, max %v; heap %d KiB per open reader (star and client in one process), %d goroutines per reader",
		readers, readers-readers/2, readers/2, total, p50, p99, pmax, perReader>>10, goroutines/readers)
	// Generous: the machine is shared; what is bounded is a tail that
	// does not grow with the readers (1000 readers in make bench-read).
	if p99 > 10*time.Second {
		t.Errorf("end-to-end p99 %v with %d readers", p99, readers)
	}
	if perReader > 1<<20 {
		t.Errorf("%d KiB of heap per open reader", perReader>>10)
	}
}

// parseStamp reads a fan-out record's "<sent ns>/<seq>/" prefix.
func parseStamp(b []byte) (sent int64, seq uint64, ok bool) {
	parts := strings.SplitN(string(b), "/", 3)
	if len(parts) != 3 {
		return 0, 0, false
	}
	sent, err1 := strconv.ParseInt(parts[0], 10, 64)
	seq, err2 := strconv.ParseUint(parts[1], 10, 64)
	return sent, seq, err1 == nil && err2 == nil
}

// waitGroup waits for wg or fails the test when ctx ends first.
func waitGroup(t *testing.T, wg *sync.WaitGroup, ctx context.Context, what string) {
	t.Helper()
	c := make(chan struct{})
	go func() { wg.Wait(); close(c) }()
	select {
	case <-c:
	case <-ctx.Done():
		t.Fatalf("timed out waiting for %s", what)
	}
}
