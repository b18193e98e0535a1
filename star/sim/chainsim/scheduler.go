package chainsim

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"testing/synctest"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// The run's phases (VOPR's safety then liveness mode).
type phase uint8

const (
	phaseFaults phase = iota // faults on the menu
	phaseDrain               // healed: writers finish; a deposed one must stop
	phaseFinal               // writers crashed: a successor must settle the chain
	phaseTrim                // the auditor trims what is settled
	phaseDone
)

// Bounds of the phases in fake time (steps are bounded by the swarm).
const (
	quietFor     = 20 * time.Second // no call served for this long: the phase is quiescent
	drainFor     = 5 * time.Minute
	finalFor     = 20 * time.Minute
	maxIdle      = time.Second
	maxFake      = 2 * time.Hour   // a run's bound in fake time, whatever its phases do
	restartAfter = 3 * time.Second // a supervisor restarts a dead star this late
	envIdle      = time.Second     // while nothing is ready, one environment draw per envIdle
	// deposedReads is how many head reads a deposed writer may still make
	// before it counts as retrying forever.
	deposedReads = 40
)

// phaseState is where the run is: its phase, since when, and the actors
// the liveness phases wait for.
type phaseState struct {
	ph               phase
	step             int
	at               time.Time
	settler, trimmer *actor
}

// run is the scheduler: one event per step, and the invariants after each.
func (s *Sim) run() Result {
	s.faulty = true
	s.startWriter()
	p := &phaseState{ph: phaseFaults, at: s.start}
	maxSteps := s.sw.FaultSteps + s.sw.LiveSteps*3 + 1000
	for s.step < maxSteps && p.ph != phaseDone && time.Since(s.start) < maxFake {
		synctest.Wait()
		s.drainEvents()
		s.chk.afterStep()
		if s.opt.onState != nil {
			s.opt.onState(s.objs.print ^ s.meta.Print)
		}
		if s.failure != nil {
			break
		}
		now := time.Now()
		if s.transition(p, now) {
			continue
		}
		if p.ph == phaseFaults && s.restartDue(now) {
			s.startWriter()
			s.step++
			continue
		}
		ready := s.ready(now)
		if p.ph == phaseFaults && s.envDue(now, len(ready)) && s.envEvent() {
			s.step++
			continue
		}
		if c := s.pick(ready); c != nil {
			s.serve(c)
			s.step++
			continue
		}
		s.idle(now)
	}
	if s.failure == nil && p.ph != phaseDone {
		s.fail("liveness", "run-ends", fmt.Sprintf("the run did not end within %d steps and %v (phase %d)", maxSteps, maxFake, p.ph))
	}
	s.shutdown()
	return s.result()
}

// transition moves the run to its next phase when the current one is
// over, and reports whether it did (or failed the run).
func (s *Sim) transition(p *phaseState, now time.Time) bool {
	enter := func(ph phase) bool {
		p.ph, p.step, p.at = ph, s.step, now
		return true
	}
	steps, took := s.step-p.step, now.Sub(p.at)
	switch p.ph {
	case phaseFaults:
		if steps >= s.sw.FaultSteps || s.quiet(now) {
			s.beginDrain()
			return enter(phaseDrain)
		}
	case phaseDrain:
		if s.quiet(now) || steps >= s.sw.LiveSteps || took >= drainFor {
			for _, a := range s.crashable() {
				s.crash(a)
			}
			s.waived = s.chk.liveDemand()
			p.settler = s.startFencer("z1", roleSettler, true)
			return enter(phaseFinal)
		}
	case phaseFinal:
		switch {
		case p.settler.exited && p.settler.err != nil && s.waived == "":
			s.fail("liveness", "settle-returns", fmt.Sprintf("the final settlement failed on a decidable chain: %v", p.settler.err))
			return true
		case p.settler.exited && p.settler.err == nil:
			s.chk.finalCheck()
			if s.sw.Trims == 0 {
				return enter(phaseDone)
			}
			p.trimmer = s.startTrimmer()
			return enter(phaseTrim)
		case p.settler.exited, s.waived != "" && took >= finalFor:
			return enter(phaseDone)
		case s.waived == "" && (steps >= s.sw.LiveSteps || took >= finalFor):
			inv := "settle-returns" // fenced, but the walk, absorb or probe did not finish
			if !s.chk.fenced() {
				inv = "fence-returns"
			}
			s.fail("liveness", inv, fmt.Sprintf("the final settlement did not return within %d steps / %v with %s: %s",
				s.sw.LiveSteps, finalFor, s.healthString(), s.chk.stuckWhere()))
			return true
		}
	case phaseTrim:
		if p.trimmer.exited || steps >= s.sw.LiveSteps || took >= finalFor {
			s.chk.finalCheck()
			return enter(phaseDone)
		}
	}
	return false
}

