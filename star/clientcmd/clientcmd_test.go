package clientcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/sdk/sdktest"
)

const testBasin = "cli-basin"

// run executes the client commands with args, stdin and environment, and
// returns stdout, stderr and the error.
func run(t *testing.T, env map[string]string, stdin string, args ...string) (string, string, error) {
	t.Helper()
	root := &cobra.Command{Use: "star", SilenceUsage: true, SilenceErrors: true}
	root.AddCommand(newCommands(func(k string) (string, bool) {
		v, ok := env[k]
		return v, ok
	})...)
	var out, errOut bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&errOut)
	root.SetIn(strings.NewReader(stdin))
	root.SetArgs(args)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	err := root.ExecuteContext(ctx)
	return out.String(), errOut.String(), err
}

// mustRun is run that fails the test on an error.
func mustRun(t *testing.T, env map[string]string, stdin string, args ...string) string {
	t.Helper()
	out, errOut, err := run(t, env, stdin, args...)
	if err != nil {
		t.Fatalf("star %s: %v\nstderr: %s", strings.Join(args, " "), err, errOut)
	}
	return out
}

// testEnv starts a server with a basin and returns the environment that
// points the commands at it.
func testEnv(t *testing.T) (*sdktest.Server, map[string]string) {
	t.Helper()
	srv := sdktest.New(sdktest.Options{HeartbeatInterval: 50 * time.Millisecond})
	t.Cleanup(srv.Close)
	env := map[string]string{EnvAccountEndpoint: srv.URL, EnvBasin: testBasin}
	mustRun(t, env, "", "basins", "create", testBasin)
	return srv, env
}

func TestBasinsCommands(t *testing.T) {
	_, env := testEnv(t)
	if out := mustRun(t, env, "", "basins", "create", "other-basin", "--create-stream-on-append", "--storage-class", "express"); out != "created basin other-basin\n" {
		t.Fatalf("create: %q", out)
	}
	out := mustRun(t, env, "", "basins", "list")
	if !strings.Contains(out, "cli-basin") || !strings.Contains(out, "other-basin") {
		t.Fatalf("list: %q", out)
	}
	out = mustRun(t, env, "", "basins", "list", "--prefix", "oth", "--json")
	var infos []api.BasinInfo
	if err := json.Unmarshal([]byte(out), &infos); err != nil || len(infos) != 1 || infos[0].Name != "other-basin" {
		t.Fatalf("list --json: %q (%v)", out, err)
	}
	out = mustRun(t, env, "", "basins", "get", "other-basin")
	var cfg api.BasinConfig
	if err := json.Unmarshal([]byte(out), &cfg); err != nil || !cfg.CreateStreamOnAppend ||
		cfg.DefaultStreamConfig == nil || *cfg.DefaultStreamConfig.StorageClass != api.StorageExpress {
		t.Fatalf("get: %q (%v)", out, err)
	}
	mustRun(t, env, "", "basins", "delete", "other-basin")
	if _, _, err := run(t, env, "", "basins", "get", "other-basin"); err == nil || !strings.Contains(err.Error(), "basin_not_found") {
		t.Fatalf("get after delete: %v", err)
	}
}

