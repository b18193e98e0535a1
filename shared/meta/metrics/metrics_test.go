package metrics_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/metrics"
	"github.com/starlog/starlog/shared/testsvc"
)

// Every operation is counted by kind and result, and passes through
// unchanged.
func TestWrapCountsOperations(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	ms, err := metrics.Wrap(testsvc.SQLite(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Get(ctx, "p", "s"); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("get of a missing row: %v", err)
	}
	if _, err := ms.Put(ctx, "p", "s", []byte("v"), meta.IfAbsent()); err != nil {
		t.Fatal(err)
	}
	if _, err := ms.Put(ctx, "p", "s", []byte("v"), meta.IfAbsent()); !errors.Is(err, meta.ErrConditionFailed) {
		t.Fatalf("second IfAbsent put: %v", err)
	}
	it, err := ms.Get(ctx, "p", "s")
	if err != nil || string(it.Val) != "v" {
		t.Fatalf("get: %q, %v", it.Val, err)
	}
	if _, err := metrics.Wrap(testsvc.SQLite(t), reg); err == nil {
		t.Fatal("a second wrapper registered the same metrics")
	}
	want := `
# HELP starlog_meta_requests_total Metastore operations by kind and result.
# TYPE starlog_meta_requests_total counter
starlog_meta_requests_total{op="get",result="not_found"} 1
starlog_meta_requests_total{op="get",result="ok"} 1
starlog_meta_requests_total{op="put",result="condition_failed"} 1
starlog_meta_requests_total{op="put",result="ok"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "starlog_meta_requests_total"); err != nil {
		t.Fatal(err)
	}
}

// Writes are counted per item by writer and row kind: the star's by
// default, another writer's where its context names it, and a second
// handle's (WrapWrites, the dev auditor's) in the same counter.
func TestWrapCountsWritesByWriterAndRow(t *testing.T) {
	ctx := context.Background()
	reg := prometheus.NewRegistry()
	ms, err := metrics.Wrap(testsvc.SQLite(t), reg)
	if err != nil {
		t.Fatal(err)
	}
	aud, err := metrics.WrapWrites(testsvc.SQLite(t), reg, meta.WriterJanitor)
	if err != nil {
		t.Fatal(err)
	}
	ref := meta.RefKey("s1", 7)
	if _, err := ms.Put(ctx, ref.PK, ref.SK, []byte("{}"), meta.Always()); err != nil {
		t.Fatal(err)
	}
	mk := meta.MarkerKey("a", meta.Standard, 1, 2)
	sh := meta.MarkerShardKey("a", meta.Standard, 1, 2, 0)
	if err := ms.BatchPut(ctx, []meta.Item{{PK: mk.PK, SK: mk.SK, Val: []byte("{}")}, {PK: sh.PK, SK: sh.SK, Val: []byte("{}")}}); err != nil {
		t.Fatal(err)
	}
	sctx := meta.WithWriter(ctx, meta.WriterSettle)
	if _, err := aud.Put(sctx, ref.PK, ref.SK, []byte("{}"), meta.Always()); err != nil {
		t.Fatal(err)
	}
	rc := meta.ReclaimKey("s1", 1, 7, 0)
	if _, err := aud.Put(ctx, rc.PK, rc.SK, []byte("{}"), meta.Always()); err != nil {
		t.Fatal(err)
	}
	if err := aud.Delete(meta.WithWriter(ctx, "someone"), rc.PK, rc.SK, meta.Always()); err != nil {
		t.Fatal(err)
	}
	if _, err := aud.Get(ctx, rc.PK, rc.SK); !errors.Is(err, meta.ErrNotFound) {
		t.Fatalf("get after delete: %v", err)
	}
	want := `
# HELP starlog_meta_writes_total Metastore write items (each of a batch; every result, as DynamoDB bills them) by writer (the star, or the auditor's pass or job) and row kind.
# TYPE starlog_meta_writes_total counter
starlog_meta_writes_total{row="marker",writer="star"} 1
starlog_meta_writes_total{row="marker_shard",writer="star"} 1
starlog_meta_writes_total{row="reclaim",writer="janitor"} 1
starlog_meta_writes_total{row="reclaim",writer="other"} 1
starlog_meta_writes_total{row="ref",writer="settle"} 1
starlog_meta_writes_total{row="ref",writer="star"} 1
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "starlog_meta_writes_total"); err != nil {
		t.Fatal(err)
	}
}

// Every key the schema writes has a kind of its own, not "other".
func TestRowKinds(t *testing.T) {
	for _, c := range []struct {
		k    meta.Key
		want string
	}{
		{meta.RefKey("s", 1), meta.RowRef},
		{meta.LeaseKey("s"), meta.RowLease},
		{meta.StreamMetaKey("s"), meta.RowStreamMeta},
		{meta.StreamTombstoneKey("s"), meta.RowTombstone},
		{meta.MarkerKey("a", meta.Express, 1, 2), meta.RowMarker},
		{meta.MarkerShardKey("a", meta.Express, 1, 2, 3), meta.RowMarkerShard},
		{meta.HeadKey("a", meta.Standard), meta.RowHead},
		{meta.EpochKey("a", meta.Standard, 4), meta.RowEpoch},
		{meta.SettleClaimKey("a", meta.Standard), meta.RowSettleClaim},
		{meta.SettleDueKey("a", meta.Standard), meta.RowSettleDue},
		{meta.JobClaimKey("a", meta.Standard, 1, 2), meta.RowJobClaim},
		{meta.BasinKey("b"), meta.RowBasin},
		{meta.StreamNameKey("b", "n"), meta.RowStreamName},
		{meta.RegistryKey("a"), meta.RowRegistry},
		{meta.StarDirKey("a"), meta.RowDirectory},
		{meta.ChainDirKey("a", meta.Standard), meta.RowDirectory},
		{meta.BasinDirKey("b"), meta.RowDirectory},
		{meta.ReclaimKey("s", 1, 2, 3), meta.RowReclaim},
		{meta.ReclaimStreamKey("s"), meta.RowReclaimStream},
		{meta.SettleFailKey("s"), meta.RowSettleFail},
		{meta.TokenKey("t"), meta.RowToken},
		{meta.QuotaUsageKey("b", "star-1"), meta.RowQuota},
		{meta.Key{PK: "producers#s", SK: "checkpoint"}, meta.RowProducers},
	} {
		if got := meta.RowKind(c.k.PK, c.k.SK); got != c.want {
			t.Errorf("RowKind(%q, %q) = %q, want %q", c.k.PK, c.k.SK, got, c.want)
		}
	}
}
