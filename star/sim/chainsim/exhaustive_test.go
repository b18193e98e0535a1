package chainsim

import (
	"fmt"
	"testing"
	"time"
)

type exhaustiveCase struct {
	name   string
	sw     Swarm
	deep   bool   // only with -chainsim.deep: minutes, not seconds
	defect string // skipped: a known defect of today's chain fails it
}

// exhaustiveCases are the small worlds the odometer enumerates: every
// schedule of their choice points within the budgets (a fault, a
// preemption), K ≤ 3, window ≤ 3, two writer incarnations, a few slots.
func exhaustiveCases() []exhaustiveCase {
	base := func(k, w, window int) Swarm {
		sw := Swarm{
			Seed: 1, K: k, W: w, Window: window, Streams: 1, Flights: 2, MaxRecords: 1,
			Incarnations: 2, Deadline: time.Second, Attempt: 500 * time.Millisecond,
			FaultSteps: 100000, LiveSteps: 4000, Unseeded: -1, MaxFaults: 1, Preemptions: 0,
		}
		for i := range sw.ActorSeeds {
			sw.ActorSeeds[i] = uint64(1000 + i)
		}
		return sw
	}
	var out []exhaustiveCase
	deep, defect := false, ""
	add := func(name string, sw Swarm) { out = append(out, exhaustiveCase{name, sw, deep, defect}) }
	// One fault anywhere: a store write's reply lost or its write never
	// landed, a metastore call refused or its reply lost, or a crash of
	// the writer (its successor incarnation then settles and mints).
	for _, kw := range [][3]int{{1, 1, 2}, {2, 1, 2}, {2, 2, 2}, {3, 2, 3}} {
		sw := base(kw[0], kw[1], kw[2])
		sw.PLost, sw.PNotLanded, sw.PMetaDown, sw.PMetaLost = 1, 1, 1, 1
		sw.PEnv, sw.Env[EnvCrash] = 1, true
		add(fmt.Sprintf("fault/K%dW%dwin%d", kw[0], kw[1], kw[2]), sw)
	}
	// One preemption anywhere, between the writer and a successor that
	// settles the chain from the start (no faults).
	for _, kw := range [][3]int{{2, 1, 2}, {3, 2, 2}} {
		sw := base(kw[0], kw[1], kw[2])
		sw.MaxFaults, sw.Preemptions, sw.Fencers = 1, 1, 1
		sw.PEnv, sw.Env[EnvFence] = 1, true
		add(fmt.Sprintf("preempt/K%dW%dwin%d", kw[0], kw[1], kw[2]), sw)
	}
	// One fault, then a liveness phase with one of the three buckets down
	// (every fair down set, failing fast or hanging): the settlement must
	// still return (before issue 11's fix, the fence and the garbage probe
	// waited for the down bucket).
	sw := base(3, 2, 2)
	sw.LiveDown, sw.PLost, sw.PNotLanded, sw.PEnv, sw.Env[EnvCrash] = 1, 1, 1, 1, true
	add("zone-down/K3W2win2", sw)

	// Deep (-chainsim.deep, make sim): two faults, or a fault and a
	// preemption against a successor, in the smallest replicated set.
	deep = true
	sw = base(2, 1, 2)
	sw.MaxFaults, sw.PLost, sw.PNotLanded, sw.PEnv, sw.Env[EnvCrash] = 2, 1, 1, 1, true
	add("fault2/K2W1win2", sw)
	sw = base(2, 1, 2)
	sw.MaxFaults, sw.Preemptions, sw.Fencers = 2, 1, 1
	sw.PLost, sw.PNotLanded, sw.PEnv, sw.Env[EnvFence] = 1, 1, 1, true
	add("fault+preempt/K2W1win2", sw)
	return out
}

// exhaustiveCap bounds one case's schedules: reaching it fails the test
// (the case is too big).
const exhaustiveCap = 200000

func TestExhaustive(t *testing.T) {
	start := time.Now()
	total := 0
	for _, tc := range exhaustiveCases() {
		if tc.deep && !*flagDeep {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			if tc.defect != "" && !*flagDefects {
				t.Skip(tc.defect)
			}
			od := &Odometer{}
			states := map[uint64]bool{}
			n, steps := 0, 0
			for {
				r := Run(t, tc.sw, od, WithStates(func(h uint64) { states[h] = true }))
				n++
				steps += r.Steps
				if r.Failure != nil {
					t.Fatalf("schedule %d (choices %v) FAILED: %v\nswarm: %v\ntrace:\n%s", n, od.v, r.Failure, tc.sw, r.Trace)
				}
				if !od.Next() {
					break
				}
				if n == exhaustiveCap {
					t.Fatalf("more than %d schedules: the case is too big", exhaustiveCap)
				}
			}
			total += n
			t.Logf("%s: %d schedules (every one), %d steps, %d choice points, %d distinct store states", tc.name, n, steps, od.Points, len(states))
		})
	}
	t.Logf("exhaustive: %d schedules in %v", total, time.Since(start).Round(time.Millisecond))
}
