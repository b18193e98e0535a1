package settle_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/stores"
)

// goneStreams reports every stream deleted: a settle judges them without
// reading a row or a byte, so the test measures the markers alone.
type goneStreams struct{}

func (goneStreams) StreamState(context.Context, string) (bool, string, error) { return false, "", nil }

// One absorb pass of many streams on DynamoDB Local: a marker holding
// every stream id in one item (about 700 KB at 20,000 streams) is refused
// by DynamoDB's 400 KB item limit and the absorb never gets past the pass.
// The pass's stream set must land, the settle job must see all of it, and
// resolving the marker must leave no row of it behind.
//
// The name keeps the size the defect was found at; the test runs 5,000
// streams (a quarter of the rows to write and delete: 18 s of make test
// were 20,000), which crosses every page and batch bound the absorb, the
// settle and the metastore have below 20,000 (the inline marker's 1 KiB,
// the 32 KiB shard: 6 shards, DynamoDB's batch of 25 and query page of
// 1,000, the 1,024 and 4,096 row caps). One unsharded item of 5,000 ids
// (175 KB) would fit DynamoDB: the layout assertions below (one small
// marker row, several shards of at most 64 KiB) catch that instead.
func TestMarkerOf20000StreamsOnDynamo(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts DynamoDB Local (make tools) and writes 5,000 ref rows")
	}
	const n = 5_000
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	ms := stores.Dynamo(t, &sharedDyn)
	objs, err := mem.New("std")
	if err != nil {
		t.Fatal(err)
	}
	c := chain.New("star1", meta.Standard, chain.Incarnation("star1", 1), ms, objs)
	e, err := c.Mint(ctx, meta.EpochParams{Buckets: []string{"std"}, W: 1, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	var xs []format.Extent
	off := uint64(format.EnvelopeSize)
	for i := range n {
		xs = append(xs, format.Extent{StreamID: fmt.Sprintf("%032x", i), Count: 1, Offset: off, Length: 10, MinTimestamp: 1, MaxTimestamp: 1})
		off += 10
	}
	birth := time.UnixMilli(1_700_000_000_000)
	abs := &absorb.Absorber{Star: "star1", Class: meta.Standard, Meta: ms, Concurrency: 64, UpdateEpoch: c.UpdateEpoch,
		Rip: absorb.Ripening{Trigger: 1 << 30, Linger: time.Second, AgeCap: time.Minute}, Now: func() time.Time { return birth }}
	got, err := abs.Pass(ctx, e.Epoch, []absorb.Slot{{Slot: 0, Extents: xs}})
	if err != nil || got != 1 {
		t.Fatalf("pass of %d streams: consumed %d, %v", n, got, err)
	}
	pk := meta.ChainPK("star1", meta.Standard)
	rows := func(prefix string) (int, int) {
		t.Helper()
		q := meta.Query{PK: pk, From: prefix, To: prefix + "~"}
		count, largest := 0, 0
		for {
			pg, err := ms.Query(ctx, q)
			if err != nil {
				t.Fatal(err)
			}
			for _, it := range pg.Items {
				count++
				largest = max(largest, len(it.Val))
			}
			if pg.Next == "" {
				return count, largest
			}
			q.PageToken = pg.Next
		}
	}
	markers, mSize := rows("m#")
	shards, sSize := rows("ms#")
	t.Logf("%d streams: %d marker row of %d B, %d shard rows of at most %d B", n, markers, mSize, shards, sSize)
	if markers != 1 || mSize > 4<<10 || shards < 2 || sSize > 64<<10 {
		t.Fatalf("marker rows %d (largest %d B), shard rows %d (largest %d B)", markers, mSize, shards, sSize)
	}

	now := birth.Add(2 * time.Minute)
	st := &settle.Stores{Meta: ms, Objects: objs, SettledBucket: "std", Streams: goneStreams{},
		Config: settle.Config{ScratchDir: t.TempDir(), Workers: 16}, Logger: quietLog(), Now: func() time.Time { return now }}
	jobs, err := plan.Plan(ctx, st, now)
	if err != nil {
		t.Fatal(err)
	}
	var sj []settle.Job
	for _, j := range jobs {
		if j.Kind == settle.KindSettle {
			sj = append(sj, j)
		}
	}
	if len(sj) != 1 {
		t.Fatalf("planned %v", jobs)
	}
	rep, err := settle.Settle(ctx, st, sj[0])
	if err != nil {
		t.Fatal(err)
	}
	if rep.Streams != n || rep.Deleted != n || rep.Resolved != 1 {
		t.Fatalf("settle report %+v", rep)
	}
	if markers, _ := rows("m#"); markers != 0 {
		t.Fatalf("%d marker rows left", markers)
	}
	if shards, _ := rows("ms#"); shards != 0 {
		t.Fatalf("%d shard rows left", shards)
	}
}

// One undecodable marker among good ones is set aside (counted and
// logged, never ripe, spanned by no era) and Plan still plans the good
// markers around it; an undecodable epoch record and a directory row that
// names no chain are set aside the same way.
func TestPlanQuarantinesBadRows(t *testing.T) {
	ctx := context.Background()
	ms := testsvc.SQLite(t)
	objs, err := mem.New("std")
	if err != nil {
		t.Fatal(err)
	}
	c := chain.New("star1", meta.Standard, chain.Incarnation("star1", 1), ms, objs)
	e, err := c.Mint(ctx, meta.EpochParams{Buckets: []string{"std"}, W: 1, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	birth := time.UnixMilli(1_700_000_000_000)
	abs := &absorb.Absorber{Star: "star1", Class: meta.Standard, Meta: ms, UpdateEpoch: c.UpdateEpoch,
		Rip: absorb.Ripening{Trigger: 1 << 30, Linger: time.Second, AgeCap: time.Minute}, Now: func() time.Time { return birth }}
	off := uint64(format.EnvelopeSize)
	for s := range uint64(5) {
		x := format.Extent{StreamID: "a", FirstSeq: s, Count: 1, Offset: off, Length: 10, MinTimestamp: 1, MaxTimestamp: 1}
		if _, err := abs.Pass(ctx, e.Epoch, []absorb.Slot{{Slot: s, Extents: []format.Extent{x}}}); err != nil {
			t.Fatal(err)
		}
	}
	// Slot 2's marker is garbage; a second chain's epoch record is too,
	// and a directory row names no chain.
	mk := meta.MarkerKey("star1", meta.Standard, e.Epoch, 2)
	if _, err := ms.Put(ctx, mk.PK, mk.SK, []byte("{not json"), meta.Always()); err != nil {
		t.Fatal(err)
	}
	c2 := chain.New("star2", meta.Standard, chain.Incarnation("star2", 1), ms, objs)
	e2, err := c2.Mint(ctx, meta.EpochParams{Buckets: []string{"std"}, W: 1, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	ek := meta.EpochKey("star2", meta.Standard, e2.Epoch)
	if _, err := ms.Put(ctx, ek.PK, ek.SK, []byte(`{"checkpoint":"x"}`), meta.Always()); err != nil {
		t.Fatal(err)
	}
	dk := meta.ChainDirKey("", meta.Standard)
	if _, err := ms.Put(ctx, dk.PK, "no-class", nil, meta.Always()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	st := &settle.Stores{Meta: ms, Objects: objs, SettledBucket: "std", Streams: goneStreams{},
		Config: settle.Config{ScratchDir: t.TempDir()}, Metrics: settle.NewMetrics(reg), Logger: quietLog()}
	jobs, err := plan.Plan(ctx, st, birth.Add(2*time.Minute))
	if err != nil {
		t.Fatalf("plan failed on bad rows: %v", err)
	}
	var eras [][2]uint64
	for _, j := range jobs {
		if j.Kind == settle.KindSettle {
			eras = append(eras, [2]uint64{j.From, j.End})
		}
	}
	if want := [][2]uint64{{0, 2}, {3, 5}}; !slices.Equal(eras, want) {
		t.Fatalf("eras %v, want %v (around the bad marker at slot 2)", eras, want)
	}
	for kind, want := range map[string]float64{"marker": 1, "epoch": 1, "directory": 1} {
		var got float64
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "starlog_settle_plan_bad_rows_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, lp := range m.GetLabel() {
					if lp.GetName() == "kind" && lp.GetValue() == kind {
						got += m.GetCounter().GetValue()
					}
				}
			}
		}
		if got != want {
			t.Errorf("plan_bad_rows_total{kind=%q} = %v, want %v", kind, got, want)
		}
	}
	// The good eras settle: the bad marker stays, and no job spans it.
	for _, j := range jobs {
		if j.Kind != settle.KindSettle {
			continue
		}
		if _, err := settle.Settle(ctx, st, j); err != nil {
			t.Fatalf("settle %v: %v", j, err)
		}
	}
}

// A settler that dies between deleting a resolved marker and deleting its
// stream shards leaves the shards behind; the trim-check deletes them when
// its rewritten cursor passes the marker's slots.
func TestTrimSweepsShardsLeftBehind(t *testing.T) {
	ctx := context.Background()
	ms := testsvc.SQLite(t)
	objs, err := mem.New("std")
	if err != nil {
		t.Fatal(err)
	}
	c := chain.New("star1", meta.Standard, chain.Incarnation("star1", 1), ms, objs)
	e, err := c.Mint(ctx, meta.EpochParams{Buckets: []string{"std"}, W: 1, Window: 4})
	if err != nil {
		t.Fatal(err)
	}
	birth := time.UnixMilli(1_700_000_000_000)
	abs := &absorb.Absorber{Star: "star1", Class: meta.Standard, Meta: ms, UpdateEpoch: c.UpdateEpoch,
		Rip: absorb.Ripening{Trigger: 1 << 30, Linger: time.Second, AgeCap: time.Minute}, Now: func() time.Time { return birth }}
	var xs []format.Extent
	off := uint64(format.EnvelopeSize)
	for i := range 100 {
		xs = append(xs, format.Extent{StreamID: fmt.Sprintf("%032x", i), Count: 1, Offset: off, Length: 10, MinTimestamp: 1, MaxTimestamp: 1})
		off += 10
	}
	for s := range uint64(2) {
		if _, err := abs.Pass(ctx, e.Epoch, []absorb.Slot{{Slot: s, Extents: xs}}); err != nil {
			t.Fatal(err)
		}
		for i := range xs {
			xs[i].FirstSeq++
		}
	}
	shards := func() int {
		pg, err := ms.Query(ctx, meta.Query{PK: meta.ChainPK("star1", meta.Standard), From: meta.MarkerShardPrefix, To: meta.MarkerShardPrefix + "~"})
		if err != nil {
			t.Fatal(err)
		}
		return len(pg.Items)
	}
	if n := shards(); n != 2 {
		t.Fatalf("%d shard rows after two passes of 100 streams", n)
	}
	// The crash: slot 0's marker is gone, its shard stays.
	mk := meta.MarkerKey("star1", meta.Standard, e.Epoch, 0)
	if err := ms.Delete(ctx, mk.PK, mk.SK, meta.Always()); err != nil {
		t.Fatal(err)
	}
	st := &settle.Stores{Meta: ms, Objects: objs, SettledBucket: "std", Streams: goneStreams{},
		Config: settle.Config{ScratchDir: t.TempDir()}, Logger: quietLog()}
	if _, err := reclaim.TrimCheck(ctx, st, settle.ChainRef{Star: "star1", Class: meta.Standard}, birth); err != nil {
		t.Fatal(err)
	}
	// Slot 1's marker is live: its shard stays.
	if n := shards(); n != 1 {
		t.Fatalf("%d shard rows after the trim-check passed slot 0, want 1 (slot 1's)", n)
	}
}