func TestStreamsCommands(t *testing.T) {
	_, env := testEnv(t)
	mustRun(t, env, "", "streams", "create", "s1", "--storage-class", "express", "--retention", "1d", "--timestamping", "arrival")
	mustRun(t, env, "", "streams", "create", "s2")
	var sc api.StreamConfig
	out := mustRun(t, env, "", "streams", "get", "s1")
	if err := json.Unmarshal([]byte(out), &sc); err != nil || *sc.StorageClass != api.StorageExpress ||
		sc.RetentionPolicy.AgeSecs != 86400 || *sc.Timestamping.Mode != api.Arrival {
		t.Fatalf("get: %q (%v)", out, err)
	}
	out = mustRun(t, env, "", "streams", "config", "s1", "--retention", "infinite", "--uncapped")
	sc = api.StreamConfig{}
	if err := json.Unmarshal([]byte(out), &sc); err != nil || !sc.RetentionPolicy.Infinite || !*sc.Timestamping.Uncapped ||
		*sc.Timestamping.Mode != api.Arrival || *sc.StorageClass != api.StorageExpress {
		t.Fatalf("config: %q (%v)", out, err)
	}
	if out2 := mustRun(t, env, "", "streams", "config", "s1"); out2 != out {
		t.Fatalf("config without flags printed %q, want %q", out2, out)
	}
	out = mustRun(t, env, "", "streams", "list")
	if lines := strings.Split(strings.TrimSpace(out), "\n"); len(lines) != 2 || !strings.HasPrefix(lines[0], "s1 ") {
		t.Fatalf("list: %q", out)
	}
	mustRun(t, env, "", "streams", "delete", "s2")
	if out := mustRun(t, env, "", "streams", "list", "--json"); strings.Contains(out, `"s2"`) {
		t.Fatalf("list after delete: %q", out)
	}
	for _, bad := range [][]string{
		{"streams", "create", "x", "--storage-class", "gold"},
		{"streams", "create", "x", "--retention", "0s"},
		{"streams", "create", "x", "--timestamping", "whenever"},
	} {
		if _, _, err := run(t, env, "", bad...); err == nil {
			t.Errorf("%v: no error", bad)
		}
	}
}

func TestConnectionFlags(t *testing.T) {
	srv, _ := testEnv(t)
	mustRun(t, map[string]string{EnvEndpoint: srv.URL, EnvAccountEndpoint: "http://127.0.0.1:1"}, "", "streams", "create", "s", "--basin", testBasin)
	mustRun(t, nil, "", "check-tail", "s", "--endpoint", srv.URL, "--basin", testBasin)
	_, _, err := run(t, map[string]string{EnvAccountEndpoint: srv.URL}, "", "check-tail", "s")
	if err == nil || !strings.Contains(err.Error(), "no basin") {
		t.Fatalf("without a basin: %v", err)
	}
	_, _, err = run(t, map[string]string{EnvAccountEndpoint: srv.URL, EnvBasin: testBasin}, "", "tail", "s", "--compression", "lz4")
	if err == nil || !strings.Contains(err.Error(), "compression") {
		t.Fatalf("bad compression: %v", err)
	}
}

func TestAppendReadTail(t *testing.T) {
	srv, env := testEnv(t)
	mustRun(t, env, "", "streams", "create", "s")
	out, errOut, err := run(t, env, "alpha\nbeta\r\n\ngamma", "append", "s")
	if err != nil {
		t.Fatalf("append: %v (%s)", err, errOut)
	}
	if out != "[0, 4) tail=4\n" || errOut != "appended 4 records\n" {
		t.Fatalf("append printed %q / %q", out, errOut)
	}
	if got := len(srv.Records(testBasin, "s")); got != 4 {
		t.Fatalf("stream has %d records", got)
	}
	if out := mustRun(t, env, "", "read", "s"); out != "alpha\nbeta\n\ngamma\n" {
		t.Fatalf("read: %q", out)
	}
	out = mustRun(t, env, "", "read", "s", "--seq-num", "1", "--count", "1", "--format", "json")
	var rec recordJSON
	if err := json.Unmarshal([]byte(out), &rec); err != nil || rec.SeqNum != 1 || rec.Body != "beta" || rec.Timestamp == 0 {
		t.Fatalf("read json: %q (%v)", out, err)
	}
	if out := mustRun(t, env, "", "read", "s", "--tail-offset", "1", "--format", "json-base64"); !strings.Contains(out, `"body":"Z2FtbWE="`) {
		t.Fatalf("read json-base64: %q", out)
	}
	if out := mustRun(t, env, "", "check-tail", "s"); !strings.HasPrefix(out, "4\t") {
		t.Fatalf("check-tail: %q", out)
	}
	out, errOut, err = run(t, env, "", "read", "s", "--seq-num", "10")
	if err != nil || out != "" || !strings.Contains(errOut, "nothing to read: the tail is at seq num 4") {
		t.Fatalf("read past the tail: %q %q %v", out, errOut, err)
	}
	if _, _, err := run(t, env, "", "read", "s", "--seq-num", "1", "--timestamp", "5"); err == nil {
		t.Fatal("two starts accepted")
	}

	// A conditional append that does not match stops with the next seq num.
	_, _, err = run(t, env, "delta\n", "append", "s", "--match-seq-num", "2")
	if err == nil || !strings.Contains(err.Error(), "next seq num is 4") {
		t.Fatalf("stale --match-seq-num: %v", err)
	}
	out = mustRun(t, env, "delta\nepsilon\n", "append", "s", "--match-seq-num", "4", "--json")
	var ack api.AppendAck
	if err := json.Unmarshal([]byte(out), &ack); err != nil || ack.Start.SeqNum != 4 || ack.End.SeqNum != 6 {
		t.Fatalf("append --json: %q (%v)", out, err)
	}

	// tail from an earlier position, ended by --for.
	if out := mustRun(t, env, "", "tail", "s", "--tail-offset", "2", "--for", "300ms"); out != "delta\nepsilon\n" {
		t.Fatalf("tail: %q", out)
	}
}

