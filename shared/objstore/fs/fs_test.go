package fs_test

import (
	"testing"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/fs"
	"github.com/starlog/starlog/shared/objstore/objstoretest"
)

func newStore(t testing.TB, buckets ...string) *fs.Store {
	t.Helper()
	return newStoreAt(t, t.TempDir(), buckets...)
}

func newStoreAt(t testing.TB, root string, buckets ...string) *fs.Store {
	t.Helper()
	s, err := fs.New(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range buckets {
		if err := s.CreateBucket(b); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestConformance(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) (objstore.Store, []string) {
		names := []string{"bucket-a", "bucket-b"}
		return newStore(t, names...), names
	})
}

// TestConformanceNamedTemps runs the suite on the fallback for file
// systems without O_TMPFILE: named temp files in staging.
func TestConformanceNamedTemps(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) (objstore.Store, []string) {
		names := []string{"bucket-a", "bucket-b"}
		s := newStore(t, names...)
		fs.NamedTemps(s)
		return s, names
	})
}
