package settle_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
)

// A deleted stream's reclamation (register, then passes that delete its
// rows, arm it, and a grace later delete its objects) crashed at every
// step and re-run ends as an uncrashed run: only the stream's identity
// row, tombstone and retired lease left, no object under its prefix, no reclaim entry.
func TestDeletedStreamCrashAtEveryStepConverges(t *testing.T) {
	e := newEnv(t, envOpts{})
	ctx := context.Background()
	now := retainedState(t, e)
	e.loglet.Close()
	snap := takeSnapshot(t, e)
	grace := e.st.Config.WithDefaults().ReadGrace
	pks := []string{meta.ReclaimPK, meta.ReclaimStreamsPK, meta.RefKey("r", 0).PK}
	stores := func(ms meta.Store, os objstore.Store) *settle.Stores {
		return &settle.Stores{Meta: ms, Objects: os, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: ms}, Config: e.st.Config, Logger: quietLog()}
	}
	run := func(st *settle.Stores) error {
		if err := reclaim.ForgetStream(ctx, st, basin, "r", "r", now); err != nil {
			return err
		}
		for _, at := range []time.Time{now, now.Add(time.Second), now.Add(grace + 2*time.Second)} {
			if _, err := reclaim.ReclaimStreams(ctx, st, at); err != nil {
				return err
			}
		}
		return nil
	}
	ms, os := snap.restore(t)
	if alive, _, err := (settle.MetaStreams{Meta: ms}).StreamState(ctx, "r"); err != nil || !alive {
		t.Fatalf("before: alive %v, %v", alive, err)
	}
	ref := &crasher{left: 1 << 30}
	if err := run(stores(crashMeta{ms, ref}, crashObjects{os, ref})); err != nil {
		t.Fatal(err)
	}
	want := dump(t, ms, os, pks)
	for _, l := range strings.Split(want, "\n") {
		retired := strings.HasPrefix(l, "row stream#r/lease ") && strings.Contains(l, `"deleted":true`)
		if !retired && !strings.HasPrefix(l, "row stream#r/deleted ") && !strings.HasPrefix(l, "row stream#r/meta ") && !strings.Contains(l, "/"+zones[0]+"/") &&
			(strings.HasPrefix(l, "row ") || strings.Contains(l, "obj "+settledB+"/streams/")) {
			t.Fatalf("reference run left %q:\n%s", l, want)
		}
	}
	if alive, _, err := (settle.MetaStreams{Meta: ms}).StreamState(ctx, "r"); err != nil || alive {
		t.Fatalf("after: alive %v, %v", alive, err)
	}
	steps := ref.steps
	t.Logf("reclaiming a deleted stream takes %d mutating steps", steps)
	for _, after := range []bool{false, true} {
		for k := 0; k < steps; k++ {
			ms, os := snap.restore(t)
			c := &crasher{left: k, after: after}
			if err := run(stores(crashMeta{ms, c}, crashObjects{os, c})); !errors.Is(err, errCrash) {
				t.Fatalf("crash at step %d (after=%v): run returned %v", k, after, err)
			}
			if err := run(stores(ms, os)); err != nil {
				t.Fatalf("re-run after a crash at step %d (after=%v): %v", k, after, err)
			}
			if got := dump(t, ms, os, pks); got != want {
				t.Fatalf("crash at step %d (after=%v) then re-run diverges:\n%s", k, after, diff(want, got))
			}
		}
	}
}
