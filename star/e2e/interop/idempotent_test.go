package interop_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
)

// TestS2TypeScriptSDKIdempotentProducer runs idempotent.mjs (issue 29
// item 4): the unmodified SDK sends the same producer batch twice, on one
// star and then across a kill -9 of the star (a new one on the same data
// directory): one copy, and identical acks.
func TestS2TypeScriptSDKIdempotentProducer(t *testing.T) {
	t.Parallel()
	root, nodeTools, node, script := sdkScript(t, "idempotent.mjs")
	bin := buildStar(t, root)
	addr := testsvc.Addr(testsvc.FreePort(t))
	data := t.TempDir()
	endpoint := "http://" + addr
	start := func() (*exec.Cmd, *testsvc.Process) {
		star := exec.Command(bin, "dev", "--data", data, "--listen", addr, "--shutdown-timeout", "5s")
		star.Env = append(withoutStarlogConfig(os.Environ()), "STARLOG_ADMIN_TOKEN="+interopToken)
		srv := testsvc.Start(t, "star dev", star)
		srv.WaitTCP(t, addr, time.Minute)
		waitHealthy(t, srv, endpoint+"/health", 30*time.Second)
		return star, srv
	}
	env := []string{"BASIN=idem-interop", "ACK_FILE=" + filepath.Join(t.TempDir(), "acks.json")}
	phases := []struct {
		phase string
		want  int
	}{{"before", 2}, {"after", 2}}
	star, srv := start()
	for i, ph := range phases {
		if i > 0 {
			// kill -9: the whole process group, nothing flushed or released.
			if err := syscall.Kill(-star.Process.Pid, syscall.SIGKILL); err != nil {
				t.Fatal(err)
			}
			srv.Stop() // waits for the exit
			star, srv = start()
		}
		res, runErr := runConformance(t, node, script, nodeTools, endpoint, append(env, "PHASE="+ph.phase)...)
		for _, f := range res.failures {
			t.Errorf("%s: S2 SDK scenario failed: %s", ph.phase, f)
		}
		if runErr != nil {
			t.Errorf("idempotent.mjs %s: %v", ph.phase, runErr)
		}
		if len(res.passes) != ph.want || len(res.failures) != 0 {
			t.Errorf("idempotent.mjs %s passed %d scenarios and failed %d, want %d passed", ph.phase, len(res.passes), len(res.failures), ph.want)
		}
		if t.Failed() {
			t.Logf("star dev output (tail):\n%s", tail(srv.Output(), 32<<10))
			return
		}
	}
}
