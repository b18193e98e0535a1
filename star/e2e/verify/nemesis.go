package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/star/auth"
)

// Fault is one action of the nemesis. Inject breaks something and repairs
// it before returning, so faults never overlap and the cluster is whole
// between them.
//
// The kinds: KillRestart (kill -9 a star, restart it on the same data),
// Handoff (move a stream to another star through the admin endpoint),
// StoreFault (slow or down a bucket or the metastore through the stars'
// dev fault controls), ZoneHalt (halt the Express epochs with one zone
// black-holed) and MetaOutage (the metastore down on every star for long).
type Fault interface {
	// Name is a short label for logs and reports.
	Name() string
	Inject(ctx context.Context, c *Cluster) (FaultEvent, error)
}

// FaultEvent records one injected fault.
type FaultEvent struct {
	Fault string
	// Star is the star hit (a handoff's target), -1 for every star.
	Star int
	// Stream is a handoff's stream.
	Stream string
	// Detail says what was done, for logs.
	Detail string
	// Failed is a fault that could not be injected (a handoff that found
	// no leader to move the stream from within its timeout).
	Failed bool
	// At is when the fault started (history clock), Recovered when the
	// cluster served again.
	At, Recovered time.Duration
	// Violations are what the fault itself found wrong while it ran
	// (its assertions beyond linearizability and read-back).
	Violations []string
	// Check, when set, judges the round's history once the clients
	// stopped: what the fault asserts about what the clients saw, up to
	// until (when the next fault began). It returns a line for the log
	// and the violations.
	Check func(h *History, until time.Duration) (summary string, violations []string)
}

// Cluster is the stars under test, and the streams of the running round
// (the handoff fault moves one of them).
type Cluster struct {
	Stars []*Star
	Basin string
	// Dir holds the stars' data and logs.
	Dir string
	// Meta and Objects are the stars' metastore and object store as the
	// test process opens them, past every star's fault control: the
	// faults read chain heads and leases and write foreign occupants
	// through them (nil: those faults are skipped).
	Meta    meta.Store
	Objects objstore.Store
	// Kafka are the stars' Kafka addresses (-verify.kafka; none: Kafka
	// is not served).
	Kafka []string

	mu      sync.Mutex
	streams []string
	express map[string]bool
	now     func() time.Duration
}

// SetClock sets the clock the faults stamp their phases with (the
// running round's history clock).
func (c *Cluster) SetClock(now func() time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = now
}

// Now is the clock of SetClock (zero before it is set).
func (c *Cluster) Now() time.Duration {
	c.mu.Lock()
	now := c.now
	c.mu.Unlock()
	if now == nil {
		return 0
	}
	return now()
}

// SetExpress names the Express-class streams among the round's streams.
func (c *Cluster) SetExpress(names []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.express = map[string]bool{}
	for _, n := range names {
		c.express[n] = true
	}
}

// ExpressStreams are the round's Express-class streams.
func (c *Cluster) ExpressStreams() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, n := range c.streams {
		if c.express[n] {
			out = append(out, n)
		}
	}
	return out
}

// Endpoints lists the stars' base URLs.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.Stars))
	for i, s := range c.Stars {
		eps[i] = s.Endpoint()
	}
	return eps
}

// SetStreams names the streams the clients use now.
func (c *Cluster) SetStreams(streams []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.streams = append([]string(nil), streams...)
}

// Streams are the streams the clients use now.
func (c *Cluster) Streams() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.streams...)
}

// ZombieExit is what `star serve` logs when it exits because its
// incarnation was presumed dead by its peers or deposed by a successor, so
// that its supervisor restarts it as a new incarnation.
const ZombieExit = "exiting to restart as a new incarnation"

