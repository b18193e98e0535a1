package chainsim

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	flagSeed   = flag.Uint64("chainsim.seed", 0, "replay this one seed in TestSimSeeds (0: run many)")
	flagBudget = flag.Duration("chainsim.budget", 10*time.Second, "wall-clock time TestSimSeeds spends on seeds")
	flagSeeds  = flag.Int("chainsim.seeds", 0, "run exactly this many seeds instead of a time budget")
	flagFirst  = flag.Uint64("chainsim.first", 1, "first seed TestSimSeeds runs")
	flagTrace  = flag.Bool("chainsim.trace", false, "keep and print the full trace")
	flagAll    = flag.Bool("chainsim.all", false, "draw from the whole fault menu, known defects included")
	flagDeep   = flag.Bool("chainsim.deep", false, "also run the deep exhaustive cases (minutes)")
	flagShrink = flag.Bool("chainsim.shrink", false, "with -chainsim.seed: shrink a failing run and print its minimal trace")
	flagSave   = flag.String("chainsim.save", "", "with -chainsim.shrink: write the shrunk tape and trace as testdata/NAME.{tape,trace}")
	flagList   = flag.Bool("chainsim.list", false, "list every failing seed with its failure")
)

// knownDefects are defects of shared/chain (or what it drives) that are
// not fixed yet. Each takes out of the randomized menu the faults that trip
// it, so the randomized run stays green until the fix lands: delete an
// entry when its fix merges (TestKnownDefects keeps a seed that trips each).
// The seven the simulation found are fixed (TestKnownDefects).
var knownDefects = []struct {
	name  string
	avoid func(*Menu)
}{}

// knownFailures are seeds of the randomized run (its default menu) that
// break an invariant through a known defect no menu item isolates: their
// failure is logged, not counted, while it is the one named; a seed that
// passes is a reminder to drop it. Delete an entry when its fix merges.
var knownFailures = map[uint64]struct{ invariant, defect string }{}

// safeMenu is the menu minus what the known defects trip.
func safeMenu() Menu {
	var m Menu
	for _, d := range knownDefects {
		d.avoid(&m)
	}
	return m
}

func menu() Menu {
	if *flagAll {
		return Menu{}
	}
	return safeMenu()
}

// figures sum up many runs.
type figures struct {
	mu                         sync.Mutex
	runs, steps, idles, checks int
	acks, waived               int
	faults, stats              map[string]int
	failed                     []Result
}

func (f *figures) add(r Result) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs++
	f.steps += r.Steps
	f.idles += r.Idles
	f.checks += r.Checks
	f.acks += r.Acks
	if r.Waived != "" {
		f.waived++
	}
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

func (f *figures) String() string {
	return fmt.Sprintf("runs=%d steps=%d idle-waits=%d invariant-checks=%d flights-acked=%d liveness-waived=%d failed=%d faults[%s] happened[%s]",
		f.runs, f.steps, f.idles, f.checks, f.acks, f.waived, len(f.failed), counts(f.faults), counts(f.stats))
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
	t.Errorf("seed %d FAILED: %v\nswarm: %v\nreplay and shrink: %s\ntrace:\n%s",
		r.Swarm.Seed, r.Failure, r.Swarm, replayCommand(r.Swarm.Seed), r.Trace)
}

// replayCommand is the one command that replays seed with its full trace
// and shrinks its failure to a minimal schedule.
func replayCommand(seed uint64) string {
	return fmt.Sprintf("go test ./star/sim/chainsim -run 'TestSimSeeds$' -chainsim.seed=%d%s -chainsim.trace -chainsim.shrink",
		seed, map[bool]string{true: " -chainsim.all"}[*flagAll])
}

func runOpts() []Option {
	if *flagTrace {
		return []Option{WithFullTrace()}
	}
	return nil
}

