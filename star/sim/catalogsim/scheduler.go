package catalogsim

import (
	"cmp"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"testing/synctest"
	"time"

	"github.com/starlog/starlog/shared/meta"
)

// Bounds of a run in fake time and steps.
const (
	maxIdle    = time.Second
	maxFake    = time.Hour       // a run's bound in fake time, whatever it does
	quiesceFor = 2 * time.Minute // after the faults: clients stop, tasks end
	maxHold    = 5 * time.Second // a held reply is delivered this late at the latest
	envIdle    = time.Second     // while nothing is ready, one environment draw per envIdle
)

// event is what a goroutine reports to the scheduler; drained in source
// order at the next step.
type event struct {
	src  string
	note string
	task bool // the task src ended (note: how)

	start   *op // a client operation starts
	end     *op // … and ended (note: how)
	ack     bool
	seq     *op // an append was sequenced (seqInfo: where)
	seqInfo *op

	read     []readRecord
	readDone bool

	zombied *incarnation
	closed  *incarnation

	janitor, clean bool // a janitor pass ended (note: what it did); clean: nothing deleted was left to reclaim
}

func (s *Sim) emit(ev event) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
}

// task runs fn in its own goroutine; its end is reported as an event.
func (s *Sim) task(name string, fn func() string) {
	s.mu.Lock()
	s.taskSeq[name]++ // tasks start from the scheduler goroutine: a stable name
	if k := s.taskSeq[name]; k > 1 {
		name = fmt.Sprintf("%s#%d", name, k)
	}
	s.tasks[name] = true
	s.mu.Unlock()
	go func() {
		note := "PANIC"
		defer func() {
			if p := recover(); p != nil {
				s.emit(event{src: name, task: true, note: fmt.Sprintf("PANIC: %v", p)})
				return
			}
			s.emit(event{src: name, task: true, note: note})
		}()
		note = fn()
	}()
}

// run is the scheduler: one event per step, and the invariants after each.
func (s *Sim) run() Result {
	s.faulty = true
	for _, st := range starNames[:s.sw.Stars] {
		s.startStar(st)
	}
	s.startClients()
	if s.sw.Audit {
		s.startAudit()
	}
	quiesceAt := time.Time{}
	for time.Since(s.start) < maxFake {
		s.settle()
		s.drainEvents()
		s.chk.afterStep()
		if s.failure != nil || s.stalled != "" {
			break
		}
		if s.opt.cut.Load() {
			s.cut = true
			s.trace.add(s, "CUT: the run's real-time deadline passed; the run ends here (its invariants held so far)")
			break
		}
		now := time.Now()
		if s.faulty && (s.step >= s.sw.FaultSteps || now.Sub(s.start) >= s.sw.FaultTime) {
			s.endFaults()
			quiesceAt = now
			continue
		}
		if !s.faulty && !s.reclaiming && (s.quiet() || now.Sub(quiesceAt) >= quiesceFor) {
			if !s.sw.Audit {
				break
			}
			// The clients stopped: the settle runs stop, and the janitor
			// runs until a pass finds no deleted stream left to reclaim.
			s.reclaiming, quiesceAt = true, now
			for _, inc := range s.settlers {
				inc.cancel()
			}
			s.trace.add(s, "clients stopped: the janitor reclaims")
			continue
		}
		if s.reclaiming && (s.reclaimed || now.Sub(quiesceAt) >= reclaimFor) {
			s.chk.checkReclaimed()
			break
		}
		if s.restartDue(now) {
			s.step++
			continue
		}
		if i := slices.IndexFunc(s.held, func(h held) bool { return now.Sub(h.since) >= maxHold }); i >= 0 {
			s.release(i)
			s.step++
			continue
		}
		ready := s.ready()
		if s.faulty && s.envDue(now, len(ready)) && s.envEvent(now) {
			s.step++
			continue
		}
		if len(ready) > 0 {
			s.serve(ready[s.ch.Pick(len(ready))])
			s.step++
			continue
		}
		s.idle(now)
	}
	s.shutdown()
	return s.result()
}

