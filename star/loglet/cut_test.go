package loglet_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/streams"
)

// The flush interval bounds the PUT rate, not a delay: with an interval of
// an hour a lone append still acks at once (the fixed-delay policy held it
// for the hour), a second one within the hour waits for company instead of
// taking its own PUT, and it goes out once a flight's worth of bytes
// arrives behind it.
func TestFlushIntervalIsARateNotADelay(t *testing.T) {
	h := newHarness(t, func(c *loglet.Config) {
		c.FlushInterval = time.Hour
		c.TargetFlight = 16 << 10
	})
	s := h.stream("a")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // liveness, not speed
	defer cancel()
	before := h.store.Counters().Op(objstore.OpPut).Requests
	if _, err := s.Append(ctx, batch("a", 0, 1)); err != nil {
		t.Fatalf("lone append with an hour's flush interval: %v", err)
	}
	// Its flight goes to every bucket and acked at W of them: the last PUT
	// may land after the ack, and must not count for the next append.
	poll.Until(t, 60*time.Second, "the lone append's flight reaching every bucket", func() bool {
		return h.store.Counters().Op(objstore.OpPut).Requests >= before+int64(len(h.cfg.Buckets))
	})
	puts := h.store.Counters().Op(objstore.OpPut).Requests

	second, err := s.Submit(ctx, batch("a", 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	// Not due for an hour: however long we look, it must not ack.
	wctx, wcancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = second.Wait(wctx)
	wcancel()
	if !errors.Is(err, streams.ErrAckUnknown) {
		t.Fatalf("second append within the interval: %v, want it still waiting", err)
	}
	if got := h.store.Counters().Op(objstore.OpPut).Requests; got != puts {
		t.Fatalf("%d PUTs for a second append within the interval", got-puts)
	}

	// Fill a flight: the target cuts at once, whatever the clock.
	big := batch("a", 2, 1)
	big.Records[0].Body = make([]byte, 16<<10)
	third, err := s.Submit(ctx, big)
	if err != nil {
		t.Fatal(err)
	}
	for i, tk := range []*streams.Ticket{second, third} {
		if _, err := tk.Wait(ctx); err != nil {
			t.Fatalf("batch %d after the flight filled: %v", i+1, err)
		}
	}
}

// CutWhenIdle (the directory store's default): with an interval of an
// hour, appends made one after another's ack each ack at once, because
// each finds nothing uploading; without the rule the second would wait for
// the hour (TestFlushIntervalIsARateNotADelay).
func TestCutWhenIdleDoesNotWaitOutTheInterval(t *testing.T) {
	h := newHarness(t, func(c *loglet.Config) {
		c.FlushInterval = time.Hour
		c.CutWhenIdle = true
	})
	s := h.stream("a")
	for i := range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second) // liveness, not speed
		_, err := s.Append(ctx, batch("a", i, 1))
		cancel()
		if err != nil {
			t.Fatalf("append %d after the previous one's ack: %v", i, err)
		}
	}
}
