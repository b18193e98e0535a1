package clientcmd

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// A basin's quotas set at creation and changed by `star basins
// reconfigure`, flag by flag, read back by `star basins get`.
func TestBasinQuotaCommands(t *testing.T) {
	_, env := testEnv(t)
	mustRun(t, env, "", "basins", "create", "quota-basin", "--quota-stored-bytes", "1000000", "--quota-streams", "10")
	get := func() *api.BasinQuotas {
		var cfg api.BasinConfig
		if err := json.Unmarshal([]byte(mustRun(t, env, "", "basins", "get", "quota-basin")), &cfg); err != nil {
			t.Fatal(err)
		}
		return cfg.Quotas
	}
	if q := get(); q == nil || *q.StoredBytes != 1000000 || *q.Streams != 10 || q.AppendBytesPerSec != nil {
		t.Fatalf("created with %+v", q)
	}
	out := mustRun(t, env, "", "basins", "reconfigure", "quota-basin", "--quota-append-bytes-per-sec", "5000", "--quota-streams", "none")
	if !strings.Contains(out, `"append_bytes_per_sec": 5000`) {
		t.Fatalf("reconfigure printed %q", out)
	}
	if q := get(); q == nil || *q.StoredBytes != 1000000 || q.Streams != nil || *q.AppendBytesPerSec != 5000 {
		t.Fatalf("reconfigured to %+v", q)
	}
	for _, c := range []struct{ args []string }{
		{[]string{"--quota-streams", "-1"}},
		{[]string{"--quota-stored-bytes", "lots"}},
		{[]string{"--quota-stored-bytes", "9007199254740993"}},
		{nil},
	} {
		args := append([]string{"basins", "reconfigure", "quota-basin"}, c.args...)
		if _, _, err := run(t, env, "", args...); err == nil {
			t.Errorf("star %s: no error", strings.Join(args, " "))
		}
	}
	mustRun(t, env, "", "basins", "reconfigure", "quota-basin", "--quota-stored-bytes", "none", "--quota-append-bytes-per-sec", "none")
	if q := get(); q != nil {
		t.Fatalf("every quota removed, still %+v", q)
	}
	help := mustRun(t, env, "", "basins", "reconfigure", "--help")
	for _, w := range []string{"--quota-stored-bytes", "--quota-append-bytes-per-sec", "--quota-streams", "quota_exhausted", "reconfigure-basin"} {
		if !strings.Contains(help, w) {
			t.Errorf("--help does not mention %s", w)
		}
	}
}
