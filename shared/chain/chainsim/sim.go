package chainsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/settle"
)

// The chain under test: one star's express chain.
const (
	chainStar  = "s1"
	chainClass = meta.Express
)

// Option adjusts a run.
type Option func(*options)

type options struct {
	newWriter func() Writer
	keepTrace bool
	onState   func(uint64)
}

// WithWriter plugs in another writer (an adapter around star/loglet).
func WithWriter(f func() Writer) Option { return func(o *options) { o.newWriter = f } }

// WithFullTrace keeps every trace line (default: the last traceTail).
func WithFullTrace() Option { return func(o *options) { o.keepTrace = true } }

// WithStates hears the fingerprint of the stores after every step (the
// exhaustive mode counts distinct states).
func WithStates(f func(uint64)) Option { return func(o *options) { o.onState = f } }

// Result is what one run did and found.
type Result struct {
	Swarm   Swarm
	Failure *Failure       // nil when every invariant held
	Steps   int            // calls served and environment events injected
	Idles   int            // times the scheduler let fake time pass
	Checks  int            // invariant predicates evaluated
	Faults  map[string]int // injected, by kind (env events and per-call faults)
	Stats   map[string]int // what happened: epochs minted, cuts, settlements, halts, trims
	Acks    int            // flights acknowledged
	// Waived says why the liveness phase demanded nothing ("" when it did).
	Waived string
	Trace  *Trace
	Took   time.Duration // fake time the run spanned
}

// Failure is one broken invariant.
type Failure struct {
	Kind      string // "safety", "liveness" or "crash"
	Invariant string
	Detail    string
	Step      int
}

func (f *Failure) Error() string {
	return fmt.Sprintf("%s: %s at step %d: %s", f.Kind, f.Invariant, f.Step, f.Detail)
}

// Run runs one simulation inside a synctest bubble: fake time, and
// synctest.Wait to know when every actor is parked on a call.
func Run(t *testing.T, sw Swarm, ch Chooser, opts ...Option) Result {
	o := options{newWriter: func() Writer { return Model{} }}
	for _, f := range opts {
		f(&o)
	}
	var res Result
	synctest.Test(t, func(*testing.T) {
		s := newSim(sw, ch, o)
		res = s.run()
	})
	return res
}

// Sim is one run's world: the stores, the actors, the pending calls.
type Sim struct {
	sw    Swarm
	ch    Chooser
	opt   options
	objs  *objects
	meta  *table
	trace *Trace
	chk   *checker
	start time.Time

	mu       sync.Mutex // guards the fields below against actor goroutines
	pending  []*call
	arrivals uint64
	actors   []*actor
	closed   bool
	direct   bool // serve calls inline (store conformance tests)
	lastCall time.Time
	wake     chan struct{}

	// Owned by the scheduler goroutine.
	step        int
	idles       int
	health      []bucketHealth
	faultCounts map[string]int
	faults      int // faults injected (against MaxFaults)
	faulty      bool
	preempts    int
	lastServed  *actor
	incarnation uint64
	fencers     int
	trims       int
	failure     *Failure
	waived      string
	lastEnv     time.Time
	over        bool // shutting down: the trace is closed
}

func newSim(sw Swarm, ch Chooser, o options) *Sim {
	s := &Sim{
		sw: sw, ch: ch, opt: o,
		objs: newObjects(sw.K), meta: newTable(),
		trace: newTrace(o.keepTrace), wake: make(chan struct{}, 1),
		health: make([]bucketHealth, sw.K), faultCounts: map[string]int{},
		start: time.Now(),
	}
	s.lastCall = s.start
	s.chk = newChecker(s)
	return s
}

// newDirect is a sim whose stores serve every call inline: for testing the
// stores themselves.
func newDirect(k int) *Sim {
	s := newSim(Swarm{K: k, W: 1}, NewRandom(0), options{})
	s.direct = true
	return s
}

// errGone answers the calls of a crashed actor and every call once the
// run is over: they never land.
var errGone = errors.New("chainsim: the process is gone")

// Injected failures, as the caller sees them.
var (
	errLost     = errors.New("chainsim: reply lost")
	errBucket   = errors.New("chainsim: bucket unavailable")
	errMetaDown = errors.New("chainsim: metastore unavailable")
	errMetaLost = errors.New("chainsim: metastore reply lost")
)

