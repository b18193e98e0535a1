package clientcmd

import (
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"

	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// durableStar runs a real star (SQLite, in-memory buckets) with the
// Durable Streams face and the given internal key; it returns its URL.
func durableStar(t *testing.T, internalKey string) string {
	t.Helper()
	objs, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	n, err := node.Open(context.Background(), node.Defaults(), node.Deps{Meta: testsvc.SQLite(t), Objects: objs, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := server.New(n, server.Options{Auth: auth.Config{AdminToken: "admin-token-for-tests", InternalKey: []byte(internalKey)}, Durable: &durable.Config{}})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := srv.HTTPServer(ln.Addr().String())
	go hs.Serve(srv.Listener(ln))
	t.Cleanup(func() {
		srv.Drain()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		hs.Shutdown(ctx)
		n.Close(ctx)
	})
	return "http://" + ln.Addr().String()
}

// star durable keys and rotate-keys against a star: without the internal
// key they fail; with it they list, rotate with the lead, and replace
// every key in an emergency.
func TestDurableCommands(t *testing.T) {
	key := strings.Repeat("k", 32)
	url := durableStar(t, key)
	env := map[string]string{EnvEndpoint: url}
	if _, _, err := run(t, env, "", "durable", "keys"); err == nil || !strings.Contains(err.Error(), "internal key") {
		t.Fatalf("without the internal key: %v", err)
	}
	env[EnvInternalKey] = key
	if out := mustRun(t, env, "", "durable", "keys"); !strings.Contains(out, "no subscription keys yet") {
		t.Fatalf("keys before any subscription request: %q", out)
	}
	// The JWK Set (public) creates the row.
	res, err := http.Get(url + "/ds/__ds/jwks.json")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	out := mustRun(t, env, "", "durable", "keys")
	first := kidsOf(out)
	if len(first) != 1 || !strings.Contains(out, "signing") {
		t.Fatalf("keys: %q", out)
	}
	out = mustRun(t, env, "", "durable", "rotate-keys")
	if kids := kidsOf(out); len(kids) != 2 || kids[0] != first[0] || !strings.Contains(out, "pending") {
		t.Fatalf("rotate-keys: %q", out)
	}
	out = mustRun(t, env, "", "durable", "rotate-keys", "--emergency")
	if kids := kidsOf(out); len(kids) != 1 || kids[0] == first[0] || !strings.Contains(out, "signing") {
		t.Fatalf("rotate-keys --emergency: %q", out)
	}
}

// kidsOf picks the kids out of the keys table.
func kidsOf(out string) []string {
	var kids []string
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(f[0], "ds_") {
			kids = append(kids, f[0])
		}
	}
	return kids
}

// The help states the numbers the code uses.
func TestDurableHelpNumbers(t *testing.T) {
	if durable.KeyPublishLead != 10*time.Minute || durable.KeyRetain != time.Hour || durable.KeyReload != time.Minute || durable.DefaultKeyRotation != 30*24*time.Hour {
		t.Fatal("the durable key timings changed: update the help of star durable")
	}
	c := &conn{lookupEnv: func(string) (string, bool) { return "", false }}
	cmd := c.durableCmd()
	var long []string
	for _, sub := range append([]*cobra.Command{cmd}, cmd.Commands()...) {
		long = append(long, sub.Long)
	}
	all := strings.Join(long, "\n")
	for _, want := range []string{"signs 10 minutes later", "for an hour more", "within a minute", "30 days"} {
		if !strings.Contains(strings.Join(strings.Fields(all), " "), want) {
			t.Errorf("help lacks %q", want)
		}
	}
}
