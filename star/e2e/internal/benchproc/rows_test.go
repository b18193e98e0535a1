package benchproc

import (
	"slices"
	"testing"
)

func TestRows(t *testing.T) {
	all := []string{"a", "b", "c"}
	if got, err := Rows(all, ""); err != nil || !slices.Equal(got, all) {
		t.Fatalf("no flag: %v, %v", got, err)
	}
	if got, err := Rows(all, "3, 1"); err != nil || !slices.Equal(got, []string{"c", "a"}) {
		t.Fatalf("3,1: %v, %v", got, err)
	}
	for _, bad := range []string{"0", "4", "x", "1,"} {
		if _, err := Rows(all, bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
