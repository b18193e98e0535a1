package testsvc

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/starlog/starlog/shared/meta/sqlite"
)

// SQLite opens a fresh embedded metastore for a test. The file goes on
// tmpfs (/dev/shm) when there is one: the same SQLite, WAL and locking, but
// a commit's fsync costs nothing, so randomized tests can run thousands of
// CAS races in seconds.
func SQLite(tb testing.TB) *sqlite.Store {
	tb.Helper()
	dir := ""
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		d, err := os.MkdirTemp("/dev/shm", "starlog-test-")
		if err == nil {
			dir = d
			tb.Cleanup(func() { os.RemoveAll(d) })
		}
	}
	if dir == "" {
		dir = tb.TempDir()
	}
	s, err := sqlite.Open(context.Background(), filepath.Join(dir, "meta.db"))
	if err != nil {
		tb.Fatalf("testsvc: open sqlite metastore: %v", err)
	}
	tb.Cleanup(func() { s.Close() })
	return s
}
