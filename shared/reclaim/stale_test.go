package reclaim_test

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
)

const (
	settledB = "std"
	basin    = "b1"
)

func quietLog() *slog.Logger {
	if testing.Verbose() && os.Getenv("SETTLE_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

// bareStores are the auditor's stores over an empty metastore and settled
// bucket, for tests that write the rows they need by hand.
func bareStores(t testing.TB) *settle.Stores {
	t.Helper()
	objs, err := mem.New(settledB)
	if err != nil {
		t.Fatal(err)
	}
	ms := testsvc.SQLite(t)
	return &settle.Stores{Meta: ms, Objects: objs, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: ms},
		Config: settle.Config{ReadGrace: 5 * time.Minute}, Logger: quietLog()}
}

func putEntry(t testing.TB, st *settle.Stores, rc meta.Reclaim) {
	t.Helper()
	k := meta.ReclaimKey(rc.Stream, rc.Epoch, rc.First, rc.Rev)
	if _, err := st.Meta.Put(context.Background(), k.PK, k.SK, meta.Encode(rc), meta.Always()); err != nil {
		t.Fatal(err)
	}
}

func putObject(t testing.TB, st *settle.Stores, id string, rev uint64) string {
	t.Helper()
	key := format.SettledKey(basin, id, 1, 0, rev)
	if _, err := st.Objects.Bucket(settledB).PutIfAbsent(context.Background(), key, []byte("object")); err != nil {
		t.Fatal(err)
	}
	return key
}

func objectExists(t testing.TB, st *settle.Stores, key string) bool {
	t.Helper()
	_, err := st.Objects.Bucket(settledB).Head(context.Background(), key)
	if errors.Is(err, objstore.ErrNotFound) {
		return false
	}
	if err != nil {
		t.Fatal(err)
	}
	return true
}

// A stale extension's revision whose tail row a trim deleted before the
// reclaim saw the stale decision (retention runs before the reclaim in
// each janitor pass): the entry of the trimmed revision (extend, drop, no
// row) goes with its object a grace later, and takes the next revision
// with it when no entry names that one (nothing committed it). One with
// an entry (a committed revision, trimmed in its turn) is left to it.
func TestReclaimDeletesAStaleExtensionsRevisionAfterATrim(t *testing.T) {
	st := bareStores(t)
	ctx := context.Background()
	now := time.Now()
	grace := st.Config.ReadGrace
	var keys = map[string][2]string{}
	for _, id := range []string{"y", "z"} {
		putEntry(t, st, meta.Reclaim{Basin: basin, Stream: id, Epoch: 1, Rev: 0, Bytes: 6, Extend: true, Drop: true})
		keys[id] = [2]string{putObject(t, st, id, 0), putObject(t, st, id, 1)}
	}
	if _, err := reclaim.Reclaim(ctx, st, now); err != nil {
		t.Fatal(err)
	}
	// z's revision 1 was committed and trimmed since: its own entry.
	putEntry(t, st, meta.Reclaim{Basin: basin, Stream: "z", Epoch: 1, Rev: 1, Bytes: 6, Drop: true})
	if _, err := reclaim.Reclaim(ctx, st, now.Add(grace+time.Second)); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[string][2]bool{"y": {false, false}, "z": {false, true}} {
		for rev, key := range keys[id] {
			if got := objectExists(t, st, key); got != want[rev] {
				t.Errorf("stream %s revision %d: stored %v, want %v", id, rev, got, want[rev])
			}
		}
	}
}