func (s *Sim) result() Result {
	return Result{Swarm: s.sw, Failure: s.failure, Known: s.known, Stalled: s.stalled, Cut: s.cut, Steps: s.step, Checks: s.chk.checks,
		Faults: s.faultCounts, Stats: s.chk.stats, Trace: s.trace, Took: time.Since(s.start)}
}

func (s *Sim) fail(kind, inv, detail string) {
	if s.failure != nil {
		return
	}
	f := &Failure{Kind: kind, Invariant: inv, Detail: detail, Step: s.step}
	if s.opt.goOn[inv] {
		if s.known == nil {
			s.known = map[string]*Failure{}
		}
		if s.known[inv] == nil {
			s.known[inv] = f
		}
		s.trace.add(s, "BROKEN (run goes on) "+f.Error())
		return
	}
	s.failure = f
	s.trace.add(s, "FAIL "+s.failure.Error())
}

// endFaults ends the fault phase: held replies are delivered, partitions
// heal, the clients stop, and stars that are down restart.
func (s *Sim) endFaults() {
	s.faulty = false
	for len(s.held) > 0 {
		s.release(0)
	}
	for _, inc := range s.incs {
		inc.cutUntil = time.Time{}
	}
	for _, c := range s.clients {
		c.cancel()
	}
	s.trace.add(s, "faults end: replies delivered, partitions healed, clients stop")
}

// quiet: the clients and every task ended, nothing is pending.
func (s *Sim) quiet() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pending) > 0 {
		return false
	}
	for name := range s.tasks {
		if !strings.HasPrefix(name, "open-") && !strings.HasPrefix(name, "audit-") {
			return false
		}
	}
	return true
}

// restartDue restarts a star whose supervisor's delay passed.
func (s *Sim) restartDue(now time.Time) bool {
	for _, st := range starNames[:s.sw.Stars] {
		if at, ok := s.restartAt[st]; ok && !now.Before(at) {
			s.startStar(st)
			return true
		}
	}
	return false
}

// envDue: an environment event may strike before a ready call is served,
// or once per envIdle of fake time while nothing is ready.
func (s *Sim) envDue(now time.Time, ready int) bool {
	if ready == 0 && now.Sub(s.lastEnv) < envIdle {
		return false
	}
	s.lastEnv = now
	return true
}

// drainEvents takes what goroutines reported since the last step, in
// source order, each source's in its own order.
func (s *Sim) drainEvents() {
	s.mu.Lock()
	evs := s.events
	s.events = nil
	for _, ev := range evs {
		if ev.task {
			delete(s.tasks, ev.src)
		}
	}
	s.mu.Unlock()
	slices.SortStableFunc(evs, func(a, b event) int { return cmp.Compare(a.src, b.src) })
	for _, ev := range evs {
		switch {
		case ev.task:
			if ev.note != "stopped" {
				s.trace.add(s, ev.src+" "+ev.note)
			}
			if strings.HasPrefix(ev.note, "PANIC") {
				s.fail("crash", "no-panic", ev.src+": "+ev.note)
			}
		case ev.start != nil:
			s.chk.opStart(ev.start)
		case ev.seq != nil:
			s.chk.sequenced(ev.seq, ev.seqInfo)
		case ev.end != nil:
			s.chk.opEnd(ev.end, ev.note, ev.ack, ev.read, ev.readDone)
		case ev.zombied != nil:
			s.trace.add(s, ev.zombied.name+" zombied: exits")
			s.closeGracefully(ev.zombied, "exit", nil)
		case ev.janitor:
			if !ev.clean {
				s.trace.add(s, ev.src+" "+ev.note)
			}
			if s.reclaiming && ev.clean {
				// Quiet only if nothing deleted holds rows now: a star's
				// chain settlement may write a deleted stream's span
				// ref after the pass, which a later pass registers again.
				s.reclaimed = s.chk.unreclaimed() == ""
			}
		case ev.closed != nil:
			if s.cur[ev.closed.star] == ev.closed && s.faulty && !ev.closed.dead {
				s.restartAt[ev.closed.star] = time.Now().Add(restartAfter)
			}
		default:
			s.trace.add(s, ev.src+" "+ev.note)
		}
	}
}