type result struct {
	v   any
	err error
}

// call is one store or metastore request waiting for the scheduler.
type call struct {
	actor   *actor
	op      string // put get head delete deletes list | m.get m.put m.del m.query m.batchput m.batchdel | archive
	bucket  int    // the bucket; -1 the metastore; -2 the sim itself
	key     string
	digest  uint64 // of the body or value: orders calls that tie on the rest
	write   bool   // mutates: a lost reply leaves the outcome unknown
	arrival uint64
	arrived time.Time
	apply   func() (any, error) // the effect, run on the scheduler goroutine
	reply   chan result
	done    bool // answered or withdrawn (under Sim.mu)
}

// less orders pending calls by what they are, never by arrival (only
// identical calls fall back to it).
func (c *call) compare(d *call) int {
	if x := strings.Compare(c.actor.name, d.actor.name); x != 0 {
		return x
	}
	if x := strings.Compare(c.op, d.op); x != 0 {
		return x
	}
	if c.bucket != d.bucket {
		return c.bucket - d.bucket
	}
	if x := strings.Compare(c.key, d.key); x != 0 {
		return x
	}
	if c.digest != d.digest {
		if c.digest < d.digest {
			return -1
		}
		return 1
	}
	return int(int64(c.arrival) - int64(d.arrival))
}

// do hands a call to the scheduler and blocks until it is served, or ctx
// ends first (the call then never lands).
func (s *Sim) do(ctx context.Context, c *call) (any, error) {
	s.mu.Lock()
	if s.closed || c.actor.dead {
		s.mu.Unlock()
		return nil, errGone
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return nil, s.ctxErr(c, err)
	}
	if s.direct {
		defer s.mu.Unlock()
		return c.apply()
	}
	c.arrival, c.arrived, c.reply = s.arrivals, time.Now(), make(chan result, 1)
	s.arrivals++
	s.lastCall = c.arrived
	// pending stays in the stable order, so a step only filters it.
	i, _ := slices.BinarySearchFunc(s.pending, c, (*call).compare)
	s.pending = slices.Insert(s.pending, i, c)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case r := <-c.reply:
		return r.v, r.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	if c.done { // served meanwhile: the reply stands
		s.mu.Unlock()
		r := <-c.reply
		return r.v, r.err
	}
	c.done = true
	s.unpendLocked(c)
	s.mu.Unlock()
	return nil, s.ctxErr(c, ctx.Err())
}

// ctxErr is what a client returns when it gives up on a call: for a
// store write the outcome is unknown (S3 clients report a timed-out PUT
// as indefinite).
func (s *Sim) ctxErr(c *call, err error) error {
	if c.write && c.bucket >= 0 {
		return &objstore.IndefiniteError{Err: err}
	}
	return err
}

func (s *Sim) unpendLocked(c *call) {
	if i := slices.Index(s.pending, c); i >= 0 {
		s.pending = slices.Delete(s.pending, i, i+1)
	}
}

// role is what an actor does.
type role uint8

const (
	roleWriter  role = iota // an incarnation of the chain's star
	roleFencer              // a successor settling the chain
	roleTrimmer             // the auditor's trim
	roleSettler             // the liveness phase's final settlement
)

// actor is one simulated process.
type actor struct {
	name   string // in traces: w1, f1, t1, z1
	role   role
	id     string // its chain actor id (incarnation)
	seed   uint64
	ctx    context.Context
	cancel context.CancelFunc

	// Under Sim.mu.
	dead   bool // crashed: its calls never land
	events []event

	// Owned by the scheduler.
	exited      bool
	err         error
	gone        time.Time // when it crashed or exited
	pausedUntil time.Time
	epoch       uint64 // the last epoch it minted (writers)
	headReads   int    // metastore reads of the chain head it was served
	deposedAt   int    // its head reads when the rows first showed it deposed (-1: not)
}

type event struct {
	note string
	ack  *Ack
	exit bool
	err  error
}

func (s *Sim) emit(a *actor, ev event) {
	s.mu.Lock()
	a.events = append(a.events, ev)
	s.mu.Unlock()
}

