package servecmd_test

import (
	"encoding/json"
	"fmt"
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

	type ack struct{ start, end uint64 }
	var mu sync.Mutex
	var acks []ack // by producer seq
	var sizes []int
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for seq := 0; ; seq++ {
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
				if attempt > 0 && !backoff(stop, 5*time.Millisecond) {
					return
				}
				status, out, err := call(cur.Load(), "POST", "/v1/streams/prod/records", string(body))
				if err == nil && status == 200 {
					a, derr := api.DecodeAppendAckJSON(out)
					if derr != nil {
						t.Errorf("ack of seq %d: %v", seq, derr)
						return
					}
					mu.Lock()
					acks, sizes = append(acks, ack{a.Start.SeqNum, a.End.SeqNum}), append(sizes, n)
					mu.Unlock()
					break
				}
				if err == nil && status != 503 && status != 408 && status != 429 {
					t.Errorf("seq %d: %d %s", seq, status, out)
					return
				}
			}
		}
	})
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acks) }
	poll.Until(t, 60*time.Second, "30 acknowledged batches", func() bool { return count() >= 30 })
	cur.Load().kill9(t)
	before := count()
	cur.Store(startDev(t, data))
	poll.Until(t, 60*time.Second, "20 batches after the restart", func() bool { return count() >= before+20 })
	close(stop)
	wg.Wait()

	got, tail := readAll(t, cur.Load(), "prod")
	mu.Lock()
	defer mu.Unlock()
	total := uint64(0)
	for seq, a := range acks {
		if a.end-a.start != uint64(sizes[seq]) {
			t.Fatalf("seq %d acked [%d, %d), %d records sent", seq, a.start, a.end, sizes[seq])
		}
		for i := range sizes[seq] {
			if want := fmt.Sprintf("b%d-%d", seq, i); got[a.start+uint64(i)] != want {
				t.Fatalf("seq %d: record %d is %q at %d, want %q", seq, i, got[a.start+uint64(i)], a.start+uint64(i), want)
			}
		}
		total += a.end - a.start
	}
	// Only acknowledged batches are in the stream, each once (the writer
	// stopped between batches or while retrying one: that one may be in
	// the stream without an ack, but only once, at the end).
	seen := map[string]bool{}
	for seq := range tail {
		if seen[got[seq]] {
			t.Fatalf("%q read back twice", got[seq])
		}
		seen[got[seq]] = true
	}
	if tail < total || tail > total+3 {
		t.Fatalf("tail %d, %d acknowledged records (%d batches, %d before the kill)", tail, total, len(acks), before)
	}
	t.Logf("%d batches acknowledged (%d before the kill -9), %d records, tail %d", len(acks), before, total, tail)
}
