package servecmd_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta/sqlite"
)

// A star its peers presumed dead (its heartbeat had aged, say through a
// long pause) learns it at its next heartbeat and exits non-zero, so its
// supervisor restarts it as a new incarnation instead of leaving a
// process that serves nothing.
func TestZombieExits(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	dir := t.TempDir()
	a := startServe(t, twoStarEnv(dir, "a"))
	ms, err := sqlite.Open(context.Background(), filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer ms.Close()
	if _, dead, err := leader.MarkDead(context.Background(), ms, "a", time.Now().Add(time.Hour), time.Second); err != nil || !dead {
		t.Fatalf("mark a dead: %v %v", dead, err)
	}
	select {
	case err := <-a.done:
		if err == nil {
			t.Fatalf("a exited 0 after it was presumed dead\n%s", a.stderr)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("a still runs 15 s after it was presumed dead\n%s", a.stderr)
	}
	if !strings.Contains(a.stderr.String(), "exiting to restart as a new incarnation") {
		t.Fatalf("a did not say why it exited\n%s", a.stderr)
	}
}