// spawn starts an actor's goroutine.
func (s *Sim) spawn(name string, r role, id string, seed uint64, run func(ctx context.Context, a *actor) error) *actor {
	ctx, cancel := context.WithCancel(context.Background())
	a := &actor{name: name, role: r, id: id, seed: seed, ctx: ctx, cancel: cancel, deposedAt: -1}
	s.mu.Lock()
	s.actors = append(s.actors, a)
	s.mu.Unlock()
	s.trace.add(s, fmt.Sprintf("start %s %s", name, id))
	go func() {
		var err error
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
				s.emit(a, event{exit: true, err: err, note: "PANIC"})
				return
			}
			s.emit(a, event{exit: true, err: err})
		}()
		err = run(ctx, a)
	}()
	return a
}

// alive lists the actors still running, in start order.
func (s *Sim) alive(r role) []*actor {
	var out []*actor
	for _, a := range s.actors {
		if a.role == r && !a.exited && !a.dead {
			out = append(out, a)
		}
	}
	return out
}

// crash kills an actor: its pending calls are answered as gone (never
// landed) and its context ends.
func (s *Sim) crash(a *actor) {
	s.mu.Lock()
	a.dead = true
	for _, c := range slices.Clone(s.pending) {
		if c.actor == a {
			c.done = true
			s.unpendLocked(c)
			c.reply <- result{err: errGone}
		}
	}
	s.mu.Unlock()
	a.cancel()
	a.gone = time.Now()
	s.trace.add(s, "crash "+a.name)
}

// chainFor is actor a's view of the chain, seeded from its sub-seed.
func (s *Sim) chainFor(a *actor) *chain.Chain {
	c := chain.New(chainStar, chainClass, a.id, metaView{s, a}, storeView{s, a}).Seed(a.seed)
	c.AttemptTimeout = s.sw.Attempt
	return c
}

func (s *Sim) streams() []string {
	out := make([]string, s.sw.Streams)
	for i := range out {
		out[i] = fmt.Sprintf("st%d", i)
	}
	return out
}

func (s *Sim) params() meta.EpochParams {
	return meta.EpochParams{Buckets: slices.Clone(s.objs.names), W: s.sw.W, Window: s.sw.Window}
}

// absorber returns an absorber on a's metastore view, seeded with the
// tails of every stream but the swarm's unseeded one (see Swarm.Unseeded).
func (s *Sim) absorber(ctx context.Context, a *actor, c *chain.Chain) (*absorb.Absorber, error) {
	ms := metaView{s, a}
	abs := &absorb.Absorber{Star: chainStar, Class: chainClass, Meta: ms, UpdateEpoch: c.UpdateEpoch, Concurrency: 4,
		Rip: absorb.Ripening{Trigger: 1 << 20, Linger: time.Second, AgeCap: time.Minute}}
	for i, st := range s.streams() {
		if i == s.sw.Unseeded {
			continue
		}
		_, tot, err := Tail(ctx, ms, st)
		if err != nil {
			return nil, err
		}
		abs.Seed(st, tot)
	}
	return abs, nil
}

func (s *Sim) actorSeed(n int) uint64 {
	return s.sw.ActorSeeds[n%len(s.sw.ActorSeeds)] + uint64(n/len(s.sw.ActorSeeds))
}

// startWriter starts the chain's star as its next incarnation.
func (s *Sim) startWriter() *actor {
	s.incarnation++
	n := s.incarnation
	id := chain.Incarnation(chainStar, n)
	seed := s.actorSeed(int(n))
	w := s.opt.newWriter()
	return s.spawn(fmt.Sprintf("w%d", n), roleWriter, id, seed, func(ctx context.Context, a *actor) error {
		c := s.chainFor(a)
		env := WriterEnv{
			Star: chainStar, Incarnation: id, Class: chainClass, Params: s.params(),
			Chain: c, Meta: metaView{s, a}, Deadline: s.sw.Deadline,
			Streams: s.streams(), Flights: s.sw.Flights, MaxRecords: max(1, s.sw.MaxRecords),
			Rand: rand.New(rand.NewPCG(seed, 1)),
			Settle: func(ctx context.Context) error {
				abs, err := s.absorber(ctx, a, c)
				if err != nil {
					return err
				}
				return settle.Chain(ctx, c, abs)
			},
			NewAbsorber: func() *absorb.Absorber {
				return &absorb.Absorber{Star: chainStar, Class: chainClass, Meta: metaView{s, a}, UpdateEpoch: c.UpdateEpoch, Concurrency: 4,
					Rip: absorb.Ripening{Trigger: 1 << 20, Linger: time.Second, AgeCap: time.Minute}}
			},
			Ack:  func(ack Ack) { s.emit(a, event{ack: &ack}) },
			Note: func(f string, args ...any) { s.emit(a, event{note: stable(fmt.Sprintf(f, args...))}) },
		}
		return w.Run(ctx, env)
	})
}

