package chainsim

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// EnvKind is an environment fault (or actor start) the scheduler may inject
// as one step of its own.
type EnvKind uint8

const (
	EnvDown    EnvKind = iota // a bucket fails fast for a while
	EnvHang                   // a bucket black-holes calls for a while
	EnvSlow                   // a bucket answers late for a while
	EnvCorrupt                // flip a byte of a stored slot copy at rest
	EnvForeign                // rewrite a stored envelope as a newer version (valid CRC)
	EnvPause                  // an actor's calls are not served for a while
	EnvCrash                  // an actor dies: its calls that did not land never land
	EnvRestart                // the chain's star starts as its next incarnation
	EnvZombie                 // ... while the current one is only paused
	EnvFence                  // a successor settles the chain (ChainThrough)
	EnvTrim                   // the auditor advances rewritten and trims
	numEnvKinds
)

var envNames = [numEnvKinds]string{"down", "hang", "slow", "corrupt", "foreign", "pause", "crash", "restart", "zombie", "fence", "trim"}

func (k EnvKind) String() string { return envNames[k] }

// Menu bounds what a seed may draw. The zero Menu allows everything the
// fixed chain must survive; Avoid takes out what a known defect of today's
// code trips over, so the randomized run stays green until it is fixed.
type Menu struct {
	MaxK int // largest bucket set (default 3)
	// NoCorruption leaves stored copies intact (no corrupt or foreign
	// occupants).
	NoCorruption bool
	// NoZombies never restarts the star while its current incarnation
	// is merely paused.
	NoZombies bool
	// NoLivenessDown heals every bucket for the liveness phase instead of
	// keeping up to min(K−W, W−1) down.
	NoLivenessDown bool
}

// Swarm is everything one run draws from its seed: sizes, fault rates and
// the sub-seeds of its actors. A Swarm and a Chooser replay one run.
type Swarm struct {
	Seed uint64

	K, W, Window int
	Streams      int // streams the writers append to
	Flights      int // flights each writer incarnation writes, then idles
	MaxRecords   int // records per batch, at most
	Incarnations int // writer incarnations of the chain's star, at most
	Fencers      int // successor settlements, at most
	Trims        int // auditor trim runs, at most

	Deadline time.Duration // a flight's deadline to reach W
	Attempt  time.Duration // one bucket request's timeout

	// Fault phase: how many steps, how likely an environment event is per
	// step, and which kinds may strike.
	FaultSteps int
	PEnv       float64
	Env        [numEnvKinds]bool
	// Per-call faults: a store write whose reply is lost after it landed,
	// one that never landed (both indefinite), a metastore call refused,
	// a metastore write whose reply is lost after it landed.
	PLost, PNotLanded, PMetaDown, PMetaLost float64

	// Liveness: buckets kept down (≤ min(K−W, W−1)), and the step bound
	// within which the final settlement must return.
	LiveDown  int
	LiveSteps int

	// Unseeded is the one stream (or -1) whose totals an absorber starts
	// without, so the absorb reads its floor row; every other stream is
	// seeded (absorb.Absorber.prevTotals ranges over a map: two unseeded
	// streams would issue their reads in random order).
	Unseeded int

	// Exhaustive-mode budgets (-1: unbounded): faults injected per run,
	// and preemptions (serving another call than the default one).
	MaxFaults   int
	Preemptions int

	ActorSeeds [16]uint64
}

// Draw derives a run's swarm from its seed.
func Draw(seed uint64, m Menu) Swarm {
	rng := rand.New(rand.NewPCG(seed, 0))
	maxK := m.MaxK
	if maxK <= 0 {
		maxK = 3
	}
	s := Swarm{Seed: seed, MaxFaults: -1, Preemptions: -1}
	s.K = 1 + rng.IntN(maxK)
	s.W = 1 + rng.IntN(s.K)
	s.Window = 1 + rng.IntN(3)
	s.Streams = 1 + rng.IntN(3)
	s.Flights = 1 + rng.IntN(8)
	s.MaxRecords = 1 + rng.IntN(3)
	s.Incarnations = 1 + rng.IntN(3)
	s.Fencers = rng.IntN(3)
	s.Trims = rng.IntN(3)
	s.Deadline = time.Duration(500+rng.IntN(4500)) * time.Millisecond
	s.Attempt = time.Duration(200+rng.IntN(2800)) * time.Millisecond
	s.FaultSteps = 200 + rng.IntN(1300)
	s.PEnv = 0.01 + 0.05*rng.Float64()
	for k := range numEnvKinds {
		s.Env[k] = rng.IntN(2) == 0
	}
	s.Env[EnvFence] = s.Env[EnvFence] && s.Fencers > 0
	s.Env[EnvTrim] = s.Env[EnvTrim] && s.Trims > 0
	s.Env[EnvRestart] = s.Incarnations > 1
	if m.NoCorruption {
		s.Env[EnvCorrupt], s.Env[EnvForeign] = false, false
	}
	s.Env[EnvZombie] = s.Env[EnvZombie] && !m.NoZombies && s.Incarnations > 1
	on := func(max float64) float64 {
		if rng.IntN(2) == 0 {
			return 0
		}
		return max * rng.Float64()
	}
	s.PLost, s.PNotLanded = on(0.1), on(0.1)
	s.PMetaDown, s.PMetaLost = on(0.05), on(0.05)
	if !m.NoLivenessDown {
		s.LiveDown = rng.IntN(min(s.K-s.W, s.W-1) + 1)
	}
	s.LiveSteps = 4000
	s.Unseeded = rng.IntN(s.Streams+1) - 1
	for i := range s.ActorSeeds {
		s.ActorSeeds[i] = rng.Uint64()
	}
	return s
}

// String is the swarm as a failure report prints it.
func (s Swarm) String() string {
	var env []string
	for k := range numEnvKinds {
		if s.Env[k] {
			env = append(env, k.String())
		}
	}
	return fmt.Sprintf("seed=%d K=%d W=%d window=%d streams=%d flights=%d records≤%d incarnations≤%d fencers≤%d trims≤%d "+
		"deadline=%v attempt=%v fault-steps=%d p-env=%.3f env=[%s] p-lost=%.3f p-not-landed=%.3f p-meta-down=%.3f p-meta-lost=%.3f "+
		"live-down=%d unseeded=%d max-faults=%d preemptions=%d",
		s.Seed, s.K, s.W, s.Window, s.Streams, s.Flights, s.MaxRecords, s.Incarnations, s.Fencers, s.Trims,
		s.Deadline, s.Attempt, s.FaultSteps, s.PEnv, strings.Join(env, ","), s.PLost, s.PNotLanded, s.PMetaDown, s.PMetaLost,
		s.LiveDown, s.Unseeded, s.MaxFaults, s.Preemptions)
}
