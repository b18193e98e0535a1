package auditjob_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
)

// Retention forgets an idle stream's records: a stream written once and
// never again, with a one-minute age, keeps no readable record once its
// records are older than that, and its object is deleted a read grace
// later; its greatest catalog row stays, marked Trimmed, with the
// stream's tail (next seq, last timestamp, fencing token, trim point,
// metered bytes), which a re-opened leader and check-tail read. A stream
// of two aged rows loses the first and keeps the second as its tail; a
// stream younger than its (one-day) age keeps everything.
func TestJanitorForgetsIdleStreams(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		e := newCatalogEnv(t, b)
		objs, ms, st, now := e.objs, e.ms, e.st, e.now
		put := func(pk, sk, val string) { t.Helper(); e.put(t, pk, sk, []byte(val)) }
		put("basins", "b1", `{"id":"B1"}`)
		put("basin#b1", "cfg", `{"id":"B1","config":{}}`)
		old, young := uint64(now.Add(-time.Hour).UnixMilli()), uint64(now.UnixMilli())
		streams := []struct {
			id   string
			rows int
			ts   uint64
			age  int
		}{{"s-idle", 1, old, 60}, {"s-two", 2, old, 60}, {"s-young", 1, young, 86400}}
		keys := map[string]string{} // stream id and first seq: object key
		for _, s := range streams {
			put("basin#b1", "s#"+s.id, fmt.Sprintf(`{"id":%q,"basin_id":"B1","config":{"retention_policy":{"age":%d}}}`, s.id, s.age))
			for i := range uint64(s.rows) {
				body := []byte(fmt.Sprintf("object %d of %s", i, s.id))
				key := format.SettledKey("b1", s.id, 1, 10*i, 0)
				if _, err := objs.Bucket("std").PutIfAbsent(ctx, key, body); err != nil {
					t.Fatal(err)
				}
				keys[fmt.Sprint(s.id, 10*i)] = key
				r := meta.Ref{FirstSeq: 10 * i, EndSeq: 10*i + 10, CumBytes: 100 * (i + 1), MinTimestamp: s.ts + i, MaxTimestamp: s.ts + i,
					FencingToken: "tok", TrimPoint: 3,
					Settled: &meta.Settled{Epoch: 1, FirstSeq: 10 * i, Bytes: uint64(len(body))}}
				k := meta.RefKey(s.id, 10*i)
				put(k.PK, k.SK, string(meta.Encode(r)))
			}
		}
		rows := func(id string) []meta.Ref {
			t.Helper()
			pg, err := ms.Query(ctx, meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~"})
			if err != nil {
				t.Fatal(err)
			}
			var out []meta.Ref
			for _, it := range pg.Items {
				var r meta.Ref
				if err := meta.Decode(it.Val, &r); err != nil {
					t.Fatal(err)
				}
				out = append(out, r)
			}
			return out
		}
		stored := func(id string, first uint64) bool {
			t.Helper()
			_, err := objs.Bucket("std").Head(ctx, keys[fmt.Sprint(id, first)])
			return err == nil
		}
		// The tail a row keeps: what star/streams and the absorb read.
		tailOf := func(id string, first uint64) {
			t.Helper()
			rs := rows(id)
			if len(rs) != 1 || rs[0].FirstSeq != first {
				t.Fatalf("rows of %s: %+v, want only the one from %d", id, rs, first)
			}
			r := rs[0]
			if r.Settled == nil || !r.Settled.Trimmed || !r.Settled.Sealed {
				t.Fatalf("%s: the greatest catalog row %+v is not marked Trimmed and Sealed: its records are still served", id, r.Settled)
			}
			if r.EndSeq != first+10 || r.MaxTimestamp != old+first/10 || r.FencingToken != "tok" || r.TrimPoint != 3 || r.CumBytes != 100*(first/10+1) {
				t.Fatalf("%s: the tail changed: %+v", id, r)
			}
		}
		if _, err := auditjob.Janitor(ctx, st); err != nil {
			t.Fatal(err)
		}
		tailOf("s-idle", 0)
		tailOf("s-two", 10)
		if rs := rows("s-young"); len(rs) != 1 || rs[0].Settled.Trimmed || rs[0].Settled.Sealed {
			t.Fatalf("the young stream's row changed: %+v", rs)
		}
		// Within the grace a reader holding the row still reads the object.
		if !stored("s-idle", 0) || !stored("s-two", 10) {
			t.Fatal("an object went before its read grace")
		}
		for range 2 { // the pass that arms, then the pass past the grace
			e.now = e.now.Add(st.Config.WithDefaults().ReadGrace + time.Second) // st.Now reads e.now
			now = e.now
			if _, err := auditjob.Janitor(ctx, st); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range []struct {
			id    string
			first uint64
			want  bool
		}{{"s-idle", 0, false}, {"s-two", 0, false}, {"s-two", 10, false}, {"s-young", 0, true}} {
			if got := stored(c.id, c.first); got != c.want {
				t.Errorf("object of %s at %d: stored %v, want %v", c.id, c.first, got, c.want)
			}
		}
		tailOf("s-idle", 0)
		tailOf("s-two", 10)
		if pg, err := ms.Query(ctx, meta.Query{PK: meta.ReclaimPK}); err != nil || len(pg.Items) != 0 {
			t.Errorf("reclaim entries left: %v %v", pg.Items, err)
		}
		// Appended to again: the settle commits a new object after the
		// marked row (it is sealed), and the next pass deletes the marked
		// row, whose object is gone already; the new row stays.
		body := []byte("object 1 of s-idle")
		key := format.SettledKey("b1", "s-idle", 2, 10, 0)
		if _, err := objs.Bucket("std").PutIfAbsent(ctx, key, body); err != nil {
			t.Fatal(err)
		}
		fresh := meta.Ref{FirstSeq: 10, EndSeq: 12, CumBytes: 120, MinTimestamp: uint64(now.UnixMilli()), MaxTimestamp: uint64(now.UnixMilli()),
			FencingToken: "tok", TrimPoint: 3, Settled: &meta.Settled{Epoch: 2, FirstSeq: 10, Bytes: uint64(len(body))}}
		k := meta.RefKey("s-idle", 10)
		put(k.PK, k.SK, string(meta.Encode(fresh)))
		if rep, err := auditjob.Janitor(ctx, st); err != nil || rep.Retention.Rows != 1 || rep.Retention.Marked != 0 {
			t.Fatalf("the pass after an append: %+v %v, want the marked row deleted and nothing marked", rep.Retention, err)
		}
		if rs := rows("s-idle"); len(rs) != 1 || rs[0].FirstSeq != 10 || rs[0].Settled.Trimmed {
			t.Fatalf("rows of s-idle after an append: %+v, want only the new row, unmarked", rs)
		}
		if _, err := objs.Bucket("std").Head(ctx, key); err != nil {
			t.Fatalf("the new object: %v", err)
		}
	})
}
