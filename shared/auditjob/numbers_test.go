package auditjob_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
)

// numbersFixture is a janitor's stores (embedded) with put, and rows
// writes a stream's three settled catalog rows [0,30) whose records all
// have timestamp ts (the last row carries the tail).
type numbersFixture struct {
	ctx context.Context
	ms  meta.Store
	st  *settle.Stores
	now time.Time
}

func newNumbersFixture(t *testing.T) *numbersFixture {
	t.Helper()
	m, err := mem.New("std")
	if err != nil {
		t.Fatal(err)
	}
	f := &numbersFixture{ctx: context.Background(), ms: testsvc.SQLite(t), now: time.Now()}
	f.st = &settle.Stores{Meta: f.ms, Objects: m, SettledBucket: "std", Streams: settle.MetaStreams{Meta: f.ms},
		Config: settle.Config{ScratchDir: t.TempDir()}, Now: func() time.Time { return f.now }}
	return f
}

func (f *numbersFixture) put(t *testing.T, pk, sk string, val []byte) {
	t.Helper()
	if _, err := f.ms.Put(f.ctx, pk, sk, val, meta.Always()); err != nil {
		t.Fatal(err)
	}
}

func (f *numbersFixture) rows(t *testing.T, id string, ts uint64) {
	t.Helper()
	for i := range uint64(3) {
		r := meta.Ref{FirstSeq: 10 * i, EndSeq: 10*i + 10, MinTimestamp: ts, MaxTimestamp: ts,
			Settled: &meta.Settled{Epoch: 1, FirstSeq: 10 * i, Bytes: 10}}
		k := meta.RefKey(id, 10*i)
		f.put(t, k.PK, k.SK, meta.Encode(r))
	}
}

// Ages in seconds around time.Duration's wrap (math.MaxInt64 ns is
// 9,223,372,036.854775807 s): a bare time.Duration(age)*time.Second is
// negative from 293 years to 584 and again past 1,000, and wraps to a
// third of a second at 18,446,744,074 s.
const (
	age293Years  = 293 * 365 * 24 * 3600  // 9,240,048,000
	age1000Years = 1000 * 365 * 24 * 3600 // 31,536,000,000
	ageWrapSmall = 18_446_744_074         // × 1e9 ns wraps to 290,448,384 ns
	ageMaxU64    = uint64(1<<64 - 1)      // 2^64−1
	ageJustOver  = 9_223_372_037          // the first whole second past the wrap
	ageJustUnder = 9_223_372_036          // the last whole second a Duration holds
	ageWeek      = 7 * 24 * 3600
)

// Defect 6 (issue 26): a retention age past time.Duration's range (from
// about 292 years, a natural way to say "forever") never trims a record,
// set on the stream or taken from its basin's default_stream_config; a
// 7-day control on the same run keeps everything and a 1-second control
// trims. Before the fix the janitor's time.Duration(age)*time.Second
// wrapped negative (or tiny) and every settled row but the last went at
// the next pass.
func TestRetentionHugeAgeKeepsEveryRecord(t *testing.T) {
	f := newNumbersFixture(t)
	old := uint64(f.now.Add(-time.Hour).UnixMilli())
	f.put(t, "basins", "b1", []byte(`{"id":"B1"}`))
	f.put(t, "basin#b1", "cfg", []byte(`{"id":"B1","config":{}}`))
	type stream struct {
		basin, config string
		keep          int // catalog rows left after the pass
	}
	streams := map[string]stream{
		"y293":       {"b1", fmt.Sprintf(`{"retention_policy":{"age":%d}}`, age293Years), 3},
		"y1000":      {"b1", fmt.Sprintf(`{"retention_policy":{"age":%d}}`, age1000Years), 3},
		"wrap-small": {"b1", fmt.Sprintf(`{"retention_policy":{"age":%d}}`, ageWrapSmall), 3},
		"max":        {"b1", fmt.Sprintf(`{"retention_policy":{"age":%d}}`, ageMaxU64), 3},
		"just-over":  {"b1", fmt.Sprintf(`{"retention_policy":{"age":%d}}`, ageJustOver), 3},
		"just-under": {"b1", fmt.Sprintf(`{"retention_policy":{"age":%d}}`, ageJustUnder), 3},
		"week":       {"b1", fmt.Sprintf(`{"retention_policy":{"age":%d}}`, ageWeek), 3},
		"second":     {"b1", `{"retention_policy":{"age":1}}`, 1},
	}
	// Basins whose default_stream_config holds the huge age: a stream
	// whose row has no retention of its own takes it.
	for i, age := range []uint64{age293Years, age1000Years, ageWrapSmall, ageMaxU64} {
		b := fmt.Sprintf("d%d", i)
		id := "D" + b
		f.put(t, "basins", b, fmt.Appendf(nil, `{"id":%q}`, id))
		f.put(t, "basin#"+b, "cfg", fmt.Appendf(nil, `{"id":%q,"config":{"default_stream_config":{"retention_policy":{"age":%d}}}}`, id, age))
		streams[b+"-inherits"] = stream{b, `{}`, 3}
		streams[b+"-second"] = stream{b, `{"retention_policy":{"age":1}}`, 1}
	}
	basinID := func(b string) string {
		if b == "b1" {
			return "B1"
		}
		return "D" + b
	}
	for name, s := range streams {
		f.put(t, "basin#"+s.basin, "s#"+name, fmt.Appendf(nil, `{"id":%q,"basin_id":%q,"config":%s}`, "s-"+name, basinID(s.basin), s.config))
		f.rows(t, "s-"+name, old)
	}
	rep, err := auditjob.Retention(f.ctx, f.st, f.now)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range streams {
		if got := len(rowsOf(t, f.ms, "s-"+name)); got != s.keep {
			t.Errorf("stream %s (%s, basin %s): %d catalog rows left, want %d", name, s.config, s.basin, got, s.keep)
		}
	}
	if rep.Trimmed != 5 {
		t.Errorf("retention: %+v, want the 5 one-second streams trimmed, no other", rep)
	}
}

