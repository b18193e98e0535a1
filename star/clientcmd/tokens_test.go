package clientcmd

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/starlog/starlog/shared/sdk"
)

// TestTokensAgainstStarDev issues a scoped token with the CLI, uses it with
// the CLI, lists tokens and revokes it, against a real star dev.
func TestTokensAgainstStarDev(t *testing.T) {
	t.Parallel() // its own star (or test server), port and client; it mostly waits
	if testing.Short() {
		t.Skip("builds and runs star dev")
	}
	url, basin, admin := startStarDev(t)
	env := map[string]string{EnvEndpoint: url, EnvBasin: basin, EnvToken: admin}

	out, errOut, err := run(t, env, "", "tokens", "issue", "cli-writer", "--basins-exact", basin,
		"--streams-prefix", "team/", "--op-groups", "stream=rw", "--auto-prefix-streams", "--expires-in", "1d")
	if err != nil {
		t.Fatalf("issue: %v\n%s", err, errOut)
	}
	tok := strings.TrimSpace(out)
	if tok == "" || strings.Contains(tok, "\n") || !strings.Contains(errOut, "shown this once") {
		t.Fatalf("issue printed %q, stderr %q", out, errOut)
	}
	mustRun(t, env, "", "tokens", "issue", "cli-reader", "--basins-prefix", "", "--streams-prefix", "", "--ops", "read,check-tail")

	// The scoped token appends and reads its streams, named without the
	// prefix; the admin sees the prefixed name.
	scoped := map[string]string{EnvEndpoint: url, EnvBasin: basin, EnvToken: tok}
	if out, errOut, err := run(t, scoped, "one\ntwo\n", "append", "events"); err != nil || out != "[0, 2) tail=2\n" {
		t.Fatalf("append with the scoped token: %q %q %v", out, errOut, err)
	}
	if out := mustRun(t, scoped, "", "read", "events"); out != "one\ntwo\n" {
		t.Fatalf("read with the scoped token: %q", out)
	}
	if out := mustRun(t, env, "", "streams", "list", "--prefix", "team/"); !strings.HasPrefix(out, "team/events") {
		t.Fatalf("the admin's listing: %q", out)
	}
	if _, _, err := run(t, scoped, "", "basins", "list"); err == nil || !strings.Contains(err.Error(), "permission_denied") {
		t.Fatalf("basins list with a stream token: %v", err)
	}

	out = mustRun(t, env, "", "tokens", "list", "--prefix", "cli-")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "cli-reader") || !strings.Contains(lines[0], "ops=read,check-tail") ||
		!strings.HasPrefix(lines[1], "cli-writer") || !strings.Contains(lines[1], "streams=team/*") ||
		!strings.Contains(lines[1], "groups=stream:rw") || !strings.Contains(lines[1], "auto-prefix") {
		t.Fatalf("list: %q", out)
	}
	out, errOut, err = run(t, env, "", "tokens", "list", "--limit", "1", "--json")
	var page sdk.ListAccessTokensResponse
	if err != nil || json.Unmarshal([]byte(out), &page) != nil || len(page.AccessTokens) != 1 ||
		page.AccessTokens[0].ID != "cli-reader" || !page.HasMore {
		t.Fatalf("list --limit 1 --json: %q %q %v", out, errOut, err)
	}
	out = mustRun(t, env, "", "tokens", "list", "--start-after", "cli-reader", "--json")
	page = sdk.ListAccessTokensResponse{}
	if json.Unmarshal([]byte(out), &page) != nil || len(page.AccessTokens) != 1 || page.AccessTokens[0].ID != "cli-writer" ||
		page.AccessTokens[0].ExpiresAt == nil || time.Until(*page.AccessTokens[0].ExpiresAt) < 23*time.Hour {
		t.Fatalf("list --start-after: %q", out)
	}

	if out := mustRun(t, env, "", "tokens", "revoke", "cli-writer"); out != "revoked access token cli-writer\n" {
		t.Fatalf("revoke: %q", out)
	}
	if _, _, err := run(t, scoped, "", "check-tail", "events"); err == nil || !strings.Contains(err.Error(), "authn") {
		t.Fatalf("check-tail with the revoked token: %v", err)
	}
	if _, _, err := run(t, env, "", "tokens", "revoke", "cli-writer"); err == nil || !strings.Contains(err.Error(), "access_token_not_found") {
		t.Fatalf("revoke twice: %v", err)
	}
}

// TestTokensIssueFlags: the scope flags build S2's request, and bad ones
// fail before any request (no server is running here).
func TestTokensIssueFlags(t *testing.T) {
	env := map[string]string{EnvEndpoint: "http://127.0.0.1:1"}
	for _, bad := range [][]string{
		{"--basins-exact", "b", "--basins-prefix", "x", "--ops", "read"},
		{"--streams-exact", "", "--ops", "read"},
		{"--op-groups", "stream=rx"},
		{"--op-groups", "cluster=r"},
		{"--ops", "read,launch"},
		{"--basins-prefix", ""},
		{"--ops", "read", "--auto-prefix-streams", "--streams-exact", "s"},
		{"--ops", "read", "--expires-in", "soon"},
		{"--ops", "read", "--expires-in", "1d", "--expires-at", "2030-01-01T00:00:00Z"},
		{"--ops", "read", "--expires-at", "tomorrow"},
	} {
		args := append([]string{"tokens", "issue", "t"}, bad...)
		_, _, err := run(t, env, "", args...)
		if err == nil || strings.Contains(err.Error(), "connection refused") {
			t.Errorf("%v: %v, want a flag error", bad, err)
		}
	}

	var f scopeFlags
	cmd := tokensFlagSet(&f)
	if err := cmd.Parse([]string{"--basins-exact", "b1", "--streams-prefix", "", "--access-tokens-prefix", "ops-",
		"--op-groups", "account=r,stream=rw", "--ops", "trim,fence", "--expires-in", "2w"}); err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	req, err := f.request(cmd, "ops-1", now)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(req)
	want := `{"id":"ops-1","expires_at":"2026-01-15T00:00:00Z","auto_prefix_streams":false,"scope":{"basins":{"exact":"b1"},` +
		`"streams":{"prefix":""},"access_tokens":{"prefix":"ops-"},"op_groups":{"account":{"read":true},"stream":{"read":true,"write":true}},"ops":["trim","fence"]}}`
	if string(b) != want {
		t.Fatalf("request:\n%s\nwant\n%s", b, want)
	}
}

func tokensFlagSet(f *scopeFlags) *pflag.FlagSet {
	fs := pflag.NewFlagSet("issue", pflag.ContinueOnError)
	f.register(fs)
	return fs
}