// Supervise plays the supervisor of production (systemd, an Auto Scaling
// health check) after a fault: a star that exited as a zombie (ZombieExit)
// is restarted at once, and a running star whose GET /health has not
// answered 200 for grace is killed and restarted. It returns one event per
// restart, the reason as its detail. A star that exited otherwise (a crash)
// is an error: no fault stops a star without restarting it.
func (c *Cluster) Supervise(ctx context.Context, grace time.Duration) ([]FaultEvent, error) {
	type result struct {
		ev  *FaultEvent
		err error
	}
	res := make([]result, len(c.Stars))
	var wg sync.WaitGroup
	for i, s := range c.Stars {
		wg.Go(func() {
			t0 := time.Now()
			why := ""
			for {
				if s.Exited() {
					if !s.SaidZombie() {
						res[i].err = fmt.Errorf("star %d (%s) exited on its own; its output (tail):\n%s", i, s.ID(), lastBytes(s.OutputOfProcess(), 6000))
						s.Forget()
						if err := s.Start(context.WithoutCancel(ctx)); err != nil {
							res[i].err = fmt.Errorf("%w\nrestart failed: %w", res[i].err, err)
						}
						return
					}
					why = "exited as a zombie (presumed dead or deposed)"
					break
				}
				ok, body := health(ctx, s.Endpoint())
				if ok {
					return
				}
				why = fmt.Sprintf("unhealthy for %v: %s", grace, body)
				if time.Since(t0) >= grace || ctx.Err() != nil {
					break
				}
				select {
				case <-ctx.Done():
				case <-time.After(100 * time.Millisecond):
				}
			}
			ev := &FaultEvent{Fault: "supervisor-restart", Star: i, Detail: fmt.Sprintf("star %d %s: restarted", i, why)}
			if err := s.Kill(); err != nil {
				res[i].err = err
				return
			}
			if err := s.Start(context.WithoutCancel(ctx)); err != nil {
				res[i].err = fmt.Errorf("supervisor: restart star %d: %w", i, err)
				return
			}
			ev.Recovered = time.Since(t0)
			res[i].ev = ev
		})
	}
	wg.Wait()
	var evs []FaultEvent
	var errs []error
	for _, r := range res {
		if r.ev != nil {
			evs = append(evs, *r.ev)
		}
		if r.err != nil {
			errs = append(errs, r.err)
		}
	}
	return evs, errors.Join(errs...)
}

func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

var healthHTTP = &http.Client{Timeout: 2 * time.Second}

// health reports whether endpoint's /health answers 200, and otherwise
// what it answered.
func health(ctx context.Context, endpoint string) (bool, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, endpoint+"/health", nil)
	if err != nil {
		return false, err.Error()
	}
	res, err := healthHTTP.Do(req)
	if err != nil {
		return false, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 4096))
	return res.StatusCode == http.StatusOK, fmt.Sprintf("%d %s", res.StatusCode, bytes.TrimSpace(b))
}

// KillRestart kills a random star with SIGKILL, keeps it down for a random
// time below MaxDown, and restarts it on the same data: the new incarnation
// settles what the killed one left open before it serves. Down longer
// than the stars' dead-after, its streams are taken over by the others
// first.
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
	ev := FaultEvent{Fault: k.Name(), Star: i, Detail: fmt.Sprintf("star %d down %v", i, down.Round(time.Millisecond))}
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

// Handoff moves a random stream of the round to another random star
// through the admin endpoint (POST /v1/starlog/streams/{s}/handoff), asked
// of a random star (which forwards it to the leader), while the clients
// keep appending. A target that already leads the stream is swapped for
// another; a stream that nobody leads at the moment (its leader was just
// killed) is retried until Timeout.
type Handoff struct {
	Rand *rand.Rand
	// Timeout bounds the attempts (default 30 s).
	Timeout time.Duration
	mu      sync.Mutex
}

// Name implements Fault.
func (*Handoff) Name() string { return "handoff" }

// handoffAnswer is the admin endpoint's answer.
type handoffAnswer struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Frontier uint64 `json:"frontier"`
	TookMs   int64  `json:"took_ms"`
}

var handoffHTTP = &http.Client{Timeout: 30 * time.Second}

