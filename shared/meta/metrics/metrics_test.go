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
