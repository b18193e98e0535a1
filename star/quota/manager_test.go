package quota

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/sqlite"
)

// fakeBasins is the catalog's side: each basin's id and quotas, settable.
type fakeBasins struct {
	mu     sync.Mutex
	q      map[string]*api.BasinQuotas
	stored uint64
}

func (f *fakeBasins) basin(_ context.Context, name string) (string, *api.BasinQuotas, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	q, ok := f.q[name]
	if !ok {
		return "", nil, api.BasinNotFound("no basin %q", name)
	}
	return "id-" + name, q, nil
}

func (f *fakeBasins) set(name string, q *api.BasinQuotas) {
	f.mu.Lock()
	f.q[name] = q
	f.mu.Unlock()
}

func (f *fakeBasins) storedBytes(context.Context, string) (uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stored, nil
}

type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func openMeta(t *testing.T) meta.Store {
	ms, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ms.Close() })
	return ms
}

// Two stars appending to one basin are refused once their summed rate
// reaches the quota, and admitted again once it is raised; a basin
// without a quota is never written about.
func TestTwoStarsShareAnAppendQuota(t *testing.T) {
	ms := openMeta(t)
	clk := &clock{now: time.Unix(10_000, 0)}
	fb := &fakeBasins{q: map[string]*api.BasinQuotas{
		"tenant": {AppendBytesPerSec: api.Uint64(1000)},
		"free":   nil,
	}}
	reg := prometheus.NewRegistry()
	mk := func(star string, r prometheus.Registerer) *Manager {
		return New(Config{Star: star, Period: time.Second, Window: 5 * time.Second},
			Deps{Meta: ms, Now: clk.Now, Basin: fb.basin, Stored: fb.storedBytes, Registry: r})
	}
	a, b := mk("star-a", reg), mk("star-b", nil)
	ctx := t.Context()
	for _, m := range []*Manager{a, b} {
		id, q, _ := fb.basin(ctx, "tenant")
		m.Observe("tenant", id, q)
	}
	// Each star alone stays under: 600 B/s each over the window (3000 B
	// in 5 s), 1200 B/s together.
	for range 3 {
		for _, m := range []*Manager{a, b} {
			if err := m.Take("tenant", 1000); err != nil {
				t.Fatalf("under the quota: %v", err)
			}
			if err := m.Take("free", 1<<20); err != nil {
				t.Fatalf("a basin without a quota: %v", err)
			}
		}
	}
	// Before the rows are exchanged each star sees only itself: admitted
	// (the staleness the docs bound: at most two periods).
	if err := a.Take("tenant", 1); err != nil {
		t.Fatalf("before the exchange: %v", err)
	}
	clk.advance(time.Second)
	a.Tick(ctx)
	b.Tick(ctx)
	a.Tick(ctx) // a reads b's row written after a's first tick
	err := a.Take("tenant", 1)
	if ae, ok := err.(*api.Error); !ok || ae.Status != 403 || ae.Code != api.CodeQuotaExhausted {
		t.Fatalf("summed over two stars over the quota: %v, want 403 quota_exhausted", err)
	}
	if err := b.Take("tenant", 1); err == nil {
		t.Fatal("star b admitted over the summed quota")
	}
	if got := testutil.ToFloat64(a.refused.WithLabelValues(DimAppendRate)); got != 1 {
		t.Errorf("star a's refused counter %v, want 1", got)
	}
	// The usage metric names the basin with a quota, not the free one.
	if n := testutil.CollectAndCount(reg, "starlog_quota_usage"); n != 1 {
		t.Errorf("starlog_quota_usage series: %d, want 1 (tenant's append rate)", n)
	}
	// Raised: admitted at once after the next tick reads the config.
	fb.set("tenant", &api.BasinQuotas{AppendBytesPerSec: api.Uint64(10_000)})
	a.Tick(ctx)
	if err := a.Take("tenant", 1); err != nil {
		t.Fatalf("after the quota was raised: %v", err)
	}
	// A basin with only a stream quota needs no usage rows either.
	fb.set("streams-only", &api.BasinQuotas{Streams: api.Uint64(5)})
	id, q, _ := fb.basin(ctx, "streams-only")
	a.Observe("streams-only", id, q)
	if err := a.Take("streams-only", 1<<20); err != nil {
		t.Fatal(err)
	}
	a.Tick(ctx)
	pg, err := ms.Query(ctx, meta.Query{PK: meta.QuotaUsageKey("streams-only", "").PK, From: "", To: "~"})
	if err != nil || len(pg.Items) != 0 {
		t.Fatalf("rows of a basin with only a stream quota: %v %v", pg.Items, err)
	}
	// Only the quota's basin has rows.
	pg, err = ms.Query(ctx, meta.Query{PK: meta.QuotaUsageKey("free", "").PK, From: "", To: "~"})
	if err != nil || len(pg.Items) != 0 {
		t.Fatalf("rows of the basin without a quota: %v %v", pg.Items, err)
	}
	pg, err = ms.Query(ctx, meta.Query{PK: meta.QuotaUsageKey("tenant", "").PK, From: "", To: "~"})
	if err != nil || len(pg.Items) != 2 {
		t.Fatalf("rows of the basin with a quota: %d %v, want one per star", len(pg.Items), err)
	}
	// A window and a few periods later, both idle: the rates fell out of
	// the sum and the stars stop writing.
	for range 8 {
		clk.advance(time.Second)
		a.Tick(ctx)
		b.Tick(ctx)
	}
	fb.set("tenant", &api.BasinQuotas{AppendBytesPerSec: api.Uint64(1000)})
	a.Tick(ctx)
	if err := a.Take("tenant", 1); err != nil {
		t.Fatalf("after both went idle: %v", err)
	}
}

