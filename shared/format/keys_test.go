package format

import "testing"

func TestSettledKey(t *testing.T) {
	if got, want := SettledKey("b", "s", 3, 42, 0), "streams/b/s/00000000000000000003/00000000000000000042"; got != want {
		t.Fatalf("SettledKey = %q, want %q", got, want)
	}
	if got, want := SettledKey("b", "s", 3, 42, 7), "streams/b/s/00000000000000000003/00000000000000000042~00000000000000000007"; got != want {
		t.Fatalf("SettledKey = %q, want %q", got, want)
	}
}
