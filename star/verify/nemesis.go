package verify

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"
)

// Fault is one action of the nemesis. Inject breaks something and repairs
// it before returning, so faults never overlap and the cluster is whole
// between them.
//
// Today there is one kind: KillRestart (kill -9 a star, restart it on the
// same data). Faults that need hooks the star does not have yet are not
// here: slowing or downing a bucket, or slowing the metastore, of a star
// running as a separate process needs a fault-injection control in the
// star (objstore's injecting wrapper is in-process only); killing one of
// several stars needs `star dev --stars N` or `star serve` sharing stores.
type Fault interface {
	// Name is a short label for logs and reports.
	Name() string
	Inject(ctx context.Context, c *Cluster) (FaultEvent, error)
}

// FaultEvent records one injected fault.
type FaultEvent struct {
	Fault string
	Star  int
	// At is when the fault started (history clock), Recovered when the
	// cluster served again.
	At, Recovered time.Duration
}

// Cluster is the stars under test.
type Cluster struct {
	Stars []*Star
}

// Endpoints lists the stars' base URLs.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Stars))
	for i, s := range c.Stars {
		eps[i] = s.Endpoint()
	}
	return eps
}

// KillRestart kills a random star with SIGKILL, keeps it down for a random
// time below MaxDown, and restarts it on the same data: the new incarnation
// settles what the killed one left open before it serves.
type KillRestart struct {
	MaxDown time.Duration
	Rand    *rand.Rand
	mu      sync.Mutex
}

// Name implements Fault.
func (*KillRestart) Name() string { return "kill-9+restart" }

// Inject implements Fault.
func (k *KillRestart) Inject(ctx context.Context, c *Cluster) (FaultEvent, error) {
	k.mu.Lock()
	i := k.Rand.IntN(len(c.Stars))
	var down time.Duration
	if k.MaxDown > 0 {
		down = time.Duration(k.Rand.Int64N(int64(k.MaxDown)))
	}
	k.mu.Unlock()
	s := c.Stars[i]
	t0 := time.Now()
	ev := FaultEvent{Fault: k.Name(), Star: i}
	if err := s.Kill(); err != nil {
		return ev, err
	}
	select {
	case <-time.After(down):
	case <-ctx.Done():
	}
	// Restart even when ctx is done: the read-back needs the star.
	if err := s.Start(context.WithoutCancel(ctx)); err != nil {
		return ev, fmt.Errorf("restart star %d: %w", i, err)
	}
	ev.Recovered = time.Since(t0)
	return ev, nil
}

// Nemesis injects faults at scheduled moments.
type Nemesis struct {
	Cluster *Cluster
	Faults  []Fault
	Rand    *rand.Rand
}

// Run injects n faults spread over d (evenly, with jitter), each picked at
// random from Faults, and returns what it did. It stops early when ctx is
// done.
func (n *Nemesis) Run(ctx context.Context, d time.Duration, count int, now func() time.Duration) ([]FaultEvent, error) {
	var evs []FaultEvent
	if count <= 0 || len(n.Faults) == 0 {
		return nil, nil
	}
	start := time.Now()
	slot := d / time.Duration(count+1)
	for i := range count {
		// Fault i lands in [slot·(i+0.5), slot·(i+1.5)).
		at := slot*time.Duration(i) + slot/2 + time.Duration(n.Rand.Int64N(int64(slot)+1))
		if wait := at - time.Since(start); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return evs, nil
			}
		}
		f := n.Faults[n.Rand.IntN(len(n.Faults))]
		t := now()
		ev, err := f.Inject(ctx, n.Cluster)
		ev.At = t
		ev.Recovered += t
		if err != nil {
			return evs, fmt.Errorf("fault %s: %w", f.Name(), err)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}
