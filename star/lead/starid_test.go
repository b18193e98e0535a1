package lead

import "testing"

func TestValidateStarID(t *testing.T) {
	for _, ok := range []string{"a", "star-1", "ip-10-0-0-1"} {
		if err := ValidateStarID(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", "a-", "A", "a/b", "a:b", string(make([]byte, 64))} {
		if ValidateStarID(bad) == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	for in, want := range map[string]string{"Host.Example.COM": "host-example-com", "---": "star", "ip_10_0_0_1": "ip-10-0-0-1"} {
		if got := SanitizeStarID(in); got != want || ValidateStarID(got) != nil {
			t.Errorf("SanitizeStarID(%q) = %q, want %q", in, got, want)
		}
	}
}
