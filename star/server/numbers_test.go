package server_test

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// A retention age or delete_on_empty min age of any u64 is taken through
// every door (a stream's create, PATCH and s2-stream-config, a basin's
// default_stream_config) and read back as the client gave it; the
// janitor applies one past api.MaxDurationSecs as that maximum
// (shared/auditjob's TestRetentionHugeAgeKeepsEveryRecord). −1 and 2^64
// are 400 bad_json, 0 is 422 as before.
func TestRetentionNumbersTakenAsGiven(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	ages := []uint64{1, 604800, api.MaxDurationSecs, api.MaxDurationSecs + 1, 293 * 365 * 24 * 3600, 1000 * 365 * 24 * 3600, 1<<63 - 1, 1<<64 - 1}
	cfgOf := func(r resp) api.StreamConfig {
		t.Helper()
		var c api.StreamConfig
		if err := json.Unmarshal(r.body, &c); err != nil {
			t.Fatalf("%s: %v", r, err)
		}
		return c
	}
	for i, age := range ages {
		basin := fmt.Sprintf("numbers-basin-%d", i)
		cfg := fmt.Sprintf(`{"retention_policy":{"age":%d},"delete_on_empty":{"min_age_secs":%d}}`, age, age)
		want(t, e.call("POST", "basins", []byte(`{"basin":"`+basin+`","config":{"create_stream_on_append":true,"default_stream_config":`+cfg+`}}`)), 201, "")
		want(t, e.stream(basin, "POST", "streams", []byte(`{"stream":"own","config":`+cfg+`}`)), 201, "")
		want(t, e.stream(basin, "POST", "streams", []byte(`{"stream":"inherits"}`)), 201, "")
		want(t, e.stream(basin, "POST", "streams", []byte(`{"stream":"patched"}`)), 201, "")
		want(t, e.stream(basin, "PATCH", "streams/patched", []byte(cfg)), 200, "")
		want(t, e.appendJSON(basin, "header", `{"records":[{"body":"x"}]}`, "s2-stream-config", cfg), 200, "")
		for _, s := range []string{"own", "inherits", "patched", "header"} {
			c := cfgOf(e.stream(basin, "GET", "streams/"+s, nil))
			if c.RetentionPolicy == nil || c.RetentionPolicy.AgeSecs != age || c.DeleteOnEmpty == nil || c.DeleteOnEmpty.MinAgeSecs != age {
				t.Errorf("stream %s/%s: config %s, want age and min age %d as given", basin, s, e.stream(basin, "GET", "streams/"+s, nil).body, age)
			}
		}
	}
	for _, bad := range []string{"-1", "18446744073709551616", "1e3", "1.5"} {
		want(t, e.stream("numbers-basin-0", "POST", "streams", []byte(`{"stream":"bad","config":{"retention_policy":{"age":`+bad+`}}}`)), 400, api.CodeBadJSON)
		want(t, e.stream("numbers-basin-0", "POST", "streams", []byte(`{"stream":"bad","config":{"delete_on_empty":{"min_age_secs":`+bad+`}}}`)), 400, api.CodeBadJSON)
	}
}