func (s *Sim) result() Result {
	acks := 0
	for _, e := range s.chk.epochs {
		acks += len(e.acks)
	}
	return Result{
		Swarm: s.sw, Failure: s.failure, Steps: s.step, Idles: s.idles, Checks: s.chk.checks,
		Faults: s.faultCounts, Stats: s.chk.stats, Acks: s.chk.flightsAcked, Waived: s.waived, Trace: s.trace, Took: time.Since(s.start),
	}
}

func (s *Sim) fail(kind, inv, detail string) {
	if s.failure != nil {
		return
	}
	s.failure = &Failure{Kind: kind, Invariant: inv, Detail: detail, Step: s.step}
	s.trace.add(s, "FAIL "+s.failure.Error())
}

// restartDue: a supervisor restarts the star restartAfter after its last
// incarnation died, while the swarm has incarnations left.
func (s *Sim) restartDue(now time.Time) bool {
	if s.incarnation >= uint64(s.sw.Incarnations) || len(s.alive(roleWriter)) > 0 {
		return false
	}
	last := s.start
	for _, a := range s.actors {
		if a.role == roleWriter && a.gone.After(last) {
			last = a.gone
		}
	}
	return now.Sub(last) >= restartAfter
}

// envDue: an environment event may strike before a ready call is served,
// or once per envIdle of fake time while nothing is ready (so idle wakes
// do not multiply the events).
func (s *Sim) envDue(now time.Time, ready int) bool {
	if ready == 0 && now.Sub(s.lastEnv) < envIdle {
		return false
	}
	s.lastEnv = now
	return true
}

// quiet: nothing pending and no call served for quietFor.
func (s *Sim) quiet(now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending) == 0 && now.Sub(s.lastServed) >= quietFor
}

// beginDrain ends the fault phase: no more faults, pauses end, and the
// buckets heal except the liveness down set the atlas picks.
func (s *Sim) beginDrain() {
	s.faulty = false
	for _, a := range s.actors {
		a.pausedUntil = time.Time{}
	}
	down := s.chk.liveDownSet()
	for b := range s.health {
		s.health[b] = bucketHealth{}
	}
	for _, b := range down {
		mode := "down"
		if s.ch.Pick(2) == 1 {
			mode = "hang"
		}
		s.health[b] = bucketHealth{mode: mode, until: s.start.Add(1000 * time.Hour)}
	}
	s.trace.add(s, "liveness: heal, "+s.healthString())
}

func (s *Sim) healthString() string {
	out := "buckets"
	for b, h := range s.health {
		m := h.mode
		if m == "" || !time.Now().Before(h.until) {
			m = "up"
		}
		out += fmt.Sprintf(" %s=%s", s.objs.names[b], m)
	}
	return out
}

