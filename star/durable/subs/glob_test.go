package subs

import (
	"strings"
	"testing"
	"time"
)

// globBacktrack is the obvious recursive matcher, the reference the
// linear one is checked against (exponential in "**" segments: only for
// small inputs).
func globBacktrack(pat, segs []string) bool {
	for len(pat) > 0 {
		switch pat[0] {
		case "**":
			for i := 0; i <= len(segs); i++ {
				if globBacktrack(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		case "*":
			if len(segs) == 0 || segs[0] == "" {
				return false
			}
		default:
			if len(segs) == 0 || segs[0] != pat[0] {
				return false
			}
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// FuzzGlobMatch checks the matcher against the reference on small inputs
// and bounds its time on any input.
func FuzzGlobMatch(f *testing.F) {
	for _, tc := range [][2]string{
		{"events/*", "events/a"}, {"**/log", "a/b/log"}, {"a/**/b/**/c", "a/x/b/y/z/c"},
		{"**/**/*", ""}, {"*", ""}, {"", ""}, {"a//b", "a//b"}, {"**", "a/b/c"},
		{strings.Repeat("**/", 9) + "x", strings.Repeat("a/", 40) + "b"},
	} {
		f.Add(tc[0], tc[1])
	}
	f.Fuzz(func(t *testing.T, pattern, path string) {
		if len(pattern) > maxPatternBytes || len(path) > 512 {
			return
		}
		pat, segs := strings.Split(pattern, "/"), strings.Split(path, "/")
		start := time.Now()
		got := globSegs(pat, segs)
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Fatalf("globMatch(%q, %q) took %v", pattern, path, d)
		}
		if strings.Count(pattern, "**") <= 4 && len(segs) <= 16 {
			if want := globBacktrack(pat, segs); got != want {
				t.Fatalf("globMatch(%q, %q) = %v, the reference says %v", pattern, path, got, want)
			}
		}
	})
}

// The case the hostile pass found: nine "**" segments against a
// 41-segment name that does not match cost 14.9 s of CPU with the
// backtracking matcher.
func TestGlobMatchIsLinear(t *testing.T) {
	pattern := strings.Repeat("**/", 9) + "x"
	path := strings.Repeat("a/", 40) + "b"
	start := time.Now()
	if globMatch(pattern, path) {
		t.Fatal("matched")
	}
	if d := time.Since(start); d > 50*time.Millisecond {
		t.Fatalf("took %v", d)
	}
}

// BenchmarkGlobMatchAtTheMaxima: the longest pattern the API accepts,
// all "**" segments but the last, against the longest name, all
// one-byte segments, that it does not match.
func BenchmarkGlobMatchAtTheMaxima(b *testing.B) {
	pattern := strings.Repeat("**/", maxPatternBytes/3-1) + "zz"
	path := strings.Repeat("a/", 255) + "b"
	if len(pattern) > maxPatternBytes || len(path) > 512 {
		b.Fatalf("pattern %d bytes, path %d", len(pattern), len(path))
	}
	for b.Loop() {
		if globMatch(pattern, path) {
			b.Fatal("matched")
		}
	}
}
