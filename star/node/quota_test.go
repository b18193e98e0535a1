package node_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/star/node"
)

// quotaConfig is a cluster star that exchanges its quota rows every 50 ms
// and trusts a cached basin row 100 ms, so the test sees a quota change
// within a fraction of a second.
func quotaConfig(id string) node.Config {
	c := clusterConfig(id)
	c.QuotaPeriod = 50 * time.Millisecond
	c.BasinCacheTTL = 100 * time.Millisecond
	return c
}

// body100 is an append of n records of 100 metered bytes each (92 bytes
// of body plus S2's 8 bytes of record overhead).
func body100(n int) *api.AppendInput {
	in := &api.AppendInput{}
	for range n {
		in.Records = append(in.Records, api.Record{Body: []byte(strings.Repeat("x", 92))})
	}
	return in
}

func isQuotaExhausted(err error) bool {
	var e *api.Error
	return errors.As(err, &e) && e.Status == 403 && e.Code == api.CodeQuotaExhausted
}

// Appends through two stars to one basin, each star leading its own
// stream, are refused once their summed rate crosses the basin's quota,
// though neither star alone is over it: the docs' staleness bound is two
// quota periods (100 ms here); the test logs the delay it saw and allows
// 2 s, for a loaded machine. Raised through the other star, the quota
// admits them again.
func TestAppendQuotaAcrossStars(t *testing.T) {
	st := newStores(t)
	a := open(t, st, quotaConfig("a"))
	b := open(t, st, quotaConfig("b"))
	ctx := context.Background()
	// 1000 B/s over the 5 s window: 5000 bytes admitted in a window.
	cfg := &api.BasinConfig{CreateStreamOnAppend: true, Quotas: &api.BasinQuotas{AppendBytesPerSec: api.Uint64(1000)}}
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: cfg}, ""); err != nil {
		t.Fatal(err)
	}
	// 3000 bytes each: 600 B/s alone, 1200 B/s together.
	for i := range 3 {
		if _, err := a.Append(ctx, "basin-one", "on-a", body100(10), nil); err != nil {
			t.Fatalf("a's append %d: %v", i, err)
		}
		if _, err := b.Append(ctx, "basin-one", "on-b", body100(10), nil); err != nil {
			t.Fatalf("b's append %d: %v", i, err)
		}
	}
	start := time.Now()
	poll.Until(t, 2*time.Second, "a refuses once it knows b's rate", func() bool {
		_, err := a.Append(ctx, "basin-one", "on-a", body100(1), nil)
		return isQuotaExhausted(err)
	})
	t.Logf("a refused %v after the last append (quota period 50 ms)", time.Since(start).Round(time.Millisecond))
	// b learns a's rate on its own exchange, which may come a period
	// after a's: a refusing says nothing yet about b.
	poll.Until(t, 2*time.Second, "b refuses once it knows a's rate", func() bool {
		_, err := b.Append(ctx, "basin-one", "on-b", body100(1), nil)
		return isQuotaExhausted(err)
	})
	t.Logf("b refused %v after the last append", time.Since(start).Round(time.Millisecond))

	if _, err := b.ReconfigureBasin(ctx, "basin-one", api.BasinReconfiguration{
		Quotas: api.SetTo(api.BasinQuotasReconfiguration{AppendBytesPerSec: api.SetTo[uint64](1 << 20)}),
	}); err != nil {
		t.Fatal(err)
	}
	poll.UntilErr(t, 2*time.Second, "a admits after the quota was raised on b", func() error {
		_, err := a.Append(ctx, "basin-one", "on-a", body100(1), nil)
		return err
	})
}

// The stored bytes quota refuses appends once what the basin's refs cover
// reaches it, and admits again when it is raised.
func TestStoredBytesQuotaRefusesAppends(t *testing.T) {
	st := newStores(t)
	a := open(t, st, quotaConfig("a"))
	ctx := context.Background()
	cfg := &api.BasinConfig{CreateStreamOnAppend: true, Quotas: &api.BasinQuotas{StoredBytes: api.Uint64(2000)}}
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: cfg}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Append(ctx, "basin-one", "s1", body100(25), nil); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, 10*time.Second, "refused once the refs cover 2500 bytes", func() bool {
		_, err := a.Append(ctx, "basin-one", "s1", body100(1), nil)
		return isQuotaExhausted(err)
	})
	if _, err := a.ReconfigureBasin(ctx, "basin-one", api.BasinReconfiguration{
		Quotas: api.SetTo(api.BasinQuotasReconfiguration{StoredBytes: api.SetTo[uint64](1 << 20)}),
	}); err != nil {
		t.Fatal(err)
	}
	poll.UntilErr(t, 2*time.Second, "admitted after the quota was raised", func() error {
		_, err := a.Append(ctx, "basin-one", "s1", body100(1), nil)
		return err
	})
}

// Two stars racing for a basin's last stream slot: at most one stream
// past the quota (docs/design.md, "Quotas per basin": each of k racing
// creates may pass), and once the count is at the quota every create,
// explicit or on append, is refused on either star.
func TestStreamQuotaRaceOnTwoStars(t *testing.T) {
	st := newStores(t)
	a := open(t, st, quotaConfig("a"))
	b := open(t, st, quotaConfig("b"))
	ctx := context.Background()
	cfg := &api.BasinConfig{CreateStreamOnAppend: true, Quotas: &api.BasinQuotas{Streams: api.Uint64(2)}}
	if _, err := a.CreateBasin(ctx, api.CreateBasinRequest{Basin: "basin-one", Config: cfg}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "first"}, ""); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, n := range []*node.Node{a, b} {
		wg.Go(func() {
			_, errs[i] = n.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: fmt.Sprintf("race-%d", i)}, "")
		})
	}
	wg.Wait()
	created := 0
	for _, err := range errs {
		switch {
		case err == nil:
			created++
		case !isQuotaExhausted(err):
			t.Fatalf("a racing create: %v", err)
		}
	}
	if created == 0 {
		t.Fatal("neither racing create took the last slot")
	}
	t.Logf("racing creates: %d of 2 passed (the bound: 2)", created)
	for i, n := range []*node.Node{a, b} {
		_, err := n.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: fmt.Sprintf("late-%d", i)}, "")
		apiErr(t, err, 403, api.CodeQuotaExhausted)
		_, err = n.Append(ctx, "basin-one", fmt.Sprintf("auto-%d", i), records("x", 1), nil)
		apiErr(t, err, 403, api.CodeQuotaExhausted)
	}
	// A deleted stream frees its slot.
	if err := a.DeleteStream(ctx, "basin-one", "first"); err != nil {
		t.Fatal(err)
	}
	if created == 1 {
		if _, err := b.CreateStream(ctx, "basin-one", api.CreateStreamRequest{Stream: "after-delete"}, ""); err != nil {
			t.Fatalf("after a delete freed a slot: %v", err)
		}
	}
}
