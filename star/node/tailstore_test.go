package node_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// A star whose flight index keeps no bundle (--s3-chain-index-cache-mib 0)
// and whose absorb is held back by its write budget serves the released,
// unabsorbed records of both classes from their slot objects: every
// acknowledged record, in order.
func TestReadsOfEvictedFlights(t *testing.T) {
	st := newStores(t)
	ctx := context.Background()
	cfg := testConfig()
	cfg.IndexCacheBytes = -1
	cfg.AbsorbWriteBudget = 0.001 // after the first pass, none for the test's life
	n := open(t, st, cfg)
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: "evict-basin"}, ""); err != nil {
		t.Fatal(err)
	}
	express := api.StorageExpress
	for _, s := range []struct {
		name string
		cfg  *api.StreamConfig
	}{{"std", nil}, {"exp", &api.StreamConfig{StorageClass: &express}}} {
		if _, err := n.CreateStream(ctx, "evict-basin", api.CreateStreamRequest{Stream: s.name, Config: s.cfg}, ""); err != nil {
			t.Fatal(err)
		}
		for i := range 8 {
			if _, err := n.Append(ctx, "evict-basin", s.name, records(fmt.Sprint(i), 10), nil); err != nil {
				t.Fatal(err)
			}
		}
		got := readAll(t, n, "evict-basin", s.name)
		if len(got) != 80 {
			t.Fatalf("%s: read %d records, want 80", s.name, len(got))
		}
		for j, r := range got {
			if want := fmt.Sprintf("%d-%d", j/10, j%10); r.SeqNum != uint64(j) || string(r.Body) != want {
				t.Fatalf("%s record %d: seq %d body %q, want %q", s.name, j, r.SeqNum, r.Body, want)
			}
		}
	}
	if v := metric(t, n, "starlog_flight_index_evictions_total"); v == 0 {
		t.Fatal("no bundle evicted")
	}
	if v := metric(t, n, "starlog_reader_tail_store_extents_total"); v == 0 {
		t.Fatal("no tail extent read from the store")
	}
}
