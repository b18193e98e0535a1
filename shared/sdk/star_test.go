package sdk

import (
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/testsvc"
)

// Tests against a real star: `star dev` built from this module, with an
// admin token the test chooses. They are skipped with -short.

const starAdminToken = "sdk-test-admin-token-0123456789abcdef"

func TestMain(m *testing.M) {
	code := m.Run()
	testsvc.RemoveStarBinary()
	os.Exit(code)
}

// startStar runs `star dev` with the basin starlog-dev and extra flags,
// and returns its (first star's) endpoint once the basin exists; the
// test's cleanup stops it.
func startStar(t *testing.T, extra ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs star dev")
	}
	bin := testsvc.StarBinary(t)
	stars := 1
	for i, a := range extra {
		if a == "--stars" && i+1 < len(extra) {
			stars, _ = strconv.Atoi(extra[i+1])
		}
	}
	addr := testsvc.Addr(testsvc.FreePorts(t, max(stars, 1)))
	args := append([]string{"dev", "--data", t.TempDir(), "--listen", addr, "--shutdown-timeout", "5s",
		"--s3-flush-interval", "2ms", "--s3-express-flush-interval", "2ms", "--log-level", "warn"}, extra...)
	cmd := exec.Command(bin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "STARLOG_") && !strings.HasPrefix(kv, "S2_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, "STARLOG_ADMIN_TOKEN="+starAdminToken)
	p := testsvc.Start(t, "star dev", cmd)
	p.WaitTCP(t, addr, time.Minute)
	endpoint := "http://" + addr
	hc := &http.Client{Timeout: 2 * time.Second}
	// Healthy, and the dev basin made (a cluster makes it once its stars
	// are up).
	if err := poll.Wait(30*time.Second, func() error {
		req, _ := http.NewRequest(http.MethodGet, endpoint+"/v1/basins/starlog-dev", nil)
		req.Header.Set("Authorization", "Bearer "+starAdminToken)
		resp, err := hc.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}); err != nil {
		t.Fatalf("star dev not healthy: %v\n%s", err, p.Output())
	}
	return endpoint
}

// starClient is a client of the star at endpoint with token.
func starClient(t *testing.T, endpoint, token string, mod func(*Config)) *Client {
	t.Helper()
	return newClient(t, endpoint, func(c *Config) {
		c.Token = token
		c.Retry = RetryPolicy{}
		if mod != nil {
			mod(c)
		}
	})
}
