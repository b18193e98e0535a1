package clientcmd

import (
	"encoding/json"
	"strings"
	"testing"
)

// star status against a real star dev: the registry's one star, live,
// leading the stream just written, its two chains, the in-process
// auditor; --json is the endpoint's answer; without the internal key the
// command says what it needs.
func TestStatusAgainstStarDev(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs star dev")
	}
	const key = "clientcmd-status-internal-key-0123456789"
	t.Setenv(EnvInternalKey, key) // star dev takes it from its environment
	url, basin, token := startStarDev(t)
	env := map[string]string{EnvEndpoint: url, EnvBasin: basin, EnvToken: token}
	if _, _, err := run(t, env, "", "status"); err == nil || !strings.Contains(err.Error(), "internal key") {
		t.Fatalf("status without the internal key: %v", err)
	}
	env[EnvInternalKey] = key
	mustRun(t, env, "one\ntwo\n", "append", "st")

	out := mustRun(t, env, "", "status")
	lines := strings.Split(out, "\n")
	if len(lines) < 2 || !strings.HasPrefix(lines[0], "STAR") || !strings.Contains(lines[1], " live ") {
		t.Fatalf("status:\n%s", out)
	}
	star := strings.Fields(lines[1])[0]
	for _, want := range []string{star + "/standard", star + "/express", "quarantined streams: 0", "auditor (in the star): " + star + ":"} {
		if !strings.Contains(out, want) {
			t.Fatalf("status has no %q:\n%s", want, out)
		}
	}
	var st clusterStatus
	if err := json.Unmarshal([]byte(mustRun(t, env, "", "status", "--json")), &st); err != nil {
		t.Fatal(err)
	}
	if len(st.Stars) != 1 || st.Stars[0].Local == nil || st.Stars[0].Local.StreamsLed != 1 || len(st.Stars[0].Local.Chains) != 2 {
		t.Fatalf("status --json: %+v", st)
	}
}
