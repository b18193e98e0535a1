package servecmd

import (
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
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
	if cfg.Standard.MemoryBufferBytes != 256<<20 || cfg.Express.MemoryBufferBytes != 32<<20 || cfg.BacklogFlights != 1024 {
		t.Fatalf("seed defaults: %+v", cfg)
	}

	t.Setenv("STARLOG_STANDARD_W", "two")
	if err := applyEnv(fs); err == nil || !strings.Contains(err.Error(), "STARLOG_STANDARD_W") {
		t.Fatalf("a bad value must name its variable: %v", err)
	}
}
