package loglet_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/reader"
	"github.com/starlog/starlog/star/streams"
)

// tailReader is a cold reader over the harness's stores.
func (h *harness) tailReader() (*reader.Reader, *prometheus.Registry) {
	h.t.Helper()
	reg := prometheus.NewRegistry()
	r, err := reader.New(reader.Config{Meta: h.meta, Objects: h.store, SettledBucket: zones[0], Registerer: reg, Logger: quietLog()})
	if err != nil {
		h.t.Fatal(err)
	}
	return r, reg
}

// readTail reads stream id from seq 0 with the loglet's flight index as
// the tail window, as the star serves a led stream.
func (h *harness) readTail(r *reader.Reader, s *streams.Stream, id string) reader.Result {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := r.Read(ctx, reader.Stream{ID: id, Basin: "b"}, reader.AtSeq(0), reader.Limits{},
		&reader.Tail{Window: h.loglet.Index(), End: s.Tail().SeqNum})
	if err != nil {
		h.t.Fatalf("read %s: %v", id, err)
	}
	return res
}

// wantBatches checks recs are exactly batches 0..n-1 of per records of
// stream id (batch's bodies), in seq order.
func wantBatches(t *testing.T, recs []format.Record, id string, n, per int) {
	t.Helper()
	if len(recs) != n*per {
		t.Fatalf("%d records, want %d", len(recs), n*per)
	}
	for i, r := range recs {
		want := fmt.Sprintf("%s/%d/%d", id, i/per, i%per)
		if r.SeqNum != uint64(i) || string(r.Body) != want {
			t.Fatalf("record %d: seq %d body %q, want seq %d body %q", i, r.SeqNum, r.Body, i, want)
		}
	}
}

func metricValue(reg *prometheus.Registry, name string) float64 {
	return gaugeOrCounter(reg, name)
}

// appendUnabsorbed opens stream id, stops the absorb (the metastore is
// unavailable: every released flight stays in the index) and acks n
// batches of per records.
func (h *harness) appendUnabsorbed(id string, n, per int) *streams.Stream {
	h.t.Helper()
	s := h.stream(id)
	h.meta.SetUnavailable(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range n {
		if _, err := s.Append(ctx, batch(id, i, per)); err != nil {
			h.t.Fatalf("append %d: %v", i, err)
		}
	}
	return s
}

// A flight index that keeps no bundle (the cache bound below one flight)
// still serves every released record: a read of the tail window gets them
// from the slot objects, exactly and in order, without the metastore; and
// when one zone lacks a slot's copy and another's copy is damaged, the
// read passes both over for the third.
func TestEvictedFlightsAreReadFromTheStore(t *testing.T) {
	const batches, per = 20, 3
	h := newHarness(t, func(c *loglet.Config) { c.IndexCacheBytes = -1 })
	s := h.appendUnabsorbed("a", batches, per)
	flights := h.loglet.Index().Len()
	if held, bytes := h.loglet.Index().Cached(); flights == 0 || held != 0 || bytes != 0 {
		t.Fatalf("index: %d flights, %d held (%d bytes); want all evicted", flights, held, bytes)
	}
	r, reg := h.tailReader()
	res := h.readTail(r, s, "a")
	wantBatches(t, res.Records, "a", batches, per)
	if res.Stop != reader.StopCaughtUp {
		t.Fatalf("stop %v, want caught-up", res.Stop)
	}
	if got := metricValue(reg, "starlog_reader_tail_store_extents_total"); got < float64(flights) {
		t.Fatalf("%v tail extents read from the store, want at least the %d evicted flights", got, flights)
	}

	// Zone az1 lost every copy, az2's copies are damaged (one flipped
	// byte in each): only az3 serves, and a cold reader still reads all.
	// A flight is acknowledged at W = 2 copies and its third lands in the
	// background: wait for every copy before damaging them (under load
	// the last flight's third copy came after the loop below reached it).
	ctx := context.Background()
	poll.UntilErr(t, 10*time.Second, "every flight's three copies", func() error {
		for slot := range uint64(flights) {
			key := chain.SlotKey(h.cfg.Star, h.cfg.Class, h.loglet.Epoch(), slot)
			for _, z := range []string{"az1", "az2", "az3"} {
				if _, err := h.inner.Bucket(z).Head(ctx, key); err != nil {
					return fmt.Errorf("%s slot %d: %w", z, slot, err)
				}
			}
		}
		return nil
	})
	for slot := range uint64(flights) {
		key := chain.SlotKey(h.cfg.Star, h.cfg.Class, h.loglet.Epoch(), slot)
		if err := h.inner.Bucket("az1").Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		b, err := h.inner.Bucket("az2").Get(ctx, key, 0, -1)
		if err != nil {
			t.Fatalf("az2 copy of slot %d: %v", slot, err)
		}
		b = append([]byte(nil), b...)
		b[format.EnvelopeSize+len(b[format.EnvelopeSize:])/3] ^= 0x5a // inside the blocks
		if err := h.inner.Bucket("az2").Delete(ctx, key); err != nil {
			t.Fatal(err)
		}
		if _, err := h.inner.Bucket("az2").PutIfAbsent(ctx, key, b); err != nil {
			t.Fatal(err)
		}
	}
	r2, reg2 := h.tailReader()
	res = h.readTail(r2, s, "a")
	wantBatches(t, res.Records, "a", batches, per)
	if got := metricValue(reg2, "starlog_reader_bucket_fallthroughs_total"); got < float64(flights) {
		t.Fatalf("%v bucket fallthroughs; every slot needed az3", got)
	}
}

// A flight that is not released (it has one copy of the W = 2 it needs,
// so nothing of it is acknowledged) is never served, even with the index
// keeping no bundle: the index names released flights only, so a read of
// the tail window stops at the acknowledged records although the flight's
// copy stands in the store.
func TestUnreleasedFlightIsNeverServed(t *testing.T) {
	const batches, per = 5, 2
	h := newHarness(t, func(c *loglet.Config) {
		c.IndexCacheBytes = -1
		c.FlightDeadline = time.Minute // no halt while the test looks
	})
	s := h.appendUnabsorbed("a", batches, per)
	flights := h.loglet.Index().Len()
	h.store.SetDown("az2", faults.Down{Hang: true})
	h.store.SetDown("az3", faults.Down{Hang: true})
	tk, err := s.Submit(context.Background(), batch("a", batches, per))
	if err != nil {
		t.Fatal(err)
	}
	key := chain.SlotKey(h.cfg.Star, h.cfg.Class, h.loglet.Epoch(), uint64(flights))
	poll.Until(t, 10*time.Second, "the unreleased flight's az1 copy", func() bool {
		_, err := h.inner.Bucket("az1").Head(context.Background(), key)
		return err == nil
	})
	r, _ := h.tailReader()
	res := h.readTail(r, s, "a")
	wantBatches(t, res.Records, "a", batches, per)
	if res.Stop != reader.StopCaughtUp || h.loglet.Index().Len() != flights {
		t.Fatalf("stop %v, %d flights indexed (want caught-up, %d)", res.Stop, h.loglet.Index().Len(), flights)
	}
	wctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if ack, err := tk.Wait(wctx); err == nil || s.Tail().SeqNum != batches*per {
		t.Fatalf("the batch with one copy of W = 2: ack %+v (%v), tail %d", ack, err, s.Tail().SeqNum)
	}
}
