package servecmd

import (
	"strconv"
	"testing"
	"time"

	"github.com/spf13/pflag"

	"github.com/starlog/starlog/star/node"
)

// star dev (a directory store) defaults both flush intervals to the disk's
// value and the cut-when-idle rule to on, and says so in --help; star serve
// keeps the node's cost-aware ones (and the rule off).
func TestFlushDefaultsPerMedium(t *testing.T) {
	d := node.Defaults()
	for _, tc := range []struct {
		cmd       string
		std, expr time.Duration
		idle      string
		backlog   int
	}{
		{"dev", DiskFlushInterval, DiskFlushInterval, "true", DiskBacklogFlights},
		{"serve", d.Standard.FlushInterval, d.Express.FlushInterval, "false", d.BacklogFlights},
	} {
		cmd := Dev()
		if tc.cmd == "serve" {
			cmd = Serve()
		}
		fs := cmd.Flags()
		for name, want := range map[string]time.Duration{"s3-flush-interval": tc.std, "s3-express-flush-interval": tc.expr} {
			f := fs.Lookup(name)
			if f.DefValue != want.String() || f.Value.String() != want.String() {
				t.Errorf("%s --%s: default %s, value %s; want %s", tc.cmd, name, f.DefValue, f.Value, want)
			}
		}
		for _, name := range []string{"s3-cut-when-idle", "s3-express-cut-when-idle"} {
			f := fs.Lookup(name)
			if f.DefValue != tc.idle || f.Value.String() != tc.idle {
				t.Errorf("%s --%s: default %s, value %s; want %s", tc.cmd, name, f.DefValue, f.Value, tc.idle)
			}
		}
		if f := fs.Lookup("s3-chain-backlog-flights"); f.DefValue != strconv.Itoa(tc.backlog) || f.Value.String() != strconv.Itoa(tc.backlog) {
			t.Errorf("%s --s3-chain-backlog-flights: default %s, value %s; want %d", tc.cmd, f.DefValue, f.Value, tc.backlog)
		}
	}
	if DiskBacklogFlights <= d.BacklogFlights {
		t.Fatalf("the disk backlog %d is not above S3's %d", DiskBacklogFlights, d.BacklogFlights)
	}
	if DiskFlushInterval >= d.Standard.FlushInterval {
		t.Fatalf("the disk interval %v is not below S3's %v", DiskFlushInterval, d.Standard.FlushInterval)
	}
}

// On a directory store a flush interval that was given (flag or
// environment) stands; only the unset one takes the disk default.
func TestDiskFlushDefaultsKeepGivenFlags(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	var c common
	c.register(fs, "127.0.0.1:1")
	t.Setenv("STARLOG_S3_EXPRESS_FLUSH_INTERVAL", "9ms")
	t.Setenv("STARLOG_S3_EXPRESS_CUT_WHEN_IDLE", "false")
	if err := fs.Parse([]string{"--s3-flush-interval", "7ms", "--s3-cut-when-idle=false"}); err != nil {
		t.Fatal(err)
	}
	if err := applyEnv(fs); err != nil {
		t.Fatal(err)
	}
	diskFlushDefaults(fs, false)
	if c.flush != 7*time.Millisecond || c.expFlush != 9*time.Millisecond {
		t.Fatalf("given intervals overridden: %v %v", c.flush, c.expFlush)
	}
	if c.whenIdle || c.expWhenIdle {
		t.Fatalf("given cut-when-idle overridden: %v %v", c.whenIdle, c.expWhenIdle)
	}

	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	c = common{}
	c.register(fs, "127.0.0.1:1")
	if err := fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	diskFlushDefaults(fs, false)
	if c.flush != DiskFlushInterval || c.expFlush != DiskFlushInterval {
		t.Fatalf("unset intervals on a directory store: %v %v", c.flush, c.expFlush)
	}
	if !c.whenIdle || !c.expWhenIdle || !c.nodeConfig().Standard.CutWhenIdle || !c.nodeConfig().Express.CutWhenIdle {
		t.Fatalf("unset cut-when-idle on a directory store: %v %v", c.whenIdle, c.expWhenIdle)
	}
	if got := c.nodeConfig().BacklogFlights; got != DiskBacklogFlights {
		t.Fatalf("unset backlog on a directory store: %d flights, want %d", got, DiskBacklogFlights)
	}
}
