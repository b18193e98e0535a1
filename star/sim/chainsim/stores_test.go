package chainsim

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/metatest"
	"github.com/starlog/starlog/shared/objstore"
)

// The simulated stores must keep the contracts the real backends keep, or
// the sim tests a chain against a world that does not exist: the
// metastore runs the backends' conformance suite, served inline.
func TestSimMetastoreConformance(t *testing.T) {
	metatest.Run(t, func(t *testing.T) meta.Store {
		s := newDirect(1)
		return metaView(s, &actor{name: "t"})
	})
}

// The object store keeps create-once, ranged reads and deletes as S3 does
// (the objstoretest suite needs multipart, which the chain never uses).
func TestSimObjectStore(t *testing.T) {
	ctx := context.Background()
	s := newDirect(2)
	st := storeView{s, &actor{name: "t"}}
	b := st.Bucket("b0")
	if _, err := b.PutIfAbsent(ctx, "a/k", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutIfAbsent(ctx, "a/k", []byte("other")); !errors.Is(err, objstore.ErrExists) {
		t.Fatalf("second create: %v, want ErrExists", err)
	}
	for _, tc := range []struct {
		off, n int64
		want   string
	}{{0, -1, "hello"}, {1, 3, "ell"}, {3, 10, "lo"}, {5, 1, ""}, {9, 1, ""}} {
		got, err := b.Get(ctx, "a/k", tc.off, tc.n)
		if err != nil || string(got) != tc.want {
			t.Errorf("Get(%d,%d) = %q, %v; want %q", tc.off, tc.n, got, err, tc.want)
		}
	}
	if _, err := st.Bucket("b1").Get(ctx, "a/k", 0, -1); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("other bucket: %v, want ErrNotFound", err)
	}
	if _, err := st.Bucket("nope").Head(ctx, "a/k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("missing bucket: %v, want ErrNotFound", err)
	}
	got, _ := b.Get(ctx, "a/k", 0, -1)
	got[0] = 'X' // a caller's buffer is its own
	if again, _ := b.Get(ctx, "a/k", 0, -1); !bytes.Equal(again, []byte("hello")) {
		t.Fatalf("stored bytes aliased: %q", again)
	}
	if err := b.DeleteMany(ctx, []string{"a/k", "a/missing"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Head(ctx, "a/k"); !errors.Is(err, objstore.ErrNotFound) {
		t.Fatalf("after delete: %v", err)
	}
	if _, err := b.PutIfAbsent(ctx, "a//bad", nil); !errors.Is(err, objstore.ErrInvalidKey) {
		t.Fatalf("bad key: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := b.PutIfAbsent(cctx, "a/k2", nil); !objstore.IsIndefinite(err) {
		t.Fatalf("put on a canceled context: %v, want indefinite", err)
	}
}
