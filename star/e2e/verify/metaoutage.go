package verify

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
)

// MetaOutage downs the metastore on every star for Hold (120 s in make
// verify), the outage docs/write-path.md "Through a metastore outage"
// describes: the leaders keep acknowledging (the metastore is never on
// the ack path) until their backlog budget fills, check-tails and tail
// reads may be refused (the clock guard), /health stays ready, and once
// the metastore returns everything converges with nobody deposed.
//
// It asserts, beyond linearizability and read-back:
//
//   - acks continue: in every Window of the outage each stream of the
//     round has an append acknowledged, unless its leader (its lease read
//     once the outage began; no lease can move during it) counted a stall
//     with cause metastore_slow by the window's end
//     (starlog_backlog_stalls_total or starlog_admission_stalls_total on
//     its /metrics): the budget filled, and acks wait for the absorb; or
//     unless the stream was not open at its leader when the outage began
//     (no ack returned between its lease's acquisition and the outage, its
//     lease released, or held by an incarnation no longer running: a
//     handoff or a restart just before it), since opening a stream reads
//     the metastore;
//   - every star answers /health ready at every window's end;
//   - after it, convergence: every star ready with a fresh heartbeat
//     within a bound, and then for a dead-after bound and more no star
//     exits (a zombie: presumed dead or deposed) or changes incarnation.
//     The supervisor's restarts after the fault are violations too
//     (runRound checks).
type MetaOutage struct {
	// Hold is how long the metastore is down.
	Hold time.Duration
	// Window is the length of the windows acks are counted in.
	Window time.Duration
	// DeadAfter is the stars' --dead-after.
	DeadAfter time.Duration
}

// Name implements Fault.
func (*MetaOutage) Name() string { return "meta-outage" }

// outageWindow is one window of the outage and what the stars' counters
// said at its end.
type outageWindow struct {
	from, to time.Duration
	// stalled says, by star id, whether the star counted a metastore_slow
	// stall since the outage began.
	stalled map[string]bool
}

