package auditjob_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
)

// The janitor applies each live stream's retention: a stream with a
// one-minute age loses its catalog rows older than that (its greatest is
// kept, marked Trimmed, for the stream's tail), and their objects a read
// grace later; an infinite stream keeps everything. A deleted stream, and a stream of an earlier basin of
// the same name, lose all their rows, then (a grace after a pass found
// none left) all their objects; their tombstones stay. Rows as star/node
// writes them.
func TestJanitorRetention(t *testing.T) {
	eachBackend(t, func(t *testing.T, b backend) {
		ctx := context.Background()
		e := newCatalogEnv(t, b)
		objs, ms, st, now := e.objs, e.ms, e.st, e.now
		put := func(pk, sk, val string) { t.Helper(); e.put(t, pk, sk, []byte(val)) }
		put("basins", "b1", `{"id":"B1"}`)
		put("basin#b1", "cfg", `{"id":"B1","config":{}}`)
		streams := map[string]string{
			"aged":    `{"id":"s-aged","basin_id":"B1","config":{"retention_policy":{"age":60}}}`,
			"forever": `{"id":"s-inf","basin_id":"B1","config":{"retention_policy":{"infinite":{}}}}`,
			"deleted": `{"id":"s-del","basin_id":"B1","config":{"retention_policy":{"age":60}},"deleted_at":"2026-01-01T00:00:00Z"}`,
			"stale":   `{"id":"s-old","basin_id":"B0","config":{"retention_policy":{"age":60}}}`, // an earlier basin of the name
		}
		old := uint64(now.Add(-time.Hour).UnixMilli())
		var keys []string
		for name, row := range streams {
			put("basin#b1", "s#"+name, row)
			id := map[string]string{"aged": "s-aged", "forever": "s-inf", "deleted": "s-del", "stale": "s-old"}[name]
			for i := range uint64(3) {
				body := []byte(fmt.Sprintf("object %d of %s", i, id))
				key := format.SettledKey("b1", id, 1, 10*i, 0)
				if _, err := objs.Bucket("std").PutIfAbsent(ctx, key, body); err != nil {
					t.Fatal(err)
				}
				keys = append(keys, key)
				r := meta.Ref{FirstSeq: 10 * i, EndSeq: 10*i + 10, MinTimestamp: old + i, MaxTimestamp: old + i,
					Settled: &meta.Settled{Epoch: 1, FirstSeq: 10 * i, Bytes: uint64(len(body))}}
				k := meta.RefKey(id, 10*i)
				put(k.PK, k.SK, string(meta.Encode(r)))
			}
		}
		rep, err := auditjob.Janitor(ctx, st)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Retention.Streams != 2 || rep.Retention.Rows != 2 || rep.Retention.Marked != 1 || rep.Retention.Forgotten != 2 || rep.Deleted.Rows != 6 {
			t.Fatalf("retention: %+v, deleted streams %+v: want 2 live streams visited, 2 rows trimmed and 1 marked, 2 deleted streams' 6 rows gone", rep.Retention, rep.Deleted)
		}
		e.now = e.now.Add(st.Config.WithDefaults().ReadGrace + time.Second) // st.Now reads e.now
		now = e.now
		if rep, err = auditjob.Janitor(ctx, st); err != nil {
			t.Fatal(err)
		}
		if rep.Reclaim.Deleted != 3 || rep.Deleted.Objects != 0 {
			t.Fatalf("reclaim: %+v, deleted streams %+v: want the 2 trimmed rows' objects and the marked row's deleted, and no deleted stream's yet (armed now)", rep.Reclaim, rep.Deleted)
		}
		e.now = e.now.Add(st.Config.WithDefaults().ReadGrace + time.Second) // st.Now reads e.now
		now = e.now
		if rep, err = auditjob.Janitor(ctx, st); err != nil {
			t.Fatal(err)
		}
		if rep.Deleted.Objects != 6 || rep.Deleted.Done != 2 {
			t.Fatalf("deleted streams: %+v, want 6 objects deleted and 2 streams done", rep.Deleted)
		}
		for _, key := range keys {
			_, err := objs.Bucket("std").Head(ctx, key)
			gone := err != nil
			want := strings.Contains(key, "/s-aged/") || strings.Contains(key, "/s-del/") || strings.Contains(key, "/s-old/")
			if gone != want {
				t.Errorf("object %s: gone %v, want %v (%v)", key, gone, want, err)
			}
		}
		for _, id := range []string{"s-del", "s-old"} {
			pg, err := ms.Query(ctx, meta.Query{PK: meta.RefKey(id, 0).PK})
			if err != nil {
				t.Fatal(err)
			}
			// The tombstone and the retired lease stay (no star may take
			// a fresh lease of a deleted id: shared/reclaim's retireLease).
			var sks []string
			for _, it := range pg.Items {
				sks = append(sks, it.SK)
			}
			if strings.Join(sks, ",") != "deleted,lease" {
				t.Errorf("rows of deleted stream %s: %v, want its tombstone and its retired lease only", id, sks)
			}
			if l, _, ok, err := leader.ReadLease(ctx, ms, id); err != nil || !ok || !l.Deleted {
				t.Errorf("lease of deleted stream %s: %+v (found %v, %v), want retired", id, l, ok, err)
			}
		}
		if pg, err := ms.Query(ctx, meta.Query{PK: meta.ReclaimStreamsPK}); err != nil || len(pg.Items) != 0 {
			t.Errorf("deleted-stream rows left: %v %v", pg.Items, err)
		}
		// The deleted name rows still stand: a later run does not register
		// the reclaimed streams again.
		if _, err = auditjob.Janitor(ctx, st); err != nil {
			t.Fatal(err)
		}
		if pg, err := ms.Query(ctx, meta.Query{PK: meta.ReclaimStreamsPK}); err != nil || len(pg.Items) != 0 {
			t.Errorf("reclaimed streams registered again: %v %v", pg.Items, err)
		}
		pg, err := ms.Query(ctx, meta.Query{PK: meta.RefKey("s-aged", 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~"})
		if err != nil {
			t.Fatal(err)
		}
		if len(pg.Items) != 1 || pg.Items[0].SK != meta.RefKey("s-aged", 20).SK {
			t.Fatalf("rows of the aged stream: %v, want only its greatest", pg.Items)
		}
		var top meta.Ref
		if err := meta.Decode(pg.Items[0].Val, &top); err != nil {
			t.Fatal(err)
		}
		if top.EndSeq != 30 || !top.Settled.Trimmed {
			t.Fatalf("the aged stream's greatest row %+v: want it marked Trimmed, ending at 30", top)
		}
	})
}

// hookMeta runs hook once, before the first query of partition pk.
type hookMeta struct {
	meta.Store
	pk   string
	once sync.Once
	hook func()
}

func (m *hookMeta) Query(ctx context.Context, q meta.Query) (meta.Page, error) {
	if q.PK == m.pk {
		m.once.Do(m.hook)
	}
	return m.Store.Query(ctx, q)
}

// A basin deleted and re-created while the retention pass lists its
// streams: a stream created in the new basin is live, never taken for one
// of the old basin's, so its rows and objects stay.
func TestRetentionBasinRecreatedMidPass(t *testing.T) {
	ctx := context.Background()
	m, err := mem.New("std")
	if err != nil {
		t.Fatal(err)
	}
	ms := testsvc.SQLite(t)
	put := func(pk, sk, val string) {
		t.Helper()
		if _, err := ms.Put(ctx, pk, sk, []byte(val), meta.Always()); err != nil {
			t.Fatal(err)
		}
	}
	put("basins", "b1", `{"id":"B1"}`)
	put("basin#b1", "cfg", `{"id":"B1","config":{}}`)
	hm := &hookMeta{Store: ms, pk: "basin#b1", hook: func() {
		// Between the pass's read of the basin and its listing: the basin is
		// re-created (a new id) and a stream created in it.
		put("basin#b1", "cfg", `{"id":"B2","config":{}}`)
		put("basin#b1", "s#new", `{"id":"s-new","basin_id":"B2","config":{"retention_policy":{"infinite":{}}}}`)
	}}
	now := time.Now()
	st := &settle.Stores{Meta: hm, Objects: m, SettledBucket: "std", Streams: settle.MetaStreams{Meta: hm},
		Config: settle.Config{ScratchDir: t.TempDir()}, Now: func() time.Time { return now }}
	rep, err := auditjob.Retention(ctx, st, now)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Forgotten != 0 {
		t.Fatalf("a stream of the re-created basin was taken for a deleted one: %+v", rep)
	}
	if _, err := ms.Get(ctx, meta.ReclaimStreamKey("s-new").PK, meta.ReclaimStreamKey("s-new").SK); err == nil {
		t.Fatal("the live stream is registered for deletion")
	}
}
