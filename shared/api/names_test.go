package api

import (
	"regexp"
	"strings"
	"testing"

	"pgregory.net/rapid"
)

var basinNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{6,46}[a-z0-9]$`)

func TestValidateBasinName(t *testing.T) {
	valid := []string{"abcdefgh", "my-basin-1", "01234567", strings.Repeat("a", 48), "a-------b"}
	invalid := []string{"", "abcdefg", strings.Repeat("a", 49), "-abcdefgh", "abcdefgh-", "0123456-", "ABCDEFGH", "abc_defgh", "abc.defgh", "abcdéfgh"}
	for _, n := range valid {
		if err := ValidateBasinName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range invalid {
		err := ValidateBasinName(n)
		if err == nil || err.Status != 422 || err.Code != CodeInvalid {
			t.Errorf("%q: got %v, want 422 invalid", n, err)
		}
	}
}

// The hand-written check agrees with the documented regular expression.
func TestValidateBasinNameMatchesRegexp(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.StringMatching(`[a-z0-9_A-Z.-]{0,50}`).Draw(t, "name")
		if got, want := ValidateBasinName(n) == nil, basinNameRE.MatchString(n); got != want {
			t.Fatalf("%q: valid=%v, regexp=%v", n, got, want)
		}
	})
}

func TestValidateStreamName(t *testing.T) {
	for _, n := range []string{"a", "a/b", "with space", "...", ".a", "a..", "ünïcode", strings.Repeat("x", 512)} {
		if err := ValidateStreamName(n); err != nil {
			t.Errorf("%q: %v", n, err)
		}
	}
	for _, n := range []string{"", strings.Repeat("x", 513), "a\x00b", "\xff", ".", ".."} {
		if err := ValidateStreamName(n); err == nil || err.Status != 422 {
			t.Errorf("%q: got %v, want 422", n, err)
		}
	}
}
