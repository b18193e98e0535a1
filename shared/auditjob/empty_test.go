package auditjob_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
)

// delete_on_empty: the janitor deletes a live stream that has had no
// retained records for its min age (never written, trimmed to its tail,
// or aged out), but only once it holds the stream's lease as Emptied,
// which it takes only from a lease released at the rows' tail (or from
// no lease, for a stream with no rows). A stream whose leader still
// holds its lease, or whose released frontier is past its rows (an
// acknowledged append not absorbed yet), is kept, as is one empty for
// less than its min age, one without delete_on_empty, and one with
// infinite retention. A lease found Emptied (a pass that crashed after
// taking it) is finished whatever the config says now. Rows as
// star/node writes them; on both backends.
func TestJanitorDeleteOnEmpty(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		e := newCatalogEnv(t, b)
		ms, st, now := e.ms, e.st, e.now
		put := func(pk, sk string, val []byte) { t.Helper(); e.put(t, pk, sk, val) }
		put("basins", "b1", []byte(`{"id":"B1"}`))
		put("basin#b1", "cfg", []byte(`{"id":"B1","config":{}}`))
		created := now.Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)
		old := uint64(now.Add(-time.Hour).UnixMilli())
		released := func(frontier uint64) *meta.Lease {
			return &meta.Lease{LeaseHolder: meta.LeaseHolder{Star: "s1", Incarnation: 1}, Version: 2, Released: true, Frontier: frontier}
		}
		type stream struct {
			config string
			rows   bool   // three catalog rows [0,30), last records an hour old
			trim   uint64 // the greatest row's trim point
			lease  *meta.Lease
			gone   bool
		}
		const doe = `"delete_on_empty":{"min_age_secs":60}`
		cases := map[string]stream{
			"never":    {config: `{` + doe + `}`, gone: true},
			"trimmed":  {config: `{` + doe + `}`, rows: true, trim: 30, lease: released(30), gone: true},
			"aged":     {config: `{"retention_policy":{"age":60},` + doe + `}`, rows: true, lease: released(30), gone: true},
			"fenced":   {config: `{}`, rows: true, lease: &meta.Lease{LeaseHolder: meta.LeaseHolder{Star: meta.EmptiedBy}, Version: 3, Emptied: true}, gone: true},
			"held":     {config: `{"retention_policy":{"age":60},` + doe + `}`, rows: true, lease: &meta.Lease{LeaseHolder: meta.LeaseHolder{Star: "s1", Incarnation: 1}, Version: 2}},
			"behind":   {config: `{"retention_policy":{"age":60},` + doe + `}`, rows: true, lease: released(31)},
			"pending":  {config: `{"retention_policy":{"age":60},` + doe + `}`, rows: true, lease: &meta.Lease{LeaseHolder: meta.LeaseHolder{Star: "s1", Incarnation: 1}, Version: 2, Released: true, Frontier: 30, Pending: []meta.LeaseHolder{{Star: "s0", Incarnation: 1}}}},
			"young":    {config: `{"retention_policy":{"age":60},"delete_on_empty":{"min_age_secs":7200}}`, rows: true, lease: released(30)},
			"off":      {config: `{"retention_policy":{"age":60}}`, rows: true, lease: released(30)},
			"infinite": {config: `{"retention_policy":{"infinite":{}},` + doe + `}`, rows: true, trim: 30, lease: released(30)},
			"unleased": {config: `{"retention_policy":{"age":60},` + doe + `}`, rows: true},
		}
		for name, c := range cases {
			id := "s-" + name
			put("basin#b1", "s#"+name, fmt.Appendf(nil, `{"id":%q,"basin_id":"B1","config":%s,"created_at":%q,"request_token":"tok"}`, id, c.config, created))
			if c.rows {
				for i := range uint64(3) {
					r := meta.Ref{FirstSeq: 10 * i, EndSeq: 10*i + 10, MinTimestamp: old + i, MaxTimestamp: old + i,
						Settled: &meta.Settled{Epoch: 1, FirstSeq: 10 * i, Bytes: 10}}
					if i == 2 {
						r.TrimPoint = c.trim
					}
					k := meta.RefKey(id, 10*i)
					put(k.PK, k.SK, meta.Encode(r))
				}
			}
			if c.lease != nil {
				k := meta.LeaseKey(id)
				put(k.PK, k.SK, meta.Encode(*c.lease))
			}
		}
		rep, err := auditjob.Janitor(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Retention.Emptied != 4 {
			t.Errorf("retention: %+v, want 4 streams deleted on empty", rep.Retention)
		}
		for name, c := range cases {
			id := "s-" + name
			k := meta.StreamNameKey("b1", name)
			it, err := ms.Get(ctx, k.PK, k.SK)
			if err != nil {
				t.Fatal(err)
			}
			var row map[string]any
			if err := json.Unmarshal(it.Val, &row); err != nil {
				t.Fatal(err)
			}
			_, deleted := row["deleted_at"]
			if deleted != c.gone {
				t.Errorf("stream %s: deleted %v, want %v (name row %s)", name, deleted, c.gone, it.Val)
			}
			if row["request_token"] != "tok" || row["created_at"] == nil {
				t.Errorf("stream %s: name row lost fields: %s", name, it.Val)
			}
			tk := meta.Key{PK: meta.StreamMetaKey(id).PK, SK: "deleted"}
			if _, err := ms.Get(ctx, tk.PK, tk.SK); (err == nil) != c.gone {
				t.Errorf("stream %s: tombstone %v, want %v", name, err == nil, c.gone)
			}
			l, _, leased, err := leader.ReadLease(ctx, ms, id)
			if err != nil {
				t.Fatal(err)
			}
			if c.gone {
				// The deleted-stream pass of the same run deleted its rows
				// and retired its lease, with no holder left to fence (the
				// auditor's own pseudo-holder is none).
				if !leased || !l.Deleted || len(l.Pending) != 0 || len(rowsOf(t, ms, id)) != 0 {
					t.Errorf("stream %s: lease %v (%+v) and rows %v left, want a retired lease with nothing pending and no rows", name, leased, l, rowsOf(t, ms, id))
				}
				continue
			}
			if (c.lease == nil) == leased || leased && l.Emptied {
				t.Errorf("stream %s kept, but its lease changed: %+v", name, l)
			}
			if len(rowsOf(t, ms, id)) == 0 {
				t.Errorf("stream %s kept, but its rows are gone", name)
			}
		}
	})
}

// rowsOf lists the ref rows of stream id.
func rowsOf(t *testing.T, ms meta.Store, id string) []string {
	t.Helper()
	pg, err := ms.Query(context.Background(), meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~"})
	if err != nil && !errors.Is(err, meta.ErrNotFound) {
		t.Fatal(err)
	}
	var out []string
	for _, it := range pg.Items {
		out = append(out, it.SK)
	}
	return out
}