// delete_on_empty never deletes a stream early through a wrap: a
// min_age_secs or an age past a Duration's range, or a record timestamp
// near 2^64 (uncapped timestamps) plus the age, each made the "empty
// since" plus min age wrap below now, so a stream that still holds
// retained records, or has not been empty for its min age, was deleted.
// A control with small numbers on the same run is deleted.
func TestDeleteOnEmptyHugeNumbersNeverWrap(t *testing.T) {
	f := newNumbersFixture(t)
	old := uint64(f.now.Add(-time.Hour).UnixMilli())
	f.put(t, "basins", "b1", []byte(`{"id":"B1"}`))
	f.put(t, "basin#b1", "cfg", []byte(`{"id":"B1","config":{}}`))
	created := f.now.Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)
	type stream struct {
		config string
		ts     uint64 // the records' timestamp
		gone   bool
	}
	streams := map[string]stream{
		"control":        {`{"retention_policy":{"age":60},"delete_on_empty":{"min_age_secs":60}}`, old, true},
		"min-age-wrap":   {fmt.Sprintf(`{"retention_policy":{"age":60},"delete_on_empty":{"min_age_secs":%d}}`, ageWrapSmall), old, false},
		"min-age-max":    {fmt.Sprintf(`{"retention_policy":{"age":60},"delete_on_empty":{"min_age_secs":%d}}`, ageMaxU64), old, false},
		"min-age-1000y":  {fmt.Sprintf(`{"retention_policy":{"age":60},"delete_on_empty":{"min_age_secs":%d}}`, age1000Years), old, false},
		"age-wrap":       {fmt.Sprintf(`{"retention_policy":{"age":%d},"delete_on_empty":{"min_age_secs":60}}`, ageWrapSmall), old, false},
		"age-max":        {fmt.Sprintf(`{"retention_policy":{"age":%d},"delete_on_empty":{"min_age_secs":60}}`, ageMaxU64), old, false},
		"future-records": {`{"retention_policy":{"age":60},"delete_on_empty":{"min_age_secs":60}}`, ageMaxU64 - 1000, false},
	}
	for name, s := range streams {
		id := "s-" + name
		f.put(t, "basin#b1", "s#"+name, fmt.Appendf(nil, `{"id":%q,"basin_id":"B1","config":%s,"created_at":%q}`, id, s.config, created))
		f.rows(t, id, s.ts)
		k := meta.LeaseKey(id)
		f.put(t, k.PK, k.SK, meta.Encode(meta.Lease{LeaseHolder: meta.LeaseHolder{Star: "s1", Incarnation: 1}, Version: 2, Released: true, Frontier: 30}))
	}
	if _, err := auditjob.Retention(f.ctx, f.st, f.now); err != nil {
		t.Fatal(err)
	}
	for name, s := range streams {
		k := meta.StreamNameKey("b1", name)
		it, err := f.ms.Get(f.ctx, k.PK, k.SK)
		if err != nil {
			t.Fatal(err)
		}
		var row map[string]any
		if err := json.Unmarshal(it.Val, &row); err != nil {
			t.Fatal(err)
		}
		if _, deleted := row["deleted_at"]; deleted != s.gone {
			t.Errorf("stream %s (%s, records at %d ms): deleted %v, want %v", name, s.config, s.ts, deleted, s.gone)
		}
	}
}
