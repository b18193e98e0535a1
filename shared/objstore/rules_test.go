package objstore_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/starlog/starlog/shared/objstore"
)

func TestValidateKey(t *testing.T) {
	for _, k := range []string{"a", "a/b", "chains/s1/standard/0000000001/00000000000000000042", "streams/b/id/1/0~2", ".a", "a/.b", "...", "a b"} {
		if err := objstore.ValidateKey(k); err != nil {
			t.Errorf("ValidateKey(%q) = %v, want nil", k, err)
		}
	}
	for _, k := range []string{"", "/", "/a", "a/", "a//b", ".", "..", "./a", "a/.", "a/../b", "a\x00", "\xff", strings.Repeat("x", objstore.MaxKeyLen+1)} {
		if err := objstore.ValidateKey(k); !errors.Is(err, objstore.ErrInvalidKey) {
			t.Errorf("ValidateKey(%q) = %v, want ErrInvalidKey", k, err)
		}
	}
}

func TestValidateBucketName(t *testing.T) {
	for _, n := range []string{"abc", "starlog-data", "my.bucket", "mybucket--usw2-az1--x-s3", strings.Repeat("a", 63)} {
		if err := objstore.ValidateBucketName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range []string{"", "ab", "Abc", "-abc", "abc-", ".abc", "a_b", "a/b", "..", ".starlog-staging", strings.Repeat("a", 64)} {
		if err := objstore.ValidateBucketName(n); err == nil {
			t.Errorf("%q accepted", n)
		}
	}
}

func TestParentKeys(t *testing.T) {
	if got := objstore.ParentKeys("a/b/c"); !slices.Equal(got, []string{"a", "a/b"}) {
		t.Fatalf("ParentKeys(a/b/c) = %q", got)
	}
	if got := objstore.ParentKeys("a"); len(got) != 0 {
		t.Fatalf("ParentKeys(a) = %q", got)
	}
}

func TestClampRange(t *testing.T) {
	cases := []struct {
		size, off, n, start, end int64
	}{
		{100, 0, -1, 0, 100},
		{100, 10, 20, 10, 30},
		{100, 90, 20, 90, 100},
		{100, 100, 5, 100, 100},
		{100, 500, -1, 100, 100},
		{100, 5, 0, 5, 5},
		{100, 1, 1 << 62, 1, 100},
		{0, 0, -1, 0, 0},
	}
	for _, c := range cases {
		s, e, err := objstore.ClampRange(c.size, c.off, c.n)
		if err != nil || s != c.start || e != c.end {
			t.Errorf("ClampRange(%d, %d, %d) = %d, %d, %v; want %d, %d", c.size, c.off, c.n, s, e, err, c.start, c.end)
		}
	}
	if _, _, err := objstore.ClampRange(100, -1, 5); err == nil {
		t.Error("negative offset accepted")
	}
}

func TestCheckParts(t *testing.T) {
	big := int64(objstore.MinPartSize)
	if err := objstore.CheckParts([]int64{big, big, 1}); err != nil {
		t.Error(err)
	}
	if err := objstore.CheckParts([]int64{1}); err != nil {
		t.Error(err)
	}
	if err := objstore.CheckParts([]int64{big, big - 1, 1}); !errors.Is(err, objstore.ErrPartTooSmall) {
		t.Errorf("small middle part: %v", err)
	}
	if err := objstore.CheckParts(nil); err == nil || errors.Is(err, objstore.ErrPartTooSmall) {
		t.Errorf("no parts: %v", err)
	}
	if err := objstore.CheckParts(make([]int64, objstore.MaxParts+1)); err == nil {
		t.Error("too many parts accepted")
	}
	if err := objstore.CheckCopyRange(10, 0, 10); err != nil {
		t.Error(err)
	}
	for _, r := range [][2]int64{{0, 11}, {10, 1}, {-1, 2}, {0, 0}, {5, 1 << 62}, {1, 1<<63 - 1}} {
		if err := objstore.CheckCopyRange(10, r[0], r[1]); err == nil {
			t.Errorf("copy range %v of 10 bytes accepted", r)
		}
	}
}

func TestOpNames(t *testing.T) {
	seen := map[string]bool{}
	for op := range objstore.NumOps {
		name := op.String()
		if name == "" || name == "unknown" || seen[name] {
			t.Fatalf("op %d has name %q", op, name)
		}
		seen[name] = true
	}
	if objstore.OpGet.Mutates() || objstore.OpHead.Mutates() || objstore.OpList.Mutates() || !objstore.OpPut.Mutates() || !objstore.OpMultipartComplete.Mutates() {
		t.Fatal("Mutates is wrong")
	}
}

// FuzzValidateKey checks that every accepted key splits into non-empty,
// non-dot segments that rejoin to the key, so a key maps to one path and
// can never climb out of its bucket.
func FuzzValidateKey(f *testing.F) {
	for _, k := range []string{"a", "a/b", "", "/", "a//b", "..", "a/../b", ".a/b.", "a\x00b", "\xff/a", "chains/x/standard/1/2"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := objstore.ValidateKey(key)
		if err != nil {
			if !errors.Is(err, objstore.ErrInvalidKey) {
				t.Fatalf("rejection without ErrInvalidKey: %v", err)
			}
			return
		}
		if len(key) == 0 || len(key) > objstore.MaxKeyLen || !utf8.ValidString(key) || strings.ContainsRune(key, 0) {
			t.Fatalf("accepted %q", key)
		}
		segs := strings.Split(key, "/")
		for _, s := range segs {
			if s == "" || s == "." || s == ".." {
				t.Fatalf("accepted %q with segment %q", key, s)
			}
		}
		if strings.Join(segs, "/") != key {
			t.Fatalf("%q does not round-trip", key)
		}
		for _, p := range objstore.ParentKeys(key) {
			if objstore.ValidateKey(p) != nil || !strings.HasPrefix(key, p+"/") {
				t.Fatalf("parent %q of %q", p, key)
			}
		}
	})
}

// FuzzClampRange checks the range arithmetic never leaves the object.
func FuzzClampRange(f *testing.F) {
	f.Add(int64(100), int64(0), int64(-1))
	f.Add(int64(100), int64(99), int64(1<<62))
	f.Add(int64(0), int64(0), int64(0))
	f.Add(int64(5), int64(-1), int64(1))
	f.Fuzz(func(t *testing.T, size, off, n int64) {
		if size < 0 {
			size = -(size + 1)
		}
		s, e, err := objstore.ClampRange(size, off, n)
		if err != nil {
			if off >= 0 {
				t.Fatalf("ClampRange(%d, %d, %d): %v", size, off, n, err)
			}
			return
		}
		if s < 0 || s > e || e > size {
			t.Fatalf("ClampRange(%d, %d, %d) = [%d, %d)", size, off, n, s, e)
		}
		if n >= 0 && e-s > n {
			t.Fatalf("ClampRange(%d, %d, %d) = [%d, %d) longer than n", size, off, n, s, e)
		}
		if off < size && s != off {
			t.Fatalf("ClampRange(%d, %d, %d) starts at %d", size, off, n, s)
		}
	})
}
