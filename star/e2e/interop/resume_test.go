package interop_test

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
)

// TestS2TypeScriptSDKLastEventIDResume runs resume.mjs: the official S2
// TypeScript SDK's SSE client loses its connection mid-read (a relay in
// the script cuts it) and reconnects with Last-Event-ID, which the star
// must resume after, limits counted from it; and the SDK's readSession on
// both transports resumes after a cut with no record lost or repeated.
func TestS2TypeScriptSDKLastEventIDResume(t *testing.T) {
	t.Parallel()
	runSDKScript(t, "resume.mjs", 3)
}

// TestS2TypeScriptSDKRetention runs retention.mjs against a star dev whose
// auditor, settle and read-grace timers are short (as the servecmd and
// soak tests run them): a stream with a 5 s retention age, left idle,
// forgets every record and keeps its tail (issue 29); after three more
// appends, reads from below the first retained record (unary, and a
// readSession on both transports) start there; check-tail is unaffected.
func TestS2TypeScriptSDKRetention(t *testing.T) {
	t.Parallel()
	runSDKScript(t, "retention.mjs", 5,
		"--auditor-interval", "100ms",
		"--settle-linger", "10ms", "--settle-age-cap", "50ms",
		"--settle-express-linger", "10ms", "--settle-express-age-cap", "50ms",
		"--settle-trigger-mib", "1", "--settle-output-cap-mib", "1", "--read-grace", "300ms")
}

// runSDKScript starts `star dev` with extra flags, runs a script of
// testdata against it, and wants every scenario to pass, want of them.
func runSDKScript(t *testing.T, name string, want int, starArgs ...string) {
	t.Helper()
	root, nodeTools, node, script := sdkScript(t, name)
	bin := buildStar(t, root)
	addr := testsvc.Addr(testsvc.FreePort(t))
	args := append([]string{"dev", "--data", t.TempDir(), "--listen", addr, "--shutdown-timeout", "5s"}, starArgs...)
	star := exec.Command(bin, args...)
	star.Env = append(withoutStarlogConfig(os.Environ()), "STARLOG_ADMIN_TOKEN="+interopToken)
	srv := testsvc.Start(t, "star dev", star)
	srv.WaitTCP(t, addr, time.Minute)
	endpoint := "http://" + addr
	waitHealthy(t, srv, endpoint+"/health", 30*time.Second)

	res, runErr := runConformance(t, node, script, nodeTools, endpoint)
	for _, f := range res.failures {
		t.Errorf("S2 SDK scenario failed: %s", f)
	}
	if runErr != nil {
		t.Errorf("%s: %v", name, runErr)
	}
	if !res.summary {
		t.Errorf("%s printed no `N passed, M failed` summary", name)
	}
	if len(res.passes) != want || len(res.failures) != 0 {
		t.Errorf("%s passed %d scenarios and failed %d, want %d passed", name, len(res.passes), len(res.failures), want)
	}
	if t.Failed() {
		t.Logf("star dev output (tail):\n%s", tail(srv.Output(), 32<<10))
	}
}
