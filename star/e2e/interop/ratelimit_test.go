package interop_test

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
)

// TestS2TypeScriptSDKRateLimits runs the official S2 TypeScript SDK against
// a star whose per-stream append limits are set low: a unary append over
// the throughput limit surfaces S2's 429 rate_limited, and an S2S append
// session over the batch rate is throttled, every batch acknowledged.
func TestS2TypeScriptSDKRateLimits(t *testing.T) {
	t.Parallel()
	root, nodeTools, node, script := sdkScript(t, "ratelimits.mjs")
	bin := buildStar(t, root)
	addr := testsvc.Addr(testsvc.FreePort(t))
	star := exec.Command(bin, "dev", "--data", t.TempDir(), "--listen", addr, "--shutdown-timeout", "5s",
		"--append-stream-mib-per-sec", "0.0625", "--append-stream-batches-per-sec", "4")
	star.Env = append(withoutStarlogConfig(os.Environ()), "STARLOG_ADMIN_TOKEN="+interopToken)
	srv := testsvc.Start(t, "star dev", star)
	srv.WaitTCP(t, addr, time.Minute)
	endpoint := "http://" + addr
	waitHealthy(t, srv, endpoint+"/health", 30*time.Second)

	res, runErr := runConformance(t, node, script, nodeTools, endpoint)
	for _, f := range res.failures {
		t.Errorf("S2 SDK rate-limit scenario failed: %s", f)
	}
	if runErr != nil {
		t.Errorf("ratelimits.mjs: %v", runErr)
	}
	if len(res.passes) != 2 {
		t.Errorf("ratelimits.mjs passed %d scenarios, want 2", len(res.passes))
	}
}
