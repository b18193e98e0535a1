package catalogsim

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/star/sim/chainsim"
	"github.com/starlog/starlog/star/sim/simmeta"
)

// Option adjusts a run.
type Option func(*options)

type options struct {
	// goOn are invariants whose breach is recorded (Result.Known) without
	// ending the run: known defects, so one run can show several.
	goOn      map[string]bool
	keepTrace bool
	verbose   bool // the stars log to stderr
	// deadline is the real time at which the run is cut short (zero:
	// none); cut is set when it passes (a timer outside the bubble: the
	// bubble's clock is fake).
	deadline time.Time
	cut      atomic.Bool
}

// WithFullTrace keeps every trace line (default: the last traceTail).
func WithFullTrace() Option { return func(o *options) { o.keepTrace = true } }

// WithGoOn records breaches of the named invariants in Result.Known and
// runs on (the first breach of each is kept).
func WithGoOn(invariants ...string) Option {
	return func(o *options) {
		if o.goOn == nil {
			o.goOn = map[string]bool{}
		}
		for _, inv := range invariants {
			o.goOn[inv] = true
		}
	}
}

// WithLogs lets the stars log to stderr.
func WithLogs() Option { return func(o *options) { o.verbose = true } }

// WithDeadline cuts the run short at real time at: the scheduler stops
// at its next step and shuts the world down as at a normal end. Every
// invariant checked after each step held for the steps that ran; the
// end-of-run checks (reclaimed) are not made, and Result.Cut says so.
func WithDeadline(at time.Time) Option { return func(o *options) { o.deadline = at } }

// Result is what one run did and found.
type Result struct {
	Swarm   Swarm
	Failure *Failure // nil when every invariant held
	// Known are the first breaches of the invariants WithGoOn named.
	Known map[string]*Failure
	// Stalled says why the run ended early without a verdict on the rest
	// ("" when it did not): see Sim.idle.
	Stalled string
	// Cut says the run reached its real-time deadline (WithDeadline)
	// before its end: its verdict covers the steps that ran.
	Cut    bool
	Steps  int            // calls served and environment events injected
	Checks int            // invariant predicates evaluated
	Faults map[string]int // injected, by kind
	Stats  map[string]int // what happened: ops by kind and outcome, acks, reads
	Trace  *Trace
	Took   time.Duration // fake time the run spanned
}

// Failure is one broken invariant.
type Failure struct {
	Kind      string // "safety" or "crash"
	Invariant string
	Detail    string
	Step      int
}

func (f *Failure) Error() string {
	return fmt.Sprintf("%s: %s at step %d: %s", f.Kind, f.Invariant, f.Step, f.Detail)
}

// stallAfter is the real time after which a run counts as stalled.
const stallAfter = 3 * time.Minute

// Run runs one simulation inside a synctest bubble: fake time, and
// synctest.Wait to know when every goroutine is parked on a call.
func Run(t *testing.T, sw Swarm, ch chainsim.Chooser, opts ...Option) Result {
	o := &options{}
	for _, f := range opts {
		f(o)
	}
	if !o.deadline.IsZero() {
		cut := time.AfterFunc(time.Until(o.deadline), func() { o.cut.Store(true) })
		defer cut.Stop()
	}
	var res Result
	// A run that stalls (a goroutine waiting for a lock whose holder waits
	// for fake time: synctest cannot pass it) would hang the test binary:
	// name the seed and stop.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		select {
		case <-stop:
		case <-time.After(stallAfter):
			panic(fmt.Sprintf("catalogsim: seed %d stalled for %v of real time (replay: -catalogsim.seed=%d)", sw.Seed, stallAfter, sw.Seed))
		}
	}()
	synctest.Test(t, func(t *testing.T) {
		s := newSim(sw, ch, o)
		res = s.run()
	})
	return res
}

// Sim is one run's world: the stores, the stars, the clients, the
// pending calls.
type Sim struct {
	sw    Swarm
	ch    chainsim.Chooser
	opt   *options
	meta  *simmeta.Table
	objs  *mem.Store
	trace *Trace
	chk   *checker
	start time.Time

	mu       sync.Mutex // guards the fields below against the goroutines
	pending  []*call
	arrivals uint64
	events   []event
	incs     []*incarnation // every incarnation ever started, in order
	tasks    map[string]bool
	taskSeq  map[string]int
	closed   bool
	wake     chan struct{}
	ids      int // basin and stream ids drawn

	// Owned by the scheduler goroutine.
	held        []held
	step        int
	faultCounts map[string]int
	faulty      bool
	cur         map[string]*incarnation // each star's current incarnation
	gen         map[string]int          // incarnations started per star
	restartAt   map[string]time.Time
	clients     []*client
	failure     *Failure
	known       map[string]*Failure
	stalled     string
	cut         bool // the real-time deadline ended the run (Result.Cut)
	lastEnv     time.Time
	over        bool // shutting down: the trace is closed

	// The auditor (Swarm.Audit): its actors' context, the settle runs,
	// the settlement policy and its scratch folder; reclaiming: the
	// clients stopped and the janitor reclaims, until a pass finds
	// nothing deleted left (reclaimed).
	auditCtx    context.Context
	auditCancel context.CancelFunc
	settlers    []*incarnation
	settleCfg   settle.Config
	scratch     string
	reclaiming  bool
	reclaimed   bool

	bubble, self string // this run's bubble id, the scheduler's dump header
	dump         []byte // the goroutine dump's buffer
	dumpLen      int    // … and how much of it the last dump filled
}

func newSim(sw Swarm, ch chainsim.Chooser, o *options) *Sim {
	objs, err := mem.New(allBuckets...)
	if err != nil {
		panic(err)
	}
	s := &Sim{
		sw: sw, ch: ch, opt: o, meta: simmeta.NewTable(), objs: objs,
		trace: newTrace(o.keepTrace), wake: make(chan struct{}, 1),
		faultCounts: map[string]int{}, tasks: map[string]bool{}, taskSeq: map[string]int{},
		cur: map[string]*incarnation{}, gen: map[string]int{}, restartAt: map[string]time.Time{},
		start: time.Now(),
	}
	s.chk = newChecker(s)
	s.auditCtx, s.auditCancel = context.WithCancel(context.Background())
	if sw.Audit {
		s.scratch = newScratch()
		s.settleCfg = settleConfig(s.scratch)
	}
	return s
}

// newID is the stars' id source (node.Deps.NewID): a counter, so ids are
// a function of the run. Stars draw them from their goroutines.
func (s *Sim) newID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ids++
	return fmt.Sprintf("%032x", s.ids)
}
