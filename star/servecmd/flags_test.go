package servecmd

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/starlog/starlog/shared/auditjob/awsenv"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/loglet"
)

func TestEnvFallback(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var c common
	c.register(fs, "127.0.0.1:1")
	annotateEnv(fs)
	t.Setenv("STARLOG_S3_FLUSH_INTERVAL", "7ms")
	t.Setenv("STARLOG_EXPRESS_BUCKETS", "a1b,c2d,e3f")
	t.Setenv("STARLOG_LISTEN", "127.0.0.1:2")
	if err := fs.Parse([]string{"--listen", "127.0.0.1:3"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs); err != nil {
		t.Fatal(err)
	}
	if c.flush != 7*time.Millisecond || strings.Join(c.expressBuckets, ",") != "a1b,c2d,e3f" {
		t.Fatalf("env not applied: %v %v", c.flush, c.expressBuckets)
	}
	if c.listen != "127.0.0.1:3" {
		t.Fatalf("a flag given on the command line must win over the environment, got %s", c.listen)
	}
	if u := fs.Lookup("s3-memory-buffer-mib").Usage; !strings.Contains(u, "[env STARLOG_S3_MEMORY_BUFFER_MIB]") {
		t.Fatalf("usage does not name the variable: %q", u)
	}
	cfg := c.nodeConfig()
	if cfg.Standard.MemoryBufferBytes != 256<<20 || cfg.Express.MemoryBufferBytes != 32<<20 || cfg.BacklogFlights != loglet.DefaultBacklogFlights || cfg.IndexCacheBytes != loglet.DefaultIndexCacheBytes {
		t.Fatalf("seed defaults: %+v", cfg)
	}

	t.Setenv("STARLOG_STANDARD_W", "two")
	if err := applyEnv(fs); err == nil || !strings.Contains(err.Error(), "STARLOG_STANDARD_W") {
		t.Fatalf("a bad value must name its variable: %v", err)
	}
}

// The settle policy flags exist on serve and dev, map onto the node's
// settle.Config (which the loglets ripen by), and their environment
// fallbacks are the names the auditor functions read.
func TestSettleFlags(t *testing.T) {
	for _, cmd := range []*cobra.Command{Serve(), Dev()} {
		for _, f := range []string{"settle-trigger-mib", "settle-linger", "settle-express-linger", "settle-age-cap",
			"settle-express-age-cap", "settle-output-cap-mib", "read-grace"} {
			if cmd.Flags().Lookup(f) == nil {
				t.Errorf("%s has no --%s", cmd.Name(), f)
			}
		}
	}
	if f := Dev().Flags().Lookup("auditor-interval"); f == nil || f.DefValue != "10s" {
		t.Fatalf("dev --auditor-interval: %+v", f)
	}
	if Serve().Flags().Lookup("auditor-interval") != nil {
		t.Fatal("serve runs no in-process auditor")
	}

	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var c common
	c.register(fs, "127.0.0.1:1")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if got, want := c.nodeConfig().Settle, settle.DefaultConfig(); got != want {
		t.Fatalf("defaults: %+v, want %+v", got, want)
	}
	for name, v := range map[string]string{
		awsenv.EnvSettleTriggerMiB: "4", awsenv.EnvSettleLinger: "30s", awsenv.EnvSettleAgeCap: "5m",
		awsenv.EnvSettleExpressLinger: "2s", awsenv.EnvSettleExpressAgeCap: "40s", awsenv.EnvSettleOutputCapMiB: "64", awsenv.EnvReadGrace: "90s",
	} {
		t.Setenv(name, v)
	}
	if err := applyEnv(fs); err != nil {
		t.Fatal(err)
	}
	cfg := c.nodeConfig()
	s := cfg.Settle
	if s.Trigger != 4<<20 || s.Standard != (settle.ClassTimers{Linger: 30 * time.Second, AgeCap: 5 * time.Minute}) ||
		s.Express != (settle.ClassTimers{Linger: 2 * time.Second, AgeCap: 40 * time.Second}) || s.OutputCap != 64<<20 || s.ReadGrace != 90*time.Second {
		t.Fatalf("settle config from the environment: %+v", s)
	}
	if rip := s.Ripening(meta.Express); rip.Trigger != 4<<20 || rip.Linger != 2*time.Second || rip.AgeCap != 40*time.Second {
		t.Fatalf("express ripening %+v", rip)
	}
}

// Every variable the auditor functions share with the star is the
// environment fallback of the star's flag of the same meaning.
func TestAuditorEnvNamesAreFlagFallbacks(t *testing.T) {
	serve := Serve().Flags()
	for flag, env := range map[string]string{
		"dynamo-table": awsenv.EnvTable, "standard-buckets": awsenv.EnvStandardBuckets, "express-buckets": awsenv.EnvExpressBuckets,
		"dynamo-endpoint": awsenv.EnvDynamoEndpoint, "dynamo-region": awsenv.EnvDynamoRegion,
		"s3-endpoint": awsenv.EnvS3Endpoint, "s3-region": awsenv.EnvS3Region, "s3-path-style": awsenv.EnvS3PathStyle,
		"aws-access-key-id": awsenv.EnvAccessKey, "aws-secret-access-key": awsenv.EnvSecretKey, "log-level": awsenv.EnvLogLevel,
		"settle-trigger-mib": awsenv.EnvSettleTriggerMiB, "settle-linger": awsenv.EnvSettleLinger,
		"settle-express-linger": awsenv.EnvSettleExpressLinger, "settle-age-cap": awsenv.EnvSettleAgeCap,
		"settle-express-age-cap": awsenv.EnvSettleExpressAgeCap, "settle-output-cap-mib": awsenv.EnvSettleOutputCapMiB,
		"read-grace": awsenv.EnvReadGrace, "dead-after": awsenv.EnvDeadAfter,
	} {
		if serve.Lookup(flag) == nil {
			t.Errorf("serve has no --%s", flag)
		}
		if EnvName(flag) != env {
			t.Errorf("--%s falls back to %s, the functions read %s", flag, EnvName(flag), env)
		}
	}
}

// The throughput flag defaults to S2's documented per-stream limit, the
// batch-rate limit and the per-client limit are off unless asked for, and
// 0 turns a limit off.
func TestRateLimitFlags(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var c common
	c.register(fs, "127.0.0.1:1")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	l := c.nodeConfig().Limits
	if l.StreamBytesPerSec != 100<<20 || l.StreamBatchesPerSec >= 0 || l.SessionThrottle != 2*time.Second {
		t.Fatalf("defaults: %+v, want S2's 100 MiB/s and the batch-rate limit off", l)
	}
	if r := c.serverOptions(auth.Config{}).ClientRate; r.PerSec != 0 {
		t.Fatalf("per-client limit on by default: %+v", r)
	}
	if err := fs.Parse([]string{"--append-stream-mib-per-sec=0", "--append-stream-batches-per-sec=50", "--client-rate-per-sec=20", "--client-rate-burst=40"}); err != nil {
		t.Fatal(err)
	}
	l = c.nodeConfig().Limits
	if l.StreamBytesPerSec >= 0 || l.StreamBatchesPerSec != 50 {
		t.Fatalf("flags: %+v, want throughput off and 50 batches/s", l)
	}
	if r := c.serverOptions(auth.Config{}).ClientRate; r.PerSec != 20 || r.Burst != 40 {
		t.Fatalf("per-client limit %+v", r)
	}
}

// --durable-key-rotation: the default period, 0 for never, the
// environment fallback, and --help names the lead and retain the code uses.
func TestDurableKeyRotationFlag(t *testing.T) {
	parse := func(args ...string) *common {
		t.Helper()
		fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
		var c common
		c.register(fs, "127.0.0.1:1")
		annotateEnv(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		if err := applyEnv(fs); err != nil {
			t.Fatal(err)
		}
		return &c
	}
	if got := parse().durableConfig().KeyRotation; got != durable.DefaultKeyRotation {
		t.Fatalf("default %v, want %v", got, durable.DefaultKeyRotation)
	}
	if durable.DefaultKeyRotation != 30*24*time.Hour {
		t.Fatalf("the default is %v; the docs say 30 days", durable.DefaultKeyRotation)
	}
	if got := parse("--durable-key-rotation=0").durableConfig().KeyRotation; got >= 0 {
		t.Fatalf("0 maps to %v, want never (negative)", got)
	}
	t.Setenv("STARLOG_DURABLE_KEY_ROTATION", "48h")
	if got := parse().durableConfig().KeyRotation; got != 48*time.Hour {
		t.Fatalf("from the environment: %v", got)
	}
	for _, cmd := range []*cobra.Command{Serve(), Dev()} {
		f := cmd.Flags().Lookup("durable-key-rotation")
		if f == nil {
			t.Fatalf("%s has no --durable-key-rotation", cmd.Name())
		}
		for _, want := range []string{"signs 10m later", "1h more", "0: never", "at least 1h", "STARLOG_DURABLE_KEY_ROTATION"} {
			if !strings.Contains(f.Usage, want) {
				t.Errorf("%s --help %q: no %q", cmd.Name(), f.Usage, want)
			}
		}
	}
}
