package fs

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/objstore"
)

// FuzzKeyPath checks that every valid key maps to a path strictly inside
// its bucket's directory and maps back to the same key.
func FuzzKeyPath(f *testing.F) {
	for _, k := range []string{"a", "a/b/c", "..", "a/../../etc/passwd", "/etc", ".starlog-staging/x", "a\\b", "./a"} {
		f.Add(k)
	}
	s := &Store{root: "/srv/starlog"}
	b := s.Bucket("bucket-a").(*bucket)
	f.Fuzz(func(t *testing.T, key string) {
		if objstore.ValidateKey(key) != nil {
			return
		}
		p := b.path(key)
		rel, err := filepath.Rel(b.dir, p)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") || filepath.IsAbs(rel) {
			t.Fatalf("key %q maps to %q, outside %q", key, p, b.dir)
		}
		if filepath.ToSlash(rel) != key {
			t.Fatalf("key %q maps to %q, which maps back to %q", key, p, filepath.ToSlash(rel))
		}
		if strings.HasPrefix(p, filepath.Join(s.root, stagingDir)) {
			t.Fatalf("key %q maps into staging", key)
		}
	})
}