// TestSimSeeds runs the randomized simulation for a time budget
// (-chainsim.budget: 10 s under go test, so that the two simulations
// share 30 s of make test; longer in make sim), or exactly
// -chainsim.seeds=N seeds, or replays one (-chainsim.seed=N). Seeds are
// taken in order from -chainsim.first, so a run covers a prefix.
func TestSimSeeds(t *testing.T) {
	m := menu()
	if *flagSeed != 0 {
		sw := Draw(*flagSeed, m)
		r := Run(t, sw, NewRandom(sw.Seed), runOpts()...)
		t.Logf("swarm: %v", sw)
		t.Logf("steps=%d idle-waits=%d checks=%d flights-acked=%d faults[%s] happened[%s] waived=%q fake-time=%v trace-hash=%016x",
			r.Steps, r.Idles, r.Checks, r.Acks, counts(r.Faults), counts(r.Stats), r.Waived, r.Took, r.Trace.Hash())
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
	take := seedTaker(*flagFirst, *flagSeeds, *flagBudget, time.Now)
	workers := runtime.GOMAXPROCS(0)
	t.Run("workers", func(t *testing.T) {
		for w := range workers {
			t.Run(fmt.Sprint(w), func(t *testing.T) {
				t.Parallel()
				for seed, ok := take(); ok; seed, ok = take() {
					sw := Draw(seed, m)
					r := Run(t, sw, NewRandom(sw.Seed), runOpts()...)
					if k, ok := knownFailures[seed]; ok && !*flagAll {
						if r.Failure != nil && r.Failure.Invariant == k.invariant {
							t.Logf("seed %d: known failure %s through defect %s", seed, k.invariant, k.defect)
							r.Failure = nil
						} else if r.Failure == nil {
							t.Logf("seed %d passes now: drop it from knownFailures (defect %s)", seed, k.defect)
						}
					}
					f.add(r)
				}
			})
		}
	})
	t.Logf("%d seeds from %d in %v: %v", f.runs, *flagFirst, time.Since(start).Round(time.Millisecond), &f)
	sort.Slice(f.failed, func(i, j int) bool { return f.failed[i].Swarm.Seed < f.failed[j].Swarm.Seed })
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

// seedTaker hands out seeds in order from first to the workers: exactly n
// of them when n > 0, else until budget has passed on now (a seed taken
// in time runs to its end).
func seedTaker(first uint64, n int, budget time.Duration, now func() time.Time) func() (uint64, bool) {
	var mu sync.Mutex
	next, start := first, now()
	return func() (uint64, bool) {
		mu.Lock()
		defer mu.Unlock()
		if n > 0 && next >= first+uint64(n) || n <= 0 && now().Sub(start) >= budget {
			return 0, false
		}
		next++
		return next - 1, true
	}
}

// shrinkAndSave shrinks a failing seed's tape, prints the minimal trace and
// keeps it under testdata when asked.
func shrinkAndSave(t *testing.T, sw Swarm, invariant string) {
	rec := Record(NewRandom(sw.Seed))
	Run(t, sw, rec)
	vals := Shrink(t, sw, rec.Vals, invariant, 2000)
	r := Run(t, sw, Replay(vals), WithFullTrace())
	t.Logf("shrunk %d choices to %d (%d non-default): %v\ntrace:\n%s", len(rec.Vals), len(vals), nonZero(vals), r.Failure, r.Trace)
	if *flagSave == "" || r.Failure == nil {
		return
	}
	tape := fmt.Sprintf("# seed %d: %v\n# swarm: %v\n%s\n", sw.Seed, r.Failure, sw, (&Tape{Vals: vals}).String())
	if err := os.WriteFile(filepath.Join("testdata", *flagSave+".tape"), []byte(tape), 0o644); err != nil {
		t.Fatal(err)
	}
	trace := fmt.Sprintf("# seed %d, shrunk tape testdata/%s.tape\n# swarm: %v\n# %v\n%s", sw.Seed, *flagSave, sw, r.Failure, r.Trace)
	if err := os.WriteFile(filepath.Join("testdata", *flagSave+".trace"), []byte(trace), 0o644); err != nil {
		t.Fatal(err)
	}
}

func nonZero(v []int) int {
	n := 0
	for _, x := range v {
		if x != 0 {
			n++
		}
	}
	return n
}

// The budget stops handing out seeds once it has passed, and a count
// hands out exactly that many, in order.
func TestSeedTaker(t *testing.T) {
	clock := time.Unix(0, 0)
	take := seedTaker(5, 0, 20*time.Second, func() time.Time { return clock })
	var got []uint64
	for seed, ok := take(); ok; seed, ok = take() {
		got = append(got, seed)
		clock = clock.Add(7 * time.Second)
	}
	if !slices.Equal(got, []uint64{5, 6, 7}) {
		t.Errorf("20 s budget, 7 s a seed: took %v, want [5 6 7]", got)
	}
	take = seedTaker(1, 4, 0, func() time.Time { return clock })
	got = nil
	for seed, ok := take(); ok; seed, ok = take() {
		got = append(got, seed)
	}
	if !slices.Equal(got, []uint64{1, 2, 3, 4}) {
		t.Errorf("4 seeds: took %v, want [1 2 3 4]", got)
	}
}
