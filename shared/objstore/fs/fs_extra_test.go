package fs_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/objstore"
)

func TestNoLeftoversAndLayout(t *testing.T) {
	ctx := context.Background()
	st := newStore(t, "bucket-a")
	b := st.Bucket("bucket-a")
	if _, err := b.PutIfAbsent(ctx, "chains/s1/standard/0001/000000", []byte("slot")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutIfAbsent(ctx, "chains/s1/standard/0001/000000", []byte("lost")); !errors.Is(err, objstore.ErrExists) {
		t.Fatal(err)
	}
	if _, err := b.PutIfAbsent(ctx, "chains/s1/standard/0001/000000/x", []byte("nested")); !errors.Is(err, objstore.ErrKeyConflict) {
		t.Fatal(err)
	}
	mp, err := b.NewMultipart(ctx, "streams/b/s/1/0")
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.AddPart(ctx, []byte("part")); err != nil {
		t.Fatal(err)
	}
	if _, err := mp.Complete(ctx); err != nil {
		t.Fatal(err)
	}
	mp, err = b.NewMultipart(ctx, "streams/b/s/1/1")
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.AddPart(ctx, []byte("part")); err != nil {
		t.Fatal(err)
	}
	if err := mp.Abort(ctx); err != nil {
		t.Fatal(err)
	}
	requireEmptyStaging(t, st)

	// Keys are plain files at their path, readable by any tool.
	got, err := os.ReadFile(filepath.Join(st.Root(), "bucket-a", "chains", "s1", "standard", "0001", "000000"))
	if err != nil || string(got) != "slot" {
		t.Fatalf("file at key path: %q, %v", got, err)
	}
}

func TestSweepStaging(t *testing.T) {
	ctx := context.Background()
	st := newStore(t, "bucket-a")
	b := st.Bucket("bucket-a")
	mp, err := b.NewMultipart(ctx, "abandoned")
	if err != nil {
		t.Fatal(err)
	}
	if err := mp.AddPart(ctx, []byte("part")); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(st.Root(), ".starlog-staging", "bucket-a", "put-crashed")
	if err := os.WriteFile(stale, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	if err := st.SweepStaging(time.Hour); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("stale temp file survived the sweep: %v", err)
	}
	// The young upload is untouched and still completes.
	if _, err := mp.Complete(ctx); err != nil {
		t.Fatalf("young upload after sweep: %v", err)
	}
	if err := st.SweepStaging(0); err != nil {
		t.Fatal(err)
	}
	requireEmptyStaging(t, st)
}

func TestTwoStoresOneRoot(t *testing.T) {
	ctx := context.Background()
	a := newStore(t, "bucket-a")
	b := newStoreAt(t, a.Root())
	if _, err := a.Bucket("bucket-a").PutIfAbsent(ctx, "k", []byte("a")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Bucket("bucket-a").PutIfAbsent(ctx, "k", []byte("b")); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("second store: %v, want ErrExists", err)
	}
}
