package catalogsim

import (
	"flag"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/star/sim/chainsim"
)

var (
	flagSeed   = flag.Uint64("catalogsim.seed", 0, "replay this one seed in TestCatalogSeeds (0: run many)")
	flagFirst  = flag.Uint64("catalogsim.first", 1, "first seed TestCatalogSeeds runs")
	flagBudget = flag.Duration("catalogsim.budget", 40*time.Second, "wall-clock time TestCatalogSeeds spends on seeds")
	flagSeeds  = flag.Int("catalogsim.seeds", 0, "run exactly this many seeds instead of a time budget")
	flagTrace  = flag.Bool("catalogsim.trace", false, "keep and print the full trace")
	flagLogs   = flag.Bool("catalogsim.logs", false, "let the stars log to stderr")
	flagShrink = flag.Bool("catalogsim.shrink", false, "with -catalogsim.seed: shrink a failing run and print its minimal trace")
	flagSave   = flag.String("catalogsim.save", "", "with -catalogsim.shrink: write the shrunk tape and trace as testdata/NAME.{tape,trace}")
	flagList   = flag.Bool("catalogsim.list", false, "list every failing seed with its failure")
)

func runOpts() []Option {
	var o []Option
	if *flagTrace {
		o = append(o, WithFullTrace())
	}
	if *flagLogs {
		o = append(o, WithLogs())
	}
	return o
}

func counts(m map[string]int) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, fmt.Sprintf("%s=%d", k, m[k]))
	}
	return strings.Join(out, " ")
}

func report(t *testing.T, r Result) {
	t.Helper()
	t.Errorf("seed %d FAILED: %v\nswarm: %v\nreplay: go test ./star/sim/catalogsim -run 'TestCatalogSeeds$' -catalogsim.seed=%d -catalogsim.trace\ntrace:\n%s",
		r.Swarm.Seed, r.Failure, r.Swarm, r.Swarm.Seed, r.Trace)
}

// figures sum up many runs.
type figures struct {
	mu                  sync.Mutex
	runs, steps, checks int
	faults, stats       map[string]int
	failed              []Result
}

func (f *figures) add(r Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs++
	f.steps += r.Steps
	f.checks += r.Checks
	if f.faults == nil {
		f.faults, f.stats = map[string]int{}, map[string]int{}
	}
	for k, v := range r.Faults {
		f.faults[k] += v
	}
	for k, v := range r.Stats {
		f.stats[k] += v
	}
	if r.Failure != nil {
		f.failed = append(f.failed, r)
	}
}

// TestCatalogSeeds runs the randomized catalog simulation for a time
// budget (-catalogsim.budget, or -catalogsim.seeds=N), or replays one
// seed (-catalogsim.seed=N).
func TestCatalogSeeds(t *testing.T) {
	if *flagSeed != 0 {
		sw := Draw(*flagSeed)
		r := Run(t, sw, chainsim.NewRandom(sw.Seed), runOpts()...)
		t.Logf("swarm: %v", sw)
		t.Logf("steps=%d checks=%d faults[%s] happened[%s] fake-time=%v trace-hash=%016x",
			r.Steps, r.Checks, counts(r.Faults), counts(r.Stats), r.Took, r.Trace.Hash())
		if *flagTrace {
			t.Logf("trace:\n%s", r.Trace)
		}
		if r.Failure != nil {
			report(t, r)
			if *flagShrink {
				shrinkAndSave(t, sw, r.Failure.Invariant)
			}
		}
		return
	}
	start := time.Now()
	var f figures
	var mu sync.Mutex
	next := *flagFirst
	take := func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if *flagSeeds > 0 && next >= *flagFirst+uint64(*flagSeeds) || *flagSeeds == 0 && time.Since(start) >= *flagBudget {
			return 0, false
		}
		next++
		return next - 1, true
	}
	workers := runtime.GOMAXPROCS(0)
	t.Run("workers", func(t *testing.T) {
		for w := range workers {
			t.Run(fmt.Sprint(w), func(t *testing.T) {
				t.Parallel()
				for seed, ok := take(); ok; seed, ok = take() {
					sw := Draw(seed)
					f.add(Run(t, sw, chainsim.NewRandom(sw.Seed), runOpts()...))
				}
			})
		}
	})
	slices.SortFunc(f.failed, func(a, b Result) int { return int(a.Swarm.Seed) - int(b.Swarm.Seed) })
	t.Logf("%d seeds from %d in %v: steps=%d invariant-checks=%d failed=%d faults[%s] happened[%s]",
		f.runs, *flagFirst, time.Since(start).Round(time.Millisecond), f.steps, f.checks, len(f.failed), counts(f.faults), counts(f.stats))
	byInv := map[string][]uint64{}
	for _, r := range f.failed {
		byInv[r.Failure.Invariant] = append(byInv[r.Failure.Invariant], r.Swarm.Seed)
	}
	for _, inv := range slices.Sorted(maps.Keys(byInv)) {
		seeds := byInv[inv]
		t.Logf("invariant %s broken by %d seeds: %v", inv, len(seeds), seeds[:min(len(seeds), 20)])
	}
	if *flagList {
		for _, r := range f.failed {
			t.Logf("seed %d: %v", r.Swarm.Seed, r.Failure)
		}
	}
	for i, r := range f.failed {
		if i == 3 {
			t.Errorf("… and %d more failing seeds", len(f.failed)-i)
			break
		}
		report(t, r)
	}
}

// shrinkAndSave shrinks a failing seed's tape, prints the minimal trace
// and keeps it under testdata when asked.
func shrinkAndSave(t *testing.T, sw Swarm, invariant string) {
	t.Logf("shrinking is not wired yet")
}