// startFencer starts a successor (another star) that settles the chain
// through the head it judged, as an open gate or the janitor does.
func (s *Sim) startFencer(name string, r role, retry bool) *actor {
	s.fencers++
	id := chain.Incarnation(fmt.Sprintf("s%d", 100+s.fencers), 1)
	return s.spawn(name, r, id, s.actorSeed(100+s.fencers), func(ctx context.Context, a *actor) error {
		c := s.chainFor(a)
		for attempt := 0; ; attempt++ {
			err := s.settleOnce(ctx, a, c)
			if err == nil || !retry || ctx.Err() != nil || isUndecidable(err) {
				return err
			}
			s.emit(a, event{note: "settle failed; retrying: " + stable(err.Error())})
			t := time.NewTimer(time.Second)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	})
}

func (s *Sim) settleOnce(ctx context.Context, a *actor, c *chain.Chain) error {
	h, _, ok, err := c.Head(ctx)
	if err != nil || !ok {
		return err
	}
	abs, err := s.absorber(ctx, a, c)
	if err != nil {
		return err
	}
	return settle.ChainThrough(ctx, c, abs, h.Epoch)
}

// isUndecidable reports the fixed fence's typed refusal to guess
// (*chain.UndecidableError, which today's chain does not have yet: it is
// matched by name so this package builds against both).
func isUndecidable(err error) bool {
	for _, e := range unwrapAll(err) {
		if strings.HasSuffix(fmt.Sprintf("%T", e), ".UndecidableError") {
			return true
		}
	}
	return false
}

func unwrapAll(err error) []error {
	if err == nil {
		return nil
	}
	out := []error{err}
	switch u := err.(type) {
	case interface{ Unwrap() error }:
		out = append(out, unwrapAll(u.Unwrap())...)
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			out = append(out, unwrapAll(e)...)
		}
	}
	return out
}

// startTrimmer starts the auditor's trim: for every settled epoch, the
// settle moves the absorbed slots' bytes (modelled by the archive call),
// the rewritten cursor advances over them the way the trim-check does,
// then the real chain.Trim deletes them.
func (s *Sim) startTrimmer() *actor {
	s.trims++
	return s.spawn(fmt.Sprintf("t%d", s.trims), roleTrimmer, "auditor", s.actorSeed(200+s.trims), func(ctx context.Context, a *actor) error {
		c := s.chainFor(a)
		epochs, err := listEpochs(ctx, metaView{s, a})
		if err != nil {
			return err
		}
		for _, e := range epochs {
			if !e.Settled || e.Rewritten >= e.Checkpoint {
				continue
			}
			upTo := e.Checkpoint
			if _, err := s.do(ctx, &call{actor: a, op: "archive", bucket: -2, key: fmt.Sprintf("e%d [%d,%d)", e.Epoch, e.Rewritten, upTo),
				apply: func() (any, error) { s.chk.archive(e.Epoch, e.Rewritten, upTo); return nil, nil }}); err != nil {
				return err
			}
			rec, err := c.UpdateEpoch(ctx, e.Epoch, func(x *meta.Epoch) bool {
				if x.Rewritten >= upTo {
					return false
				}
				x.Rewritten = upTo
				return true
			})
			if err != nil {
				return err
			}
			if err := c.Trim(ctx, rec, rec.Rewritten); err != nil {
				return err
			}
		}
		return nil
	})
}

// listEpochs reads every epoch record of the chain, in order.
func listEpochs(ctx context.Context, ms meta.Store) ([]meta.Epoch, error) {
	q := meta.Query{PK: meta.ChainPK(chainStar, chainClass), From: "e#", To: "e#~"}
	var out []meta.Epoch
	for range 1000 {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, it := range pg.Items {
			var e meta.Epoch
			if err := meta.Decode(it.Val, &e); err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
	return nil, errors.New("chainsim: epoch listing does not end")
}