// drainEvents takes what actors reported since the last step (notes,
// acks, exits) in actor order, each actor's in its own order.
func (s *Sim) drainEvents() {
	s.mu.Lock()
	var got []struct {
		a  *actor
		ev []event
	}
	for _, a := range s.actors {
		if len(a.events) > 0 {
			got = append(got, struct {
				a  *actor
				ev []event
			}{a, a.events})
			a.events = nil
		}
	}
	s.mu.Unlock()
	slices.SortStableFunc(got, func(x, y struct {
		a  *actor
		ev []event
	}) int {
		return cmp.Compare(x.a.name, y.a.name)
	})
	for _, g := range got {
		for _, ev := range g.ev {
			switch {
			case ev.ack != nil:
				s.trace.add(s, fmt.Sprintf("%s ack e%d/%d", g.a.name, ev.ack.Epoch, ev.ack.Slot))
				s.chk.ack(g.a, *ev.ack)
			case ev.exit:
				g.a.exited, g.a.err = true, ev.err
				if g.a.gone.IsZero() {
					g.a.gone = time.Now()
				}
				s.trace.add(s, fmt.Sprintf("%s exit: %v", g.a.name, stableErr(ev.err)))
				if ev.note == "PANIC" {
					s.fail("crash", "no-panic", fmt.Sprintf("%s panicked: %v", g.a.name, ev.err))
				}
			default:
				for _, k := range []string{"halt", "fenced own", "deposed", "minted"} {
					if strings.HasPrefix(ev.note, k) {
						s.chk.stats["notes-"+strings.ReplaceAll(k, " ", "-")]++
					}
				}
				s.trace.add(s, g.a.name+" "+ev.note)
			}
		}
	}
}

// ready lists the pending calls the scheduler may serve now, in their
// stable order: not hung on their bucket, not from a paused actor, and
// past their bucket's slowness.
func (s *Sim) ready(now time.Time) []*call {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*call
	for _, c := range s.pending {
		if s.readyAt(c, now).After(now) || now.Before(c.actor.pausedUntil) {
			continue
		}
		out = append(out, c)
	}
	return out // pending is kept in the stable order
}

// readyAt is when c may be served: at once, or when its bucket's hang
// ends, or after its bucket's slowness.
func (s *Sim) readyAt(c *call, now time.Time) time.Time {
	if c.bucket < 0 {
		return c.arrived
	}
	h := s.health[c.bucket]
	if !now.Before(h.until) {
		return c.arrived
	}
	switch h.mode {
	case "hang":
		return h.until
	case "slow":
		return c.arrived.Add(h.delay)
	}
	return c.arrived
}

// pick chooses the call to serve. In random mode any ready call. With a
// preemption budget (exhaustive mode) the choice is of the actor: by
// default the one served last keeps going, another costs a preemption,
// and an actor's own calls go in their stable order; choices are made
// only while faults are on (the liveness phase runs the default).
func (s *Sim) pick(ready []*call) *call {
	if len(ready) == 0 {
		return nil
	}
	if s.sw.Preemptions < 0 {
		return ready[s.ch.Pick(len(ready))]
	}
	var order []*call // the first ready call of each actor, the default first
	for _, c := range ready {
		if !slices.ContainsFunc(order, func(d *call) bool { return d.actor == c.actor }) {
			order = append(order, c)
		}
	}
	if i := slices.IndexFunc(order, func(c *call) bool { return c.actor == s.lastActor }); i > 0 {
		order[0], order[i] = order[i], order[0]
	}
	if !s.faulty || s.preempts >= s.sw.Preemptions {
		return order[0]
	}
	i := s.ch.Pick(len(order))
	if i != 0 {
		s.preempts++
	}
	return order[i]
}

// chance draws a fault of probability p while faults are on and the
// budget lasts.
func (s *Sim) chance(p float64) bool {
	if !s.faulty || (s.sw.MaxFaults >= 0 && s.faults >= s.sw.MaxFaults) {
		return false
	}
	if !s.ch.Chance(p) {
		return false
	}
	s.faults++
	return true
}

