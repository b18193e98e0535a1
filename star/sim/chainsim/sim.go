package chainsim

import (
	"fmt"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/sim/simmeta"
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
	o := options{newWriter: func() Writer { return Loglet{} }}
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
	meta  *simmeta.Table
	trace *Trace
	chk   *checker
	start time.Time

	mu       sync.Mutex // guards the fields below against actor goroutines
	pending  []*call
	arrivals uint64
	actors   []*actor
	closed   bool
	direct   bool // serve calls inline (store conformance tests)
	wake     chan struct{}

	// Owned by the scheduler goroutine.
	step        int
	idles       int
	health      []bucketHealth
	faultCounts map[string]int
	faults      int // faults injected (against MaxFaults)
	faulty      bool
	preempts    int
	lastActor   *actor // whose call was served last
	incarnation uint64
	fencers     int
	trims       int
	failure     *Failure
	waived      string
	lastEnv     time.Time
	lastServed  time.Time // when the last call was served
	over        bool      // shutting down: the trace is closed
}

func newSim(sw Swarm, ch Chooser, o options) *Sim {
	s := &Sim{
		sw: sw, ch: ch, opt: o,
		objs: newObjects(sw.K), meta: simmeta.NewTable(),
		trace: newTrace(o.keepTrace), wake: make(chan struct{}, 1),
		health: make([]bucketHealth, sw.K), faultCounts: map[string]int{},
		start: time.Now(),
	}
	s.lastServed = s.start
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
