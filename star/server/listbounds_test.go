package server_test

import (
	"net/url"
	"strings"
	"testing"
)

// A list parameter longer than any name it could match (S2's limits: a
// basin name 48 bytes, a stream name 512, a token id 96) is 400, never a
// 5xx from the metastore's key limits; a malformed escape is 400 on every
// listing.
func TestListParametersAreBounded(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	want(t, e.call("POST", "basins", jsonBody(map[string]any{"basin": "listbounds"}), bearer(testAdmin)...), 201, "")
	long := func(n int) string { return url.QueryEscape(strings.Repeat("a", n)) }
	for _, tc := range []struct {
		path string
		list func(path string) resp
		max  int
	}{
		{"basins", func(p string) resp { return e.call("GET", p, nil, bearer(testAdmin)...) }, 48},
		{"streams", func(p string) resp { return e.stream("listbounds", "GET", p, nil, bearer(testAdmin)...) }, 512},
		{"access-tokens", func(p string) resp { return e.call("GET", p, nil, bearer(testAdmin)...) }, 96},
	} {
		for _, param := range []string{"prefix", "start_after"} {
			want(t, tc.list(tc.path+"?"+param+"="+long(tc.max)), 200, "")
			for _, n := range []int{tc.max + 1, 1100, 4096} {
				if r := tc.list(tc.path + "?" + param + "=" + long(n)); r.status != 400 {
					t.Errorf("%s %s of %d bytes: %s, want 400", tc.path, param, n, r)
				}
			}
		}
		if r := tc.list(tc.path + "?prefix=%ZZ"); r.status != 400 {
			t.Errorf("%s with a malformed escape: %s, want 400", tc.path, r)
		}
	}
}
