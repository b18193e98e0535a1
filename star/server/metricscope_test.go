package server_test

import (
	"encoding/json"
	"slices"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// The account's active-basins metric names only the basins the token's
// basin set holds: a token scoped to one basin, even one that does not
// exist, learns no other basin's name.
func TestActiveBasinsWithinTheTokensScope(t *testing.T) {
	t.Parallel()
	e := newEnv(t, withAuth)
	for _, b := range []string{"scoped-aaa", "scoped-aaab", "other-bbb"} {
		want(t, e.call("POST", "basins", jsonBody(map[string]any{"basin": b}), bearer(testAdmin)...), 201, "")
		want(t, e.stream(b, "PUT", "streams/s", []byte(`{}`), bearer(testAdmin)...), 201, "")
	}
	active := func(tok string) []string {
		t.Helper()
		r := e.call("GET", "/v1/metrics?set=active-basins", nil, bearer(tok)...)
		want(t, r, 200, "")
		var out api.MetricSetResponse
		if err := json.Unmarshal(r.body, &out); err != nil || len(out.Values) != 1 || out.Values[0].Label == nil {
			t.Fatalf("active-basins: %s", r)
		}
		v := out.Values[0].Label.Values
		slices.Sort(v)
		return v
	}
	scoped := func(basins map[string]string) string {
		return e.issue(map[string]any{"id": "m-" + basins["exact"] + basins["prefix"] + "x",
			"scope": map[string]any{"basins": basins, "ops": []string{"account-metrics"}}})
	}
	for name, tc := range map[string]struct {
		tok  string
		want []string
	}{
		"admin":            {testAdmin, []string{"other-bbb", "scoped-aaa", "scoped-aaab"}},
		"exact scoped-aaa": {scoped(map[string]string{"exact": "scoped-aaa"}), []string{"scoped-aaa"}},
		"prefix scoped-":   {scoped(map[string]string{"prefix": "scoped-"}), []string{"scoped-aaa", "scoped-aaab"}},
		"exact, no basin":  {scoped(map[string]string{"exact": "nonexistent"}), []string{}},
	} {
		if got := active(tc.tok); !slices.Equal(got, tc.want) {
			t.Errorf("%s: active-basins %v, want %v", name, got, tc.want)
		}
	}
}