// serve answers one call: its fault, its effect, its reply.
func (s *Sim) serve(c *call) {
	s.mu.Lock()
	c.done = true
	s.unpendLocked(c)
	s.mu.Unlock()
	s.lastServed, s.lastActor = time.Now(), c.actor
	if c.op == "m.get" && c.key == headKeyString {
		c.actor.headReads++
		s.chk.deposedRead(c.actor)
	}
	var r result
	outcome := "ok"
	switch {
	case c.bucket == -2:
		r.v, r.err = c.apply()
	case c.bucket >= 0 && s.health[c.bucket].mode == "down" && time.Now().Before(s.health[c.bucket].until):
		r.err, outcome = fmt.Errorf("%w: %s down", errBucket, s.objs.names[c.bucket]), "refused-down"
	case c.bucket >= 0 && c.write && s.chance(s.sw.PLost):
		c.apply()
		r.err, outcome = &objstore.IndefiniteError{Err: errLost}, "lost-reply"
	case c.bucket >= 0 && c.write && s.chance(s.sw.PNotLanded):
		r.err, outcome = &objstore.IndefiniteError{Err: errLost}, "not-landed"
	case c.bucket == -1 && s.chance(s.sw.PMetaDown):
		r.err, outcome = errMetaDown, "meta-down"
	case c.bucket == -1 && c.write && s.chance(s.sw.PMetaLost):
		c.apply()
		r.err, outcome = errMetaLost, "meta-lost-reply"
	default:
		r.v, r.err = c.apply()
		if r.err != nil {
			outcome = "err: " + shortErr(r.err)
		}
	}
	if outcome != "ok" && !isErrOutcome(outcome) {
		s.faultCounts[outcome]++
	}
	where := ""
	if c.bucket >= 0 {
		where = s.objs.names[c.bucket] + " "
	}
	s.trace.add(s, fmt.Sprintf("%s %s %s%s %s", c.actor.name, c.op, where, abbrev(c.key), outcome))
	c.reply <- r
}

func isErrOutcome(o string) bool { return len(o) > 4 && o[:4] == "err:" }

var headKeyString = meta.HeadKey(chainStar, chainClass).PK + " " + meta.HeadKey(chainStar, chainClass).SK

// idle lets fake time pass until a call arrives or the next thing is due:
// a slow call ripens, a fault ends, a pause ends, or maxIdle.
func (s *Sim) idle(now time.Time) {
	s.idles++
	next := now.Add(maxIdle)
	s.mu.Lock()
	for _, c := range s.pending {
		if at := s.readyAt(c, now); at.After(now) && at.Before(next) {
			next = at
		}
		if at := c.actor.pausedUntil; at.After(now) && at.Before(next) {
			next = at
		}
	}
	s.mu.Unlock()
	for _, h := range s.health {
		if h.until.After(now) && h.until.Before(next) {
			next = h.until
		}
	}
	// Only a call that is still pending once everyone is parked ends the
	// wait: a call registered and withdrawn within one instant (a retry
	// racing its own cancellation) must not make an iteration, or a run
	// would iterate at instants another run of the seed does not.
	before := map[*call]bool{}
	s.mu.Lock()
	for _, c := range s.pending {
		before[c] = true
	}
	s.mu.Unlock()
	select { // a token of a call already considered
	case <-s.wake:
	default:
	}
	t := time.NewTimer(next.Sub(now))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return
		case <-s.wake:
			synctest.Wait()
			s.mu.Lock()
			fresh := slices.ContainsFunc(s.pending, func(c *call) bool { return !before[c] })
			s.mu.Unlock()
			if fresh {
				return
			}
		}
	}
}

// shutdown ends the run: every pending and later call fails as gone,
// every actor's context ends, and the scheduler waits for them all to exit
// (synctest.Test requires it).
func (s *Sim) shutdown() {
	s.over = true
	s.mu.Lock()
	s.closed = true
	for _, c := range s.pending {
		c.done = true
		c.reply <- result{err: errGone}
	}
	s.pending = nil
	actors := slices.Clone(s.actors)
	s.mu.Unlock()
	for _, a := range actors {
		a.cancel()
	}
	for range 100000 {
		synctest.Wait()
		s.drainEvents()
		if !slices.ContainsFunc(actors, func(a *actor) bool { return !a.exited }) {
			return
		}
		time.Sleep(maxIdle)
	}
}
