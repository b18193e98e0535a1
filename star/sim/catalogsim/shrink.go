package catalogsim

import (
	"slices"
	"testing"

	"github.com/starlog/starlog/star/sim/chainsim"
)

// Shrink zeroes what it can of a failing run's tape (chainsim.Tape: the
// scheduler's picks, faults, environment events), chunk by chunk, keeping
// every change after which the run still breaks the same invariant. The
// clients' own operations come from their seeds (Swarm.ClientSeeds), not
// from the tape, so they stay; what goes is the faults and orderings the
// failure does not need. It runs the sim at most budget times.
func Shrink(t *testing.T, sw Swarm, vals []int, invariant string, budget int, opts ...Option) []int {
	best := trimZeros(slices.Clone(vals))
	for _, size := range []int{256, 64, 16, 4, 1} {
		for i := 0; i < len(best) && budget > 0; i += size {
			end := min(i+size, len(best))
			if !slices.ContainsFunc(best[i:end], func(v int) bool { return v != 0 }) {
				continue
			}
			cand := slices.Clone(best)
			clear(cand[i:end])
			budget--
			if r := Run(t, sw, chainsim.Replay(cand), opts...); r.Failure != nil && r.Failure.Invariant == invariant {
				best = trimZeros(cand)
			}
		}
	}
	return best
}

func trimZeros(v []int) []int {
	for len(v) > 0 && v[len(v)-1] == 0 {
		v = v[:len(v)-1]
	}
	return v
}