// Inject implements Fault.
func (h *Handoff) Inject(ctx context.Context, c *Cluster) (FaultEvent, error) {
	streams := c.Streams()
	ev := FaultEvent{Fault: h.Name(), Star: -1}
	if len(streams) == 0 || len(c.Stars) < 2 {
		ev.Failed, ev.Detail = true, "no stream or a single star"
		return ev, nil
	}
	h.mu.Lock()
	stream := streams[h.Rand.IntN(len(streams))]
	to := h.Rand.IntN(len(c.Stars))
	h.mu.Unlock()
	ev.Stream = stream
	timeout := h.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	t0 := time.Now()
	deadline := t0.Add(timeout)
	var last string
	for attempt := 0; time.Now().Before(deadline) && ctx.Err() == nil; attempt++ {
		if attempt > 0 {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		h.mu.Lock()
		via := h.Rand.IntN(len(c.Stars))
		h.mu.Unlock()
		status, body, err := postHandoff(ctx, c.Stars[via].Endpoint(), c.Basin, stream, c.Stars[to].ID())
		switch {
		case err != nil:
			last = err.Error()
		case status == http.StatusOK:
			var a handoffAnswer
			if err := json.Unmarshal(body, &a); err != nil {
				return ev, fmt.Errorf("handoff %s: answer %s: %w", stream, body, err)
			}
			ev.Star = to
			ev.Recovered = time.Since(t0)
			ev.Detail = fmt.Sprintf("%s %s→%s at seq %d, took %dms (%d attempts)", stream, a.From, a.To, a.Frontier, a.TookMs, attempt+1)
			return ev, nil
		case status == http.StatusUnprocessableEntity && (strings.Contains(string(body), "already leads") ||
			strings.Contains(string(body), "not a live star")):
			// The target leads it already, or is restarting: another one.
			last = fmt.Sprintf("%d %s", status, bytes.TrimSpace(body))
			h.mu.Lock()
			to = (to + 1 + h.Rand.IntN(len(c.Stars)-1)) % len(c.Stars)
			h.mu.Unlock()
		default:
			// 422 "does not lead" (nobody leads it right now), 503 (moving,
			// not leader), 5xx: retry.
			last = fmt.Sprintf("%d %s", status, bytes.TrimSpace(body))
		}
	}
	ev.Failed = true
	ev.Recovered = time.Since(t0)
	ev.Detail = fmt.Sprintf("%s: no handoff within %v; last: %s", stream, timeout, last)
	return ev, nil
}

func postHandoff(ctx context.Context, endpoint, basin, stream, to string) (int, []byte, error) {
	body, _ := json.Marshal(map[string]string{"to": to})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost,
		endpoint+"/v1/starlog/streams/"+url.PathEscape(stream)+"/handoff", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("s2-basin", basin)
	req.Header.Set(auth.HeaderInternal, internalCredential())
	res, err := handoffHTTP.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// Nemesis injects faults at scheduled moments.
type Nemesis struct {
	Cluster *Cluster
	Faults  []Fault
	Rand    *rand.Rand
	// SuperviseGrace is how long a star may stay unhealthy after a fault
	// before the nemesis restarts it (Cluster.Supervise; default 3 s).
	SuperviseGrace time.Duration
}

func (n *Nemesis) superviseGrace() time.Duration {
	if n.SuperviseGrace > 0 {
		return n.SuperviseGrace
	}
	return 3 * time.Second
}

// Run injects count faults spread over d, each picked at random from
// Faults (see RunPlan).
func (n *Nemesis) Run(ctx context.Context, d time.Duration, count int, now func() time.Duration) ([]FaultEvent, error) {
	if count <= 0 || len(n.Faults) == 0 {
		return nil, nil
	}
	plan := make([]Fault, count)
	for i := range plan {
		plan[i] = n.Faults[n.Rand.IntN(len(n.Faults))]
	}
	return n.RunPlan(ctx, d, plan, now)
}

// RunPlan injects the faults of plan in order, spread over d (evenly, with
// jitter; a fault that takes longer than its slot delays the next ones),
// and returns what it did. After each fault it restarts any star that
// exited on its own and reports that as an error. It stops early when ctx
// is done.
func (n *Nemesis) RunPlan(ctx context.Context, d time.Duration, plan []Fault, now func() time.Duration) ([]FaultEvent, error) {
	var evs []FaultEvent
	count := len(plan)
	if count == 0 {
		return nil, nil
	}
	n.Cluster.SetClock(now)
	start := time.Now()
	slot := d / time.Duration(count+1)
	for i, f := range plan {
		// Fault i lands in [slot·(i+0.5), slot·(i+1.5)).
		at := slot*time.Duration(i) + slot/2 + time.Duration(n.Rand.Int64N(int64(slot)+1))
		if wait := at - time.Since(start); wait > 0 {
			select {
			case <-time.After(wait):
			case <-ctx.Done():
				return evs, nil
			}
		}
		if ctx.Err() != nil {
			return evs, nil
		}
		t := now()
		ev, err := f.Inject(ctx, n.Cluster)
		ev.At = t
		ev.Recovered += t
		if err != nil {
			return evs, fmt.Errorf("fault %s (%s): %w", f.Name(), ev.Detail, err)
		}
		evs = append(evs, ev)
		t = now()
		sevs, err := n.Cluster.Supervise(ctx, n.superviseGrace())
		for _, sev := range sevs {
			sev.At, sev.Recovered = t, sev.Recovered+t
			evs = append(evs, sev)
		}
		if err != nil {
			return evs, fmt.Errorf("after fault %s (%s): %w", f.Name(), ev.Detail, err)
		}
	}
	return evs, nil
}
