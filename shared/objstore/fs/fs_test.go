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
	return openStoreAt(t, root, fs.Options{}, buckets...)
}

// newJournaled is a store with a journal on a new folder; it is closed
// when the test ends.
func newJournaled(t testing.TB, buckets ...string) *fs.Store {
	t.Helper()
	return openStoreAt(t, t.TempDir(), fs.Options{Journal: true}, buckets...)
}

func openStoreAt(t testing.TB, root string, o fs.Options, buckets ...string) *fs.Store {
	t.Helper()
	s, err := fs.Open(root, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
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

// TestConformanceJournal runs the suite on a journaled store: small PUTs
// go through the journal, larger ones and multipart uploads direct.
func TestConformanceJournal(t *testing.T) {
	objstoretest.Run(t, func(t *testing.T) (objstore.Store, []string) {
		names := []string{"bucket-a", "bucket-b"}
		return newJournaled(t, names...), names
	})
}
