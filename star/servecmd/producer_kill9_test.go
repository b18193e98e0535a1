package servecmd_test

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
)

// An idempotent producer across a kill -9 with a real process: one writer
// appends marked batches and retries each until it is acknowledged (on
// any failure, the same seq with the same records); the star is killed
// -9 mid-flight and restarted on the same data. The batch in flight at
// the kill, whatever became of it, is applied once: every batch reads
// back exactly once, at its ack.
func TestProducerKill9Restart(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	data := t.TempDir()
	var cur atomic.Pointer[proc]
	cur.Store(startDev(t, data))
	w := startProducerWriter(t, &cur)
	poll.Until(t, 60*time.Second, "30 acknowledged batches", func() bool { return w.count() >= 30 })
	cur.Load().kill9(t)
	before := w.count()
	cur.Store(startDev(t, data))
	poll.Until(t, 60*time.Second, "20 batches after the restart", func() bool { return w.count() >= before+20 })
	w.stopAndCheck(t, cur.Load(), before)
}

// The same across a failover to another star: the writer appends through
// b while a leads the stream (b forwards); a is killed -9 mid-flight and
// b takes the stream over once a is presumed dead, rebuilding the
// producer from the records a left.
func TestProducerFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	dir := t.TempDir()
	env := func(id string) []string {
		return []string{
			"STARLOG_STAR_ID=" + id,
			"STARLOG_SQLITE=" + filepath.Join(dir, "meta.db"),
			"STARLOG_FS_ROOT=" + filepath.Join(dir, "objects"),
			"STARLOG_LISTEN=127.0.0.1:0",
			"STARLOG_REGISTRY_HEARTBEAT=200ms",
			"STARLOG_DEAD_AFTER=2s",
			"STARLOG_S3_FLUSH_INTERVAL=2ms",
			"STARLOG_SHUTDOWN_TIMEOUT=5s",
		}
	}
	a := startServe(t, env("a"))
	b := startServe(t, env("b"))
	if status, out, err := call(a, "POST", "/v1/basins", `{"basin":"starlog-dev","config":{"create_stream_on_append":true}}`); err != nil || status != 201 {
		t.Fatalf("create basin: %d %s %v", status, out, err)
	}
	if status, out, err := call(a, "POST", "/v1/streams/prod/records", `{"records":[{"body":"a leads"}]}`); err != nil || status != 200 {
		t.Fatalf("first append through a: %d %s %v", status, out, err)
	}
	var cur atomic.Pointer[proc]
	cur.Store(b)
	w := startProducerWriter(t, &cur)
	poll.Until(t, 60*time.Second, "30 acknowledged batches", func() bool { return w.count() >= 30 })
	a.kill9(t)
	before := w.count()
	poll.Until(t, 60*time.Second, "20 batches after the failover", func() bool { return w.count() >= before+20 })
	w.stopAndCheck(t, b, before)
}

// producerWriter appends marked batches of 1–3 records through the star
// cur names, retrying each (the same seq and records) until acknowledged.
type producerWriter struct {
	mu    sync.Mutex
	acks  [][2]uint64 // [start, end) by producer seq
	sizes []int
	stop  chan struct{}
	wg    sync.WaitGroup
}

func startProducerWriter(t *testing.T, cur *atomic.Pointer[proc]) *producerWriter {
	w := &producerWriter{stop: make(chan struct{})}
	w.wg.Go(func() {
		for seq := 0; ; seq++ {
			select {
			case <-w.stop:
				return
			default:
			}
			n := 1 + seq%3
			recs := make([]map[string]any, n)
			for i := range n {
				recs[i] = map[string]any{"body": fmt.Sprintf("b%d-%d", seq, i)}
			}
			recs[0]["headers"] = [][2]string{{api.HeaderProducer, "kill9-writer"}, {api.HeaderProducerEpoch, "1"}, {api.HeaderProducerSeq, fmt.Sprint(seq)}}
			body, _ := json.Marshal(map[string]any{"records": recs})
			for attempt := 0; ; attempt++ {
				// The star is down or busy: the same batch again, after a
				// pause.
				if attempt > 0 && !backoff(w.stop, 5*time.Millisecond) {
					return
				}
				status, out, err := call(cur.Load(), "POST", "/v1/streams/prod/records", string(body))
				if err == nil && status == 200 {
					a, derr := api.DecodeAppendAckJSON(out)
					if derr != nil {
						t.Errorf("ack of seq %d: %v", seq, derr)
						return
					}
					w.mu.Lock()
					w.acks, w.sizes = append(w.acks, [2]uint64{a.Start.SeqNum, a.End.SeqNum}), append(w.sizes, n)
					w.mu.Unlock()
					break
				}
				if err == nil && status != 503 && status != 408 && status != 429 {
					t.Errorf("seq %d: %d %s", seq, status, out)
					return
				}
			}
		}
	})
	return w
}

func (w *producerWriter) count() int { w.mu.Lock(); defer w.mu.Unlock(); return len(w.acks) }

// stopAndCheck stops the writer and reads the stream back through p:
// every acknowledged batch exactly once at its ack, nothing twice, and
// nothing unacknowledged but perhaps the batch the writer was retrying.
func (w *producerWriter) stopAndCheck(t *testing.T, p *proc, before int) {
	t.Helper()
	close(w.stop)
	w.wg.Wait()
	got, tail := readAll(t, p, "prod")
	w.mu.Lock()
	defer w.mu.Unlock()
	first := uint64(0)
	if len(w.acks) > 0 {
		first = w.acks[0][0] // records before the writer's (the failover's first append)
	}
	total := first
	for seq, a := range w.acks {
		if a[1]-a[0] != uint64(w.sizes[seq]) {
			t.Fatalf("seq %d acked [%d, %d), %d records sent", seq, a[0], a[1], w.sizes[seq])
		}
		for i := range w.sizes[seq] {
			if want := fmt.Sprintf("b%d-%d", seq, i); got[a[0]+uint64(i)] != want {
				t.Fatalf("seq %d: record %d is %q at %d, want %q", seq, i, got[a[0]+uint64(i)], a[0]+uint64(i), want)
			}
		}
		total += a[1] - a[0]
	}
	seen := map[string]bool{}
	for seq := range tail {
		if seen[got[seq]] {
			t.Fatalf("%q read back twice", got[seq])
		}
		seen[got[seq]] = true
	}
	if tail < total || tail > total+3 {
		t.Fatalf("tail %d, %d records acknowledged or before the writer (%d batches, %d before the kill)", tail, total, len(w.acks), before)
	}
	t.Logf("%d batches acknowledged (%d before the kill -9), tail %d", len(w.acks), before, tail)
}
