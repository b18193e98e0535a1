package interop_test

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
)

// TestS2TypeScriptSDKDrain runs the official S2 TypeScript SDK against a
// star that shuts down while it serves an S2S read session, an SSE read
// session and a long poll: each ends with S2's 503 server_draining, which
// the SDK counts as side-effect free and resumes on at once.
func TestS2TypeScriptSDKDrain(t *testing.T) {
	t.Parallel()
	root, nodeTools, node, script := sdkScript(t, "drain.mjs")
	bin := buildStar(t, root)
	addr := testsvc.Addr(testsvc.FreePort(t))
	star := exec.Command(bin, "dev", "--data", t.TempDir(), "--listen", addr, "--shutdown-timeout", "10s")
	star.Env = append(withoutStarlogConfig(os.Environ()), "STARLOG_ADMIN_TOKEN="+interopToken)
	srv := testsvc.Start(t, "star dev", star)
	srv.WaitTCP(t, addr, time.Minute)
	endpoint := "http://" + addr
	waitHealthy(t, srv, endpoint+"/health", 30*time.Second)

	res, runErr := runConformance(t, node, script, nodeTools, endpoint, "STAR_PID="+strconv.Itoa(star.Process.Pid))
	for _, f := range res.failures {
		t.Errorf("S2 SDK drain scenario failed: %s", f)
	}
	if runErr != nil {
		t.Errorf("drain.mjs: %v", runErr)
	}
	if len(res.passes) != 3 {
		t.Errorf("drain.mjs passed %d scenarios, want 3", len(res.passes))
	}
	if t.Failed() {
		t.Logf("star dev output (tail):\n%s", tail(srv.Output(), 32<<10))
	}
}