// Inject implements Fault.
func (f *MetaOutage) Inject(ctx context.Context, c *Cluster) (FaultEvent, error) {
	ev := FaultEvent{Fault: f.Name(), Star: -1}
	window := f.Window
	if window <= 0 || window > f.Hold {
		window = f.Hold
	}
	t0 := time.Now()
	streams := c.Streams()
	leaders := readLeaders(ctx, c, streams)
	incs := make([]uint64, len(c.Stars))
	running := map[string]uint64{} // star id → incarnation
	for i, s := range c.Stars {
		doc, ok, body := ReadHealth(ctx, s.Endpoint())
		if !ok {
			return ev, fmt.Errorf("meta-outage: star %d not ready before the outage: %s", i, body)
		}
		incs[i] = doc.Incarnation
		running[s.ID()] = doc.Incarnation
	}
	before := newProcs(c).scrape(ctx)
	repair := func() error {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		return putEvery(rctx, c, nil)
	}
	yes := true
	if err := putEvery(ctx, c, &FaultsPatch{Meta: &FaultPatch{Down: &yes}}); err != nil {
		_ = repair()
		return ev, fmt.Errorf("meta-outage: inject: %w", err)
	}
	down := c.Now()
	start := time.Now()
	var leases map[string]meta.Lease // read once no star can write any more
	var windows []outageWindow
	unready := map[int]string{}
	for k := 1; ; k++ {
		end := min(time.Duration(k)*window, f.Hold)
		sleepCtx(ctx, end-time.Since(start))
		if leases == nil {
			leases = readLeases(ctx, c, streams)
		}
		w := outageWindow{from: down + time.Duration(k-1)*window, to: down + end, stalled: map[string]bool{}}
		for i, s := range c.Stars {
			if _, ok, body := ReadHealth(ctx, s.Endpoint()); !ok && unready[i] == "" {
				unready[i] = fmt.Sprintf("star %d (%s) not ready %v into the metastore outage: %s", i, s.ID(), end.Round(time.Millisecond), body)
			}
			m, err := ScrapeMetrics(ctx, s.Endpoint())
			if err != nil {
				continue // counted as not stalled: the stricter reading
			}
			w.stalled[s.ID()] = metaStalls(m) > metaStalls(before[i])
		}
		windows = append(windows, w)
		if end >= f.Hold || ctx.Err() != nil {
			break
		}
	}
	for i := range c.Stars {
		if msg := unready[i]; msg != "" {
			ev.Violations = append(ev.Violations, "meta-outage: "+msg)
		}
	}
	if err := repair(); err != nil {
		return ev, fmt.Errorf("meta-outage: repair: %w", err)
	}
	up := c.Now()
	var stalledStars []string
	last := windows[len(windows)-1]
	for id, st := range last.stalled {
		if st {
			stalledStars = append(stalledStars, id)
		}
	}
	slices.Sort(stalledStars)
	ev.Detail = fmt.Sprintf("metastore down on every star for %v (%d windows of %v; leaders %s; metastore_slow stalls on %v)",
		(up - down).Round(time.Millisecond), len(windows), window, describeLeaders(streams, leaders), stalledStars)

	// Convergence: fresh heartbeats everywhere, then a quiet dead-after
	// bound (and more) in which a wrongly deposed star would exit.
	converged, why := f.converge(ctx, c, incs)
	if !converged {
		ev.Violations = append(ev.Violations, "meta-outage: after the outage: "+why)
	} else {
		ev.Detail += "; converged: " + why
	}
	ev.Recovered = time.Since(t0)

	ev.Check = func(h *History, _ time.Duration) (string, []string) {
		var bad []string
		acks := h.AckTimes()
		excused := 0
		var perWindow, closed []string
		// Whether each stream was open at its leader when the outage
		// began: an ack returned after its lease was taken.
		open := map[string]bool{}
		for _, s := range streams {
			l, ok := leases[s]
			if !ok {
				open[s] = true // unknown: the stricter reading
				continue
			}
			if inc, ok := running[l.Star]; l.Released || ok && inc != l.Incarnation {
				// Handed off, or held by an incarnation that no longer
				// runs (a kill just before): nobody had it open.
				closed = append(closed, s)
				continue
			}
			acquired := down - start.Sub(time.UnixMilli(l.AcquiredAt))
			for _, a := range acks[s] {
				if t := time.Duration(a[1]); t >= acquired && t < down {
					open[s] = true
					break
				}
			}
			if !open[s] {
				closed = append(closed, s)
			}
		}
		for _, w := range windows {
			fewest, mark := -1, ""
			for _, s := range streams {
				n := 0
				for _, a := range acks[s] {
					if t := time.Duration(a[1]); t >= w.from && t < w.to {
						n++
					}
				}
				if fewest < 0 || n < fewest {
					fewest = n
				}
				if n > 0 {
					continue
				}
				l := leaders[s]
				if ls, ok := leases[s]; ok {
					l = ls.Star
				}
				if !open[s] {
					excused++
					mark = "*"
					continue
				}
				stalled := w.stalled[l]
				if l == "" {
					for _, st := range w.stalled {
						stalled = stalled || st
					}
				}
				if stalled {
					excused++
					mark = "*"
					continue
				}
				bad = append(bad, fmt.Sprintf("meta-outage: %s: no append acknowledged in [%v, %v) of the metastore outage, and its leader %q counted no metastore_slow stall (the budget did not fill)",
					s, w.from.Round(time.Millisecond), w.to.Round(time.Millisecond), l))
			}
			perWindow = append(perWindow, fmt.Sprintf("%d%s", max(fewest, 0), mark))
		}
		note := ""
		if len(closed) > 0 {
			note = fmt.Sprintf("; not open at their leader when it began (excused): %v", closed)
		}
		return fmt.Sprintf("meta-outage at %v for %v: acks of the stream with fewest, per %v window: %s (* excused: its leader counted a metastore_slow stall, or the stream was not open at it); %d stream-windows without acks excused%s",
			down.Round(time.Millisecond), (up - down).Round(time.Millisecond), window, strings.Join(perWindow, " "), excused, note), bad
	}
	return ev, nil
}

// metaStalls counts the stalls a star diagnosed as metastore_slow.
func metaStalls(m Metrics) float64 {
	return m.Sum("starlog_backlog_stalls_total", `cause="metastore_slow"`) +
		m.Sum("starlog_admission_stalls_total", `cause="metastore_slow"`)
}

