package verify

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"sync"
	"time"
)

// Upgrade replaces the cluster's stars with another build one at a time,
// the way the stack's rolling update does (docs/deploy.md, "Drain on
// termination" and "Upgrades"): `star drain --wait` through the running
// build's own CLI, SIGTERM, then the new build started on the same data
// and address under a new star id (a new instance). Each Inject replaces
// the next star; once every star runs the new build, the next Inject
// replaces the auditor (stars before the auditor, the documented order).
type Upgrade struct {
	// Binary is the new star build.
	Binary string
	// Auditor is the auditor process, replaced after the stars by
	// AuditorBinary (nil: no auditor step).
	Auditor       *Star
	AuditorBinary string
	// DrainTimeout bounds one star's drain (default 2 minutes).
	DrainTimeout time.Duration

	mu   sync.Mutex
	next int
}

// Name implements Fault.
func (*Upgrade) Name() string { return "upgrade" }

// Done reports whether every star and the auditor run the new build.
func (u *Upgrade) Done(c *Cluster) bool {
	u.mu.Lock()
	defer u.mu.Unlock()
	n := len(c.Stars)
	if u.Auditor != nil {
		n++
	}
	return u.next >= n
}

// Inject implements Fault: it replaces the next process.
func (u *Upgrade) Inject(ctx context.Context, c *Cluster) (FaultEvent, error) {
	u.mu.Lock()
	i := u.next
	u.next++
	u.mu.Unlock()
	t0 := time.Now()
	switch {
	case i < len(c.Stars):
		ev := FaultEvent{Fault: u.Name(), Star: i}
		id, err := u.replaceStar(ctx, c.Stars[i])
		ev.Detail = fmt.Sprintf("star %d replaced by %s (%v)", i, id, time.Since(t0).Round(time.Millisecond))
		ev.Recovered = time.Since(t0)
		return ev, err
	case i == len(c.Stars) && u.Auditor != nil:
		ev := FaultEvent{Fault: u.Name(), Star: -1, Detail: "auditor replaced"}
		a := u.Auditor
		if err := a.Stop(30 * time.Second); err != nil {
			return ev, fmt.Errorf("stop the old auditor: %w", err)
		}
		a.mu.Lock()
		a.spec.Binary = u.AuditorBinary
		a.mu.Unlock()
		if err := a.Start(context.WithoutCancel(ctx)); err != nil {
			return ev, fmt.Errorf("start the new auditor: %w", err)
		}
		ev.Recovered = time.Since(t0)
		return ev, nil
	default:
		return FaultEvent{Fault: u.Name(), Star: -1, Failed: true, Detail: "every process runs the new build"}, nil
	}
}

// replaceStar drains s with its own build's CLI, stops it and starts the
// new build in its place under a new star id; it returns the new id.
func (u *Upgrade) replaceStar(ctx context.Context, s *Star) (string, error) {
	s.mu.Lock()
	old, endpoint, id := s.spec.Binary, s.spec.Endpoint, s.spec.ID
	s.mu.Unlock()
	d := u.DrainTimeout
	if d <= 0 {
		d = 2 * time.Minute
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d)
	defer cancel()
	cmd := exec.CommandContext(dctx, old, "drain", "--endpoint", endpoint, "--wait", "--poll", "100ms")
	cmd.Env = append(os.Environ(), ClusterEnv()...)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("star drain --wait of %s: %w\n%s", id, err, out)
	}
	if err := s.Stop(30 * time.Second); err != nil {
		return "", fmt.Errorf("stop %s after its drain: %w", id, err)
	}
	newID := id + "-u"
	s.mu.Lock()
	s.spec.Binary, s.spec.ID = u.Binary, newID
	args := slices.Clone(s.spec.Args)
	for j := 0; j+1 < len(args); j++ {
		if args[j] == "--star-id" {
			args[j+1] = newID
		}
	}
	s.spec.Args = args
	s.mu.Unlock()
	// Started even when ctx is done: the read-back needs the star.
	if err := s.Start(context.WithoutCancel(ctx)); err != nil {
		return newID, fmt.Errorf("start %s (the new build): %w", newID, err)
	}
	return newID, nil
}
