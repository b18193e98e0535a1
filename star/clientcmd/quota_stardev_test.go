package clientcmd

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/starlog/starlog/shared/api"
)

// The quota commands against a real star: set by `star basins
// reconfigure`, read back by `star basins get`, and enforced: a stream
// create and a create-on-append past the stream quota, and an append
// past the append quota, fail with S2's quota_exhausted; removed, they
// pass.
func TestQuotasAgainstStarDev(t *testing.T) {
	t.Parallel() // its own star dev, port and client; it mostly waits
	if testing.Short() {
		t.Skip("builds and runs star dev")
	}
	url, basin, token := startStarDev(t)
	env := map[string]string{EnvEndpoint: url, EnvBasin: basin, EnvToken: token}
	mustRun(t, env, "", "streams", "create", "q1")
	mustRun(t, env, "", "basins", "reconfigure", basin, "--quota-streams", "1", "--quota-append-bytes-per-sec", "0")
	var cfg api.BasinConfig
	if err := json.Unmarshal([]byte(mustRun(t, env, "", "basins", "get", basin)), &cfg); err != nil || cfg.Quotas == nil ||
		*cfg.Quotas.Streams != 1 || *cfg.Quotas.AppendBytesPerSec != 0 || cfg.Quotas.StoredBytes != nil {
		t.Fatalf("basins get: %+v (%v)", cfg.Quotas, err)
	}
	refused := func(stdin string, args ...string) {
		t.Helper()
		if _, _, err := run(t, env, stdin, args...); err == nil || !strings.Contains(err.Error(), api.CodeQuotaExhausted) {
			t.Fatalf("star %s: %v, want quota_exhausted", strings.Join(args, " "), err)
		}
	}
	refused("", "streams", "create", "q2")
	refused("one\n", "append", "q1")
	refused("one\n", "append", "auto-created") // the dev basin creates on append
	mustRun(t, env, "", "basins", "reconfigure", basin, "--quota-streams", "none", "--quota-append-bytes-per-sec", "none")
	mustRun(t, env, "", "streams", "create", "q2")
	if out := mustRun(t, env, "one\n", "append", "q1"); out != "[0, 1) tail=1\n" {
		t.Fatalf("append after the quotas were removed: %q", out)
	}
}
