package settle_test

import (
	"context"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/reclaim"
)

// dropPending sums the bytes of a stream's trimmed objects still waiting
// out the grace (reclaim entries marked Drop).
func dropPending(t testing.TB, e *env, id string) uint64 {
	t.Helper()
	pg, err := e.meta.Query(context.Background(), meta.Query{PK: meta.ReclaimPK, From: id + "/", To: id + "/~"})
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, it := range pg.Items {
		var rc meta.Reclaim
		if err := meta.Decode(it.Val, &rc); err != nil {
			t.Fatal(err)
		}
		if rc.Drop {
			n += rc.Bytes
		}
	}
	return n
}

// Compressed time: a hot, a slow and an idle stream, settled every two
// simulated minutes (grace 5 min) with a retention of a few rounds, the
// janitor's passes after each round. Every round, measured from the
// object store and the metastore: a stream stores at most its retained
// bytes plus one output cap (superseded revisions and trimmed objects
// waiting out the grace together); every retained record reads back; and
// retention, deferred for the bound, lags by at most two graces and a
// round.
func TestLifecycleCompressed(t *testing.T) {
	cfg := defaultSettleConfig(t)
	e := newEnv(t, envOpts{settle: cfg})
	ctx := context.Background()
	now := time.Now().Add(time.Hour)
	const rounds, keep = 36, 6 // retention: the records of the last 6 rounds
	var starts []time.Time
	var worst [3]uint64
	ids := []string{"hot", "slow", "idle"}
	for i := range rounds {
		starts = append(starts, time.Now())
		e.write("hot", 4, 10, 500) // about 20 KiB a round: crosses the 16 KiB trigger
		e.write("slow", 1, 2, 400)
		if i < 3 {
			e.write("idle", 1, 3, 300)
		}
		e.waitAbsorbed()
		// Distinct record timestamps per round: the next round starts (and
		// stamps) in a later millisecond than this round's records.
		stamped := time.Now().UnixMilli()
		poll.Until(t, time.Second, "a new millisecond", func() bool { return time.Now().UnixMilli() > stamped })
		now = now.Add(2 * time.Minute)
		if _, err := settleAll(ctx, e.st, now, true); err != nil {
			t.Fatal(err)
		}
		var before time.Time
		if i >= keep {
			before = starts[i-keep]
		}
		for _, id := range ids {
			if _, err := reclaim.TrimStream(ctx, e.st, id, basin, before); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := reclaim.Reclaim(ctx, e.st, now); err != nil {
			t.Fatal(err)
		}
		for j, id := range ids {
			stored, retained, objects := storage(t, e, id)
			drop := dropPending(t, e, id)
			over := int64(stored) - int64(retained)
			if bound := retained + retained/10 + cfg.OutputCap; stored > bound {
				t.Errorf("round %d, %s: %d B stored in %d objects > 1.1 × retained %d B + cap %d B by %d B (%d B trimmed, waiting)", i, id, stored, objects, retained, cfg.OutputCap, stored-bound, drop)
			}
			worst[j] = max(worst[j], uint64(max(over, 0)))
			if i%6 == 5 {
				t.Logf("round %2d %-4s stored %6d B in %2d objects, retained %6d B, trimmed waiting %6d B", i, id, stored, objects, retained, drop)
			}
			e.mu.Lock()
			end := uint64(len(e.acked[id]))
			e.mu.Unlock()
			if _, err := e.readFrom(ctx, e.rd, id, end); err != nil {
				t.Fatalf("round %d: read %s: %v", i, id, err)
			}
		}
	}
	t.Logf("most bytes stored above retained at once (superseded and trimmed, waiting): hot %d, slow %d, idle %d (output cap %d)", worst[0], worst[1], worst[2], cfg.OutputCap)
}