// ready lists the pending calls in their stable order.
func (s *Sim) ready() []*call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.pending)
}

// chance draws a fault of probability p while faults are on.
func (s *Sim) chance(p float64) bool {
	return s.faulty && s.ch.Chance(p)
}

// serve answers one call: its fault, its effect, its reply (or holds the
// reply back).
func (s *Sim) serve(c *call) {
	s.mu.Lock()
	c.done = true
	s.unpendLocked(c)
	s.mu.Unlock()
	if c.park {
		// A pause, not a metastore call: no fault but being parked.
		if s.chance(s.sw.PPark) {
			s.faultCounts["parked"]++
			s.held = append(s.held, held{c: c, since: time.Now()})
			s.trace.add(s, fmt.Sprintf("%s %s %s parked", c.who, c.op, abbrev(c.key)))
			return
		}
		for i := range s.held {
			if h := s.held[i].c; h.park && h.inc == c.inc && h.op == c.op && h.key == c.key {
				s.held[i].beside = true
			}
		}
		s.trace.add(s, fmt.Sprintf("%s %s %s", c.who, c.op, abbrev(c.key)))
		c.reply <- result{}
		return
	}
	var r result
	outcome := "ok"
	switch {
	case time.Now().Before(c.inc.cutUntil):
		r.err, outcome = errCutOff, "cut-off"
	case s.chance(s.sw.PMetaDown):
		r.err, outcome = errMetaDown, "meta-down"
	case c.write && s.chance(s.sw.PMetaLost):
		c.apply()
		r.err, outcome = errMetaLost, "meta-lost-reply"
	default:
		r.v, r.err = c.apply()
		if r.err != nil {
			outcome = "err: " + shortErr(r.err)
		}
	}
	if outcome == "meta-down" || outcome == "meta-lost-reply" {
		s.faultCounts[outcome]++
	}
	pHold := s.sw.PHold
	if settleRun(c) && rowsRead(c) {
		// A settle run stalls (its process paused) with a stream's rows
		// in hand, before it decides and commits.
		pHold = s.sw.PStall
	}
	if outcome != "cut-off" && s.chance(pHold) {
		s.faultCounts["held"]++
		s.held = append(s.held, held{c: c, r: r, since: time.Now()})
		s.trace.add(s, fmt.Sprintf("%s %s %s %s, reply held", c.who, c.op, abbrev(c.key), outcome))
		return
	}
	s.trace.add(s, fmt.Sprintf("%s %s %s %s", c.who, c.op, abbrev(c.key), outcome))
	c.reply <- r
}

// release delivers the i-th held reply.
func (s *Sim) release(i int) {
	h := s.held[i]
	s.held = slices.Delete(s.held, i, i+1)
	what := "held reply delivered"
	if h.c.park {
		what = "unparked"
	}
	s.trace.add(s, fmt.Sprintf("%s %s %s: %s", h.c.who, h.c.op, abbrev(h.c.key), what))
	h.c.reply <- h.r
}