// The stored bytes quota refuses appends once the basin's reading reaches
// it, on every star that reads the row, and admits again once trimmed.
func TestStoredBytesQuota(t *testing.T) {
	ms := openMeta(t)
	clk := &clock{now: time.Unix(10_000, 0)}
	fb := &fakeBasins{q: map[string]*api.BasinQuotas{"tenant": {StoredBytes: api.Uint64(5000)}}, stored: 4999}
	mk := func(star string) *Manager {
		return New(Config{Star: star, Period: time.Second}, Deps{Meta: ms, Now: clk.Now, Basin: fb.basin, Stored: fb.storedBytes})
	}
	a, b := mk("star-a"), mk("star-b")
	ctx := t.Context()
	for _, m := range []*Manager{a, b} {
		id, q, _ := fb.basin(ctx, "tenant")
		m.Observe("tenant", id, q)
		if err := m.Take("tenant", 1); err != nil {
			t.Fatal(err)
		}
		m.Tick(ctx)
	}
	if err := a.Take("tenant", 1); err != nil {
		t.Fatalf("4999 of 5000 bytes: %v", err)
	}
	fb.mu.Lock()
	fb.stored = 5000
	fb.mu.Unlock()
	clk.advance(time.Second)
	a.Tick(ctx) // a reads the basin: 5000
	b.Tick(ctx) // b reads it too, or a's row
	for _, m := range []*Manager{a, b} {
		if err := m.Take("tenant", 1); err == nil {
			t.Fatalf("%s admitted at the stored bytes quota", m.cfg.Star)
		}
	}
	fb.mu.Lock()
	fb.stored = 100 // trimmed
	fb.mu.Unlock()
	clk.advance(time.Second)
	a.Tick(ctx)
	if err := a.Take("tenant", 1); err != nil {
		t.Fatalf("after the trim: %v", err)
	}
}

// The stream count is the catalog's live name rows of the basin's
// incarnation, counted up to the quota.
func TestAdmitCreateCountsLiveStreams(t *testing.T) {
	ms := openMeta(t)
	ctx := t.Context()
	now := time.Unix(10_000, 0).UTC()
	put := func(name, basinID string, deleted bool) {
		row := meta.StreamRow{ID: "s-" + name, BasinID: basinID, CreatedAt: now}
		if deleted {
			row.DeletedAt = &now
		}
		k := meta.StreamNameKey("tenant", name)
		if _, err := ms.Put(ctx, k.PK, k.SK, meta.Encode(row), meta.Always()); err != nil {
			t.Fatal(err)
		}
	}
	put("a", "id-tenant", false)
	put("b", "id-tenant", true) // being deleted: no longer counts
	put("c", "id-old", false)   // an earlier incarnation's
	put("d", "id-tenant", false)
	m := New(Config{Star: "s"}, Deps{Meta: ms})
	q := api.BasinQuotas{Streams: api.Uint64(3)}
	if err := m.AdmitCreate(ctx, "tenant", "id-tenant", q); err != nil {
		t.Fatalf("2 of 3: %v", err)
	}
	put("e", "id-tenant", false)
	err := m.AdmitCreate(ctx, "tenant", "id-tenant", q)
	if ae, ok := err.(*api.Error); !ok || ae.Code != api.CodeQuotaExhausted {
		t.Fatalf("3 of 3: %v, want quota_exhausted", err)
	}
	if err := m.AdmitCreate(ctx, "tenant", "id-tenant", api.BasinQuotas{}); err != nil {
		t.Fatalf("no stream quota: %v", err)
	}
}

// Past MaxLabeledBasins the usage metric sums the rest under one label.
func TestUsageMetricIsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := New(Config{Star: "s"}, Deps{Registry: reg})
	for i := range MaxLabeledBasins + 20 {
		m.Observe(fmt.Sprintf("basin-%04d", i), "id", &api.BasinQuotas{AppendBytesPerSec: api.Uint64(10)})
	}
	if n := testutil.CollectAndCount(reg, "starlog_quota_limit"); n != MaxLabeledBasins+1 {
		t.Fatalf("starlog_quota_limit series: %d, want %d", n, MaxLabeledBasins+1)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		for _, mt := range mf.GetMetric() {
			if mf.GetName() == "starlog_quota_limit" && mt.GetLabel()[0].GetValue() == OtherBasins {
				if v := mt.GetGauge().GetValue(); v != 200 {
					t.Fatalf("the other basins' summed limit %v, want 200", v)
				}
				return
			}
		}
	}
	t.Fatal("no _other series")
}
