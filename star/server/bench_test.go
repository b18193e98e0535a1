package server_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/objstore/fs"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/ratelimit"
	"github.com/starlog/starlog/star/server"
)

// benchEnv is a star like `star dev`: SQLite and a directory object store
// in a temp dir (with fsync), default flush intervals.
func benchEnv(b *testing.B) *env {
	b.Helper()
	objs, err := fs.New(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	for _, bk := range []string{"standard", "express-a", "express-b", "express-c"} {
		if err := objs.CreateBucket(bk); err != nil {
			b.Fatal(err)
		}
	}
	return newEnvOn(b, objs, func(c *node.Config, _ *server.Options) {
		d := node.Defaults()
		c.Standard.FlushInterval = d.Standard.FlushInterval
		c.Express.FlushInterval = d.Express.FlushInterval
		// The engine's ceiling, not S2's per-stream limits.
		c.Limits = ratelimit.Limits{StreamBytesPerSec: -1, StreamBatchesPerSec: -1}
	})
}

func kibRecords(n int) *api.AppendInput {
	in := &api.AppendInput{}
	body := make([]byte, 1024-8) // 1 KiB metered
	for range n {
		in.Records = append(in.Records, api.Record{Body: body})
	}
	return in
}

func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	return d[min(len(d)-1, int(q*float64(len(d))))]
}

// One stream, 1 KiB records, one S2S append session over h2c, pipelined.
func BenchmarkS2SAppendSession(b *testing.B) {
	for _, class := range []string{"standard", "express"} {
		for _, per := range []int{64, 512} {
			b.Run(fmt.Sprintf("%s/batch=%d", class, per), func(b *testing.B) {
				e := benchEnv(b)
				e.setupBasin("bench-basin")
				want(b, e.stream("bench-basin", "POST", "streams", []byte(`{"stream":"s","config":{"storage_class":"`+class+`"}}`)), 201, "")
				s := e.openAppendSession("bench-basin", "s", api.CompressionNone)
				payload, _ := api.EncodeAppendProto(kibRecords(per))
				sent := make(chan time.Time, 4096)
				var lat []time.Duration
				var wg sync.WaitGroup
				wg.Go(func() {
					for range b.N {
						t0 := <-sent
						if _, terr := s.ack(b); terr != nil {
							b.Errorf("ack: %v", terr)
							return
						}
						lat = append(lat, time.Since(t0))
					}
				})
				b.SetBytes(int64(per) << 10)
				b.ResetTimer()
				for range b.N {
					sent <- time.Now()
					if err := s.fw.WriteMessage(payload); err != nil {
						b.Fatal(err)
					}
				}
				wg.Wait()
				b.StopTimer()
				s.pw.Close()
				b.ReportMetric(float64(quantile(lat, 0.5).Microseconds())/1000, "ack-p50-ms")
				b.ReportMetric(float64(quantile(lat, 0.99).Microseconds())/1000, "ack-p99-ms")
			})
		}
	}
}

// Unary JSON appends of 1 KiB records, from 16 concurrent clients.
func BenchmarkUnaryJSONAppend(b *testing.B) {
	for _, per := range []int{1, 64} {
		b.Run(fmt.Sprintf("batch=%d", per), func(b *testing.B) {
			e := benchEnv(b)
			e.setupBasin("bench-basin")
			body, _ := api.EncodeAppendJSON(&api.AppendInput{Records: kibTextRecords(per)}, api.FormatRaw)
			var mu sync.Mutex
			var lat []time.Duration
			b.SetBytes(int64(per) << 10)
			b.SetParallelism(8) // 8 × GOMAXPROCS clients
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var mine []time.Duration
				for pb.Next() {
					t0 := time.Now()
					r := e.appendJSON("bench-basin", "s", string(body))
					if r.status != 200 {
						b.Errorf("append: %s", r)
						return
					}
					mine = append(mine, time.Since(t0))
				}
				mu.Lock()
				lat = append(lat, mine...)
				mu.Unlock()
			})
			b.StopTimer()
			b.ReportMetric(float64(quantile(lat, 0.5).Microseconds())/1000, "ack-p50-ms")
			b.ReportMetric(float64(quantile(lat, 0.99).Microseconds())/1000, "ack-p99-ms")
		})
	}
}

func kibTextRecords(n int) []api.Record {
	body := make([]byte, 1024-8)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	recs := make([]api.Record, n)
	for i := range recs {
		recs[i] = api.Record{Body: body}
	}
	return recs
}

// End-to-end latency at a steady 10 MiB/s on one stream: an S2S append
// session sends 10 × 1 KiB records every millisecond and an S2S read
// session tails the stream; latency is from sending a batch to reading its
// last record. b.N is the number of batches.
func BenchmarkEndToEndLatency(b *testing.B) {
	for _, class := range []string{"standard", "express"} {
		b.Run(class, func(b *testing.B) {
			e := benchEnv(b)
			e.setupBasin("bench-basin")
			want(b, e.stream("bench-basin", "POST", "streams", []byte(`{"stream":"s","config":{"storage_class":"`+class+`"}}`)), 201, "")
			rs := e.openReadSession("bench-basin", "s", "", "")
			defer rs.close()
			as := e.openAppendSession("bench-basin", "s", api.CompressionNone)
			const per = 10
			payload, _ := api.EncodeAppendProto(kibRecords(per))
			sentAt := make([]time.Time, b.N)
			var lat, ackLat []time.Duration
			done, acksDone := make(chan struct{}), make(chan struct{})
			go func() { // drain acks
				defer close(acksDone)
				for i := range b.N {
					if _, terr := as.ack(b); terr != nil {
						b.Errorf("ack: %v", terr)
						return
					}
					ackLat = append(ackLat, time.Since(sentAt[i]))
				}
			}()
			go func() {
				defer close(done)
				for got := 0; got < b.N*per; {
					f, err := rs.fr.Next()
					if err != nil {
						b.Errorf("read: %v", err)
						return
					}
					if f.Terminal {
						b.Errorf("read session ended: %v", f.Err())
						return
					}
					rb, derr := api.DecodeReadBatchProto(f.Payload)
					if derr != nil {
						b.Errorf("read batch: %v", derr)
						return
					}
					for range rb.Records {
						got++
						if got%per == 0 {
							lat = append(lat, time.Since(sentAt[got/per-1]))
						}
					}
				}
			}()
			b.SetBytes(per << 10)
			b.ResetTimer()
			tick := time.NewTicker(time.Millisecond)
			defer tick.Stop()
			for i := range b.N {
				<-tick.C
				sentAt[i] = time.Now()
				if err := as.fw.WriteMessage(payload); err != nil {
					b.Fatal(err)
				}
			}
			<-done
			<-acksDone
			b.StopTimer()
			b.ReportMetric(float64(quantile(ackLat, 0.5).Microseconds())/1000, "ack-p50-ms")
			b.ReportMetric(float64(quantile(ackLat, 0.99).Microseconds())/1000, "ack-p99-ms")
			b.ReportMetric(float64(quantile(lat, 0.5).Microseconds())/1000, "e2e-p50-ms")
			b.ReportMetric(float64(quantile(lat, 0.99).Microseconds())/1000, "e2e-p99-ms")
		})
	}
}