// idle lets fake time pass until a call arrives or the next thing is due.
func (s *Sim) idle(now time.Time) {
	next := now.Add(maxIdle)
	for _, at := range s.restartAt {
		if at.After(now) && at.Before(next) {
			next = at
		}
	}
	for _, inc := range s.incs {
		if at := inc.cutUntil; at.After(now) && at.Before(next) {
			next = at
		}
	}
	for _, h := range s.held {
		if at := h.since.Add(maxHold); at.After(now) && at.Before(next) {
			next = at
		}
	}
	// Only a call still pending once everyone is parked ends the wait: a
	// call registered and withdrawn within one instant must not make an
	// iteration another run of the seed does not. A call that arrived
	// since the scheduler looked (a task an event started) ends it at once.
	select { // a token of a call already considered
	case <-s.wake:
	default:
	}
	s.mu.Lock()
	if len(s.pending) > 0 {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	// Nothing is ready: a held reply comes now rather than after fake
	// time passes (a goroutine the passing time wakes may wait for a
	// lock its caller holds, and then no time passes at all).
	// A lease read, and a request parked before it opens a stream, may
	// stay held while time passes: star/node never reads a lease under a
	// stream's slot lock (leadIn claims before it locks) and parks before
	// it takes the lock, so no goroutine the time wakes waits for them.
	// So may a settle run's reply: it holds no lock of a star.
	if i := slices.IndexFunc(s.held, func(h held) bool { return !leaseRead(h.c) && !h.c.park && !settleRun(h.c) }); i >= 0 {
		s.release(i)
		return
	}
	before := map[*call]bool{}
	if st := s.bubbleState(); st == bubbleParked && !s.lockBound() {
		return // a waiter was only being woken: look again
	} else if st == bubbleParked {
		// A goroutine waits for a lock whose holder waits for a held
		// reply or a timer: fake time cannot pass (synctest counts a lock
		// wait as running), so the oldest held reply comes now.
		if len(s.held) > 0 {
			s.release(0)
			return
		}
		s.stalled = "a goroutine waits for a mutex while no call is pending, so fake time cannot pass (synctest counts a lock wait as running); the bubble:\n" + s.bubbleDump()
		s.trace.add(s, "STALLED: the run ends here (a limit of the harness, not a breach)")
		return
	}
	t := time.NewTimer(next.Sub(now))
	defer t.Stop()
	for {
		select {
		case <-t.C:
			return
		case <-s.wake:
			s.settle()
			s.mu.Lock()
			fresh := slices.ContainsFunc(s.pending, func(c *call) bool { return !before[c] })
			s.mu.Unlock()
			if fresh {
				return
			}
		}
	}
}

// shutdown ends the run: every incarnation is crashed (its calls answered
// as gone), the clients stop, and the scheduler waits for every goroutine
// to end (synctest.Test requires it).
func (s *Sim) shutdown() {
	for _, c := range s.clients {
		c.cancel()
	}
	s.auditCancel()
	if s.scratch != "" {
		defer os.RemoveAll(s.scratch)
	}
	for len(s.held) > 0 {
		s.release(0)
	}
	s.over = true
	for _, inc := range s.incs {
		if !inc.dead {
			s.crash(inc)
		}
	}
	s.mu.Lock()
	s.closed = true
	for _, c := range s.pending {
		c.done = true
		c.reply <- result{err: errGone}
	}
	s.pending = nil
	s.mu.Unlock()
	for range 100000 {
		synctest.Wait()
		s.mu.Lock()
		for _, c := range s.pending {
			c.done = true
			c.reply <- result{err: errGone}
		}
		s.pending = nil
		for _, ev := range s.events {
			if ev.task {
				delete(s.tasks, ev.src)
			}
		}
		s.events = nil
		left := len(s.tasks)
		s.mu.Unlock()
		if left == 0 {
			return
		}
		time.Sleep(maxIdle)
	}
}

// leaseRead says whether c reads a stream's lease.
func leaseRead(c *call) bool {
	return c.op == "m.get" && strings.HasPrefix(c.key, "stream#") && strings.HasSuffix(c.key, " lease")
}

// settleRun says whether c is a settle run's call (the auditor's s1, s2).
func settleRun(c *call) bool {
	return c.inc.star == "auditor" && c.inc.name != "j"
}

// rowsRead says whether c reads a stream's rows backwards from the
// greatest (a settle's view of the stream's tail).
func rowsRead(c *call) bool {
	return c.op == "m.query" && strings.HasPrefix(c.key, "stream#") && strings.Contains(c.key, " "+meta.RefPrefix+"..") && strings.Contains(c.key, "back=true")
}

// lockBound says whether the bubble stays parked with a goroutine waiting
// for a mutex and no call pending, judged over many yields: a waiter
// whose holder has just unlocked shows as waiting for a moment, and a
// judgment on that moment would end a run (or deliver a held reply)
// where another run of the seed goes on.
func (s *Sim) lockBound() bool {
	for range lockLooks {
		runtime.Gosched()
		if s.bubbleState() != bubbleParked {
			return false
		}
		s.mu.Lock()
		n := len(s.pending)
		s.mu.Unlock()
		if n > 0 {
			return false
		}
	}
	return true
}

// lockLooks is how many yields lockBound looks through.
const lockLooks = 50
