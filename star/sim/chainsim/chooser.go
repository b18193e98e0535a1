package chainsim

import "math/rand/v2"

// A Chooser makes every choice of a run: which ready call is served next,
// whether a fault strikes, which fault and where. The random chooser draws
// them from the seed; the odometer enumerates them (exhaustive mode).
type Chooser interface {
	// Pick returns one of n ≥ 1 alternatives, 0 ≤ i < n. Alternative 0 is
	// the default (no preemption, no fault): the odometer tries it first.
	Pick(n int) int
	// Chance says whether an event of probability p happens. p == 0 is
	// never a choice point; the odometer branches on any p > 0.
	Chance(p float64) bool
}

// Random draws every choice from one generator.
type Random struct{ rng *rand.Rand }

// NewRandom is the chooser of a seeded run.
func NewRandom(seed uint64) *Random { return &Random{rng: rand.New(rand.NewPCG(seed, 0xc4005e))} }

func (r *Random) Pick(n int) int {
	if n <= 1 {
		return 0
	}
	return r.rng.IntN(n)
}

func (r *Random) Chance(p float64) bool { return p > 0 && r.rng.Float64() < p }

// Odometer enumerates every sequence of choices, depth first, the way
// TigerBeetle's exhaustigen does: a run replays the prefix it is given and
// takes alternative 0 at every new choice point; Next then advances the
// last choice point that has alternatives left and drops the ones after
// it. A run must be a deterministic function of its choices.
type Odometer struct {
	v, bound []int
	pos      int
	// Points counts choice points met over all runs.
	Points int
}

func (o *Odometer) Pick(n int) int {
	o.Points++
	if n <= 1 {
		return 0
	}
	if o.pos == len(o.v) {
		o.v = append(o.v, 0)
		o.bound = append(o.bound, n)
	}
	i := o.v[o.pos]
	o.bound[o.pos] = n
	if i >= n { // a replay that diverged: stay inside the bound
		i = n - 1
		o.v[o.pos] = i
	}
	o.pos++
	return i
}

func (o *Odometer) Chance(p float64) bool { return p > 0 && o.Pick(2) == 1 }

// Next moves to the next sequence; false when every one was run.
func (o *Odometer) Next() bool {
	o.pos = 0
	for n := len(o.v); n > 0; n = len(o.v) {
		if o.v[n-1]+1 < o.bound[n-1] {
			o.v[n-1]++
			return true
		}
		o.v, o.bound = o.v[:n-1], o.bound[:n-1]
	}
	return false
}

// Depth is the number of branching choice points of the current sequence.
func (o *Odometer) Depth() int { return len(o.v) }
