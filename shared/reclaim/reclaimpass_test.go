package reclaim_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/reclaim"
)

// batchPut writes items 25 at a time (DynamoDB's batch size).
func batchPut(t testing.TB, ms meta.Store, items []meta.Item) {
	t.Helper()
	for len(items) > 0 {
		n := min(len(items), 25)
		if err := ms.BatchPut(context.Background(), items[:n]); err != nil {
			t.Fatal(err)
		}
		items = items[n:]
	}
}

func entryItem(rc meta.Reclaim) meta.Item {
	k := meta.ReclaimKey(rc.Stream, rc.Epoch, rc.First, rc.Rev)
	return meta.Item{PK: k.PK, SK: k.SK, Val: meta.Encode(rc)}
}

// Issue 26, defect 4: more entries than a pass's limit sorted before one
// that is due. The due one is reclaimed within two passes: a pass spends
// its limit on work, not on entries waiting out their grace ("in grace":
// trimmed objects armed a minute ago), and resumes where the last one
// stopped ("pending": extensions not committed yet, whose rows every pass
// reads).
func TestReclaimPassReachesEveryEntry(t *testing.T) {
	const before = 6000 // the standing entries at about 1,000 superseded revisions a minute
	for _, kind := range []string{"in grace", "pending"} {
		t.Run(kind, func(t *testing.T) {
			st := bareStores(t)
			ctx := context.Background()
			now := time.Now()
			grace := st.Config.ReadGrace
			var items []meta.Item
			for i := range before {
				rc := meta.Reclaim{Basin: basin, Stream: fmt.Sprintf("a%05d", i), Epoch: 1, Bytes: 6}
				if kind == "in grace" {
					rc.Drop, rc.Armed = true, now.Add(-time.Minute).UnixMilli()
				} else {
					rc.Extend = true
					k := meta.RefKey(rc.Stream, 0)
					items = append(items, meta.Item{PK: k.PK, SK: k.SK, Val: meta.Encode(catalogRow(0, 10, 6))})
				}
				items = append(items, entryItem(rc))
			}
			batchPut(t, st.Meta, items)
			// Stream z's trimmed object, armed more than a grace ago.
			putEntry(t, st, meta.Reclaim{Basin: basin, Stream: "z", Epoch: 1, Bytes: 6, Drop: true, Armed: now.Add(-grace - time.Minute).UnixMilli()})
			key := putObject(t, st, "z", 0)
			for pass := range 2 {
				rep, err := reclaim.Reclaim(ctx, st, now.Add(time.Duration(pass)*time.Minute))
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("pass %d: %+v", pass, rep)
			}
			if objectExists(t, st, key) {
				t.Fatalf("stream z's object, due, still stored after two passes over %d entries sorted before it", before)
			}
		})
	}
}

// catalogRow is a catalog row [first, end) naming revision 0 of an
// object of the given size in epoch 1.
func catalogRow(first, end, size uint64) meta.Ref {
	return meta.Ref{FirstSeq: first, EndSeq: end, Settled: &meta.Settled{Epoch: 1, FirstSeq: first, Bytes: size}}
}
