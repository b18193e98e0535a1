package chainsim

import (
	"testing"
)

// TestDeterminism runs seeds twice and expects the same trace, step for
// step (SlateDB's determinism test): a seed that replays differently
// means a hazard (map order, a select between two ready channels, a
// clock or a random source outside the seed).
func TestDeterminism(t *testing.T) {
	n := 40
	if testing.Short() {
		n = 10
	}
	if *flagSeeds > 0 {
		n = *flagSeeds
	}
	m := Menu{}
	for seed := *flagFirst; seed < *flagFirst+uint64(n); seed++ {
		sw := Draw(seed, m)
		a := Run(t, sw, NewRandom(sw.Seed), WithFullTrace())
		b := Run(t, sw, NewRandom(sw.Seed), WithFullTrace())
		if a.Trace.Hash() != b.Trace.Hash() || a.Steps != b.Steps {
			t.Errorf("seed %d replays differently: %d steps (hash %016x), then %d steps (hash %016x)\nfirst difference: %s",
				seed, a.Steps, a.Trace.Hash(), b.Steps, b.Trace.Hash(), firstDiff(a.Trace, b.Trace))
		}
	}
}

func firstDiff(a, b *Trace) string {
	for i := range min(len(a.lines), len(b.lines)) {
		if a.lines[i] != b.lines[i] {
			return "\n  " + a.lines[i] + "\n  " + b.lines[i]
		}
	}
	return "one trace is a prefix of the other"
}

// A recorded tape replays its run exactly: what Shrink builds on.
func TestTapeReplays(t *testing.T) {
	for seed := uint64(1); seed <= 20; seed++ {
		sw := Draw(seed, Menu{})
		rec := Record(NewRandom(sw.Seed))
		a := Run(t, sw, rec, WithFullTrace())
		b := Run(t, sw, Replay(rec.Vals), WithFullTrace())
		if a.Trace.Hash() != b.Trace.Hash() {
			t.Errorf("seed %d: the replayed tape of %d choices runs differently: %s", seed, len(rec.Vals), firstDiff(a.Trace, b.Trace))
		}
	}
}
