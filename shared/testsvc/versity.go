package testsvc

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// VersityServer is a running versitygw (S3 over the posix backend) bound to
// 127.0.0.1. Clients use path-style addressing with the static keys.
type VersityServer struct {
	Endpoint  string // http://127.0.0.1:<port>
	Region    string
	AccessKey string
	SecretKey string
	// Root is the posix root: one directory per bucket.
	Root string
	proc *Process
}

// Output is what the gateway printed so far (for failure messages).
func (v VersityServer) Output() string { return v.proc.Output() }

// StartVersity runs $STARLOG_TOOLS/bin/versitygw on a fresh temp root with the
// given buckets already created, waits until it accepts connections, and
// stops it when the test ends. A missing binary fails the test.
func StartVersity(tb testing.TB, buckets ...string) VersityServer {
	tb.Helper()
	bin := filepath.Join(ToolsDir(tb), "bin", "versitygw")
	RequireFile(tb, bin, "versitygw")

	root := tb.TempDir()
	for _, b := range buckets {
		// The posix backend treats every top-level directory as a bucket.
		if err := os.Mkdir(filepath.Join(root, b), 0o755); err != nil {
			tb.Fatalf("testsvc: create bucket %q: %v", b, err)
		}
	}
	v := VersityServer{
		Region:    "us-east-1",
		AccessKey: "starlogtestkey",
		SecretKey: "starlogtestsecret",
		Root:      root,
	}
	addr := Addr(FreePort(tb))
	v.Endpoint = "http://" + addr
	cmd := exec.Command(bin, "--port", addr, "--quiet", "--region", v.Region, "posix", root)
	cmd.Env = append(os.Environ(), "ROOT_ACCESS_KEY="+v.AccessKey, "ROOT_SECRET_KEY="+v.SecretKey)
	v.proc = Start(tb, "versitygw", cmd)
	v.proc.WaitTCP(tb, addr, 15*time.Second)
	return v
}
