package node_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/testsvc"
)

// A retry that arrives while its original is still in flight (the object
// store holds it) waits for the original's outcome: once the store is
// back, both get the same ack and the batch is in the stream once. If the
// original fails instead (its flight deadline passes with the store
// away), the retry gets the original's indefinite 503, not an ack.
func TestProducerRetryWaitsForItsOriginal(t *testing.T) {
	ctx := context.Background()
	inner, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	objs := faults.Wrap(inner)
	cfg := testConfig()
	cfg.Standard.FlightDeadline = 500 * time.Millisecond
	n := openOn(t, testsvc.SQLite(t), objs, cfg)
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: &api.BasinConfig{CreateStreamOnAppend: true}}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := n.Append(ctx, "basin-one", "s1", producerBatch("p", 0, 0, "warm", 1), nil); err != nil {
		t.Fatal(err)
	}

	held := func(seq uint64, body string) (orig, retry chan result) {
		objs.SetDown("standard", faults.Down{Delay: 20 * time.Millisecond}) // PUTs fail and are retried
		app, err := n.OpenAppend(ctx, "basin-one", "s1", nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(app.Close)
		p, err := app.Submit(ctx, producerBatch("p", 0, seq, body, 2)) // sequenced, held by the store
		if err != nil {
			t.Fatal(err)
		}
		orig, retry = make(chan result, 1), make(chan result, 1)
		go func() { a, err := p.Wait(ctx); orig <- result{a, err} }()
		go func() {
			a, err := n.Append(ctx, "basin-one", "s1", producerBatch("p", 0, seq, body, 2), nil)
			retry <- result{a, err}
		}()
		select {
		case r := <-retry:
			t.Fatalf("the retry of seq %d returned while its original was held: %+v %v", seq, r.ack, r.err)
		case <-time.After(200 * time.Millisecond):
		}
		return orig, retry
	}

	orig, retry := held(1, "held")
	objs.SetUp("standard")
	o, r := <-orig, <-retry
	if o.err != nil || r.err != nil {
		t.Fatalf("after the store came back: original %v, retry %v", o.err, r.err)
	}
	if o.ack.Start != r.ack.Start || o.ack.End != r.ack.End || o.ack.Start.SeqNum != 1 {
		t.Fatalf("the retry acked [%+v, %+v), the original [%+v, %+v)", r.ack.Start, r.ack.End, o.ack.Start, o.ack.End)
	}
	if got := countBodies(t, n, "basin-one", "s1"); got["held-0"] != 1 || got["held-1"] != 1 {
		t.Fatalf("read back %v", got)
	}

	orig, retry = held(2, "lost") // the store stays away past the flight deadline
	o, r = <-orig, <-retry
	objs.SetUp("standard")
	var ae *api.Error
	if o.err == nil || !errors.As(r.err, &ae) || ae.Status != 503 || ae.Definite() || !strings.Contains(ae.Message, "original") {
		t.Fatalf("original failed with %v; its retry got %+v %v, want an indefinite 503 naming the original", o.err, r.ack, r.err)
	}
}

type result struct {
	ack api.AppendAck
	err error
}