// TestTailFollows: tail prints records appended while it runs.
func TestTailFollows(t *testing.T) {
	t.Parallel() // its own star (or test server), port and client; it mostly waits
	srv, env := testEnv(t)
	mustRun(t, env, "", "streams", "create", "s")
	mustRun(t, env, "old\n", "append", "s", "--basin", testBasin)
	done := make(chan string, 1)
	go func() {
		out, _, err := run(t, env, "", "tail", "s", "--for", "1500ms")
		if err != nil {
			out = "error: " + err.Error()
		}
		done <- out
	}()
	poll.Until(t, time.Second, "the tail's session to start", func() bool { return srv.ReadsFollowing() == 1 })
	mustRun(t, env, "new1\nnew2\n", "append", "s")
	if out := <-done; out != "new1\nnew2\n" {
		t.Fatalf("tail printed %q", out)
	}
}

func TestParseRetention(t *testing.T) {
	for in, want := range map[string]api.RetentionPolicy{
		"infinite": {Infinite: true},
		"7d":       {AgeSecs: 7 * 86400},
		"12h":      {AgeSecs: 12 * 3600},
		"3600":     {AgeSecs: 3600},
		"90s":      {AgeSecs: 90},
	} {
		got, err := parseRetention(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v", in, got, err)
		}
	}
	for _, bad := range []string{"", "0", "0s", "1.5s", "-1h", "x", "d", "500ms"} {
		if _, err := parseRetention(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestHelp: every command explains itself.
func TestHelp(t *testing.T) {
	var walk func(c *cobra.Command)
	var paths [][]string
	walk = func(c *cobra.Command) {
		if c.Short == "" {
			t.Errorf("%s has no Short", c.CommandPath())
		}
		if c.Runnable() && c.Long == "" && c.HasAvailableFlags() && len(c.Flags().FlagUsages()) == 0 {
			t.Errorf("%s has neither Long nor flag help", c.CommandPath())
		}
		path := strings.Fields(c.CommandPath())[1:]
		paths = append(paths, path)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	root := &cobra.Command{Use: "star"}
	root.AddCommand(newCommands(func(string) (string, bool) { return "", false })...)
	for _, c := range root.Commands() {
		walk(c)
	}
	if len(paths) < 16 {
		t.Fatalf("only %d commands", len(paths))
	}
	for _, p := range paths {
		out := mustRun(t, nil, "", append(p, "--help")...)
		if !strings.Contains(out, "Usage:") || !strings.Contains(out, "--endpoint") {
			t.Errorf("%v --help: %q", p, out)
		}
	}
}