// converge waits until every star is ready with a heartbeat younger than
// half of dead-after (bounded), then watches for dead-after plus a second
// that none exits or restarts. It reports whether all went well and what
// it saw.
func (f *MetaOutage) converge(ctx context.Context, c *Cluster, incs []uint64) (bool, string) {
	t0 := time.Now()
	deadline := t0.Add(3*f.DeadAfter + 30*time.Second)
	var last string
	for {
		all := true
		for i, s := range c.Stars {
			if s.Exited() {
				return false, fmt.Sprintf("star %d (%s) exited %v after the metastore came back; its output (tail):\n%s",
					i, s.ID(), time.Since(t0).Round(time.Millisecond), lastBytes(s.OutputOfProcess(), 4000))
			}
			doc, ok, body := ReadHealth(ctx, s.Endpoint())
			if !ok || time.Duration(doc.HeartbeatAgeMS)*time.Millisecond >= f.DeadAfter/2 {
				all, last = false, fmt.Sprintf("star %d: %s", i, body)
				break
			}
		}
		if all {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false, fmt.Sprintf("no fresh heartbeat on every star within %v (last: %s)", time.Since(t0).Round(time.Millisecond), last)
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	fresh := time.Since(t0)
	watch := f.DeadAfter + time.Second
	for end := time.Now().Add(watch); time.Now().Before(end) && ctx.Err() == nil; {
		for i, s := range c.Stars {
			if s.Exited() {
				return false, fmt.Sprintf("star %d (%s) exited %v after the metastore came back (%v after fresh heartbeats); its output (tail):\n%s",
					i, s.ID(), time.Since(t0).Round(time.Millisecond), (time.Since(t0) - fresh).Round(time.Millisecond), lastBytes(s.OutputOfProcess(), 4000))
			}
			doc, ok, body := ReadHealth(ctx, s.Endpoint())
			if !ok {
				return false, fmt.Sprintf("star %d (%s) not ready %v after the metastore came back: %s", i, s.ID(), time.Since(t0).Round(time.Millisecond), body)
			}
			if doc.Incarnation != incs[i] {
				return false, fmt.Sprintf("star %d (%s) is incarnation %d, was %d before the outage", i, s.ID(), doc.Incarnation, incs[i])
			}
		}
		sleepCtx(ctx, 200*time.Millisecond)
	}
	return true, fmt.Sprintf("fresh heartbeats on every star %v after, then %v without an exit or restart", fresh.Round(time.Millisecond), watch)
}

// readLeaders reads the lease of each stream (by name) through the test
// process's metastore: the leader's star id, "" when unknown.
func readLeaders(ctx context.Context, c *Cluster, streams []string) map[string]string {
	out := map[string]string{}
	for s, l := range readLeases(ctx, c, streams) {
		out[s] = l.Star
	}
	return out
}

// readLeases reads the lease of each stream (by name) through the test
// process's metastore; a stream whose lease is unknown is missing.
func readLeases(ctx context.Context, c *Cluster, streams []string) map[string]meta.Lease {
	out := map[string]meta.Lease{}
	if c.Meta == nil {
		return out
	}
	for _, s := range streams {
		id, err := streamID(ctx, c.Meta, c.Basin, s)
		if err != nil {
			continue
		}
		l, _, ok, err := leader.ReadLease(ctx, c.Meta, id)
		if err == nil && ok {
			out[s] = l
		}
	}
	return out
}

// streamID is a stream's id from its name row (star/node's StreamRow;
// only the id is read).
func streamID(ctx context.Context, ms meta.Store, basin, name string) (string, error) {
	k := meta.StreamNameKey(basin, name)
	it, err := ms.Get(ctx, k.PK, k.SK)
	if err != nil {
		return "", err
	}
	var row struct {
		ID string `json:"id"`
	}
	if err := json.Unmarshal(it.Val, &row); err != nil {
		return "", err
	}
	if row.ID == "" {
		return "", errors.New("stream row without id")
	}
	return row.ID, nil
}

func describeLeaders(streams []string, leaders map[string]string) string {
	var parts []string
	for _, s := range streams {
		l := leaders[s]
		if l == "" {
			l = "?"
		}
		parts = append(parts, s+"→"+l)
	}
	return strings.Join(parts, " ")
}
