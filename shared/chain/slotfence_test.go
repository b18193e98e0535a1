package chain

import (
	"errors"
	"fmt"
	"testing"
)

// content is what one bucket of the test world holds at the slot's key.
type content uint8

const (
	cAbsent  content = iota
	cFlight          // the writer's copy, intact
	cDamaged         // the writer's envelope, a damaged body
	cPoison
	cUnreadable
	nContents
)

func (c content) String() string {
	return [...]string{"absent", "flight", "damaged", "poison", "unreadable"}[c]
}

// world is one slot's key in K buckets, some down (every request fails).
type world struct {
	at   []content
	down []bool
	// raceAfterRead lands the writer's copy in a bucket right after the
	// fence first read it absent (a writer still alive).
	raceAfterRead []bool
	raced         []bool
	writes        []string
}

var errDown = errors.New("down")

func (w *world) serve(r fenceReq) fenceObs {
	i := r.bucket
	o := fenceObs{req: r}
	if w.down[i] {
		o.err = errDown
		return o
	}
	switch r.op {
	case opRead:
		switch w.at[i] {
		case cAbsent:
			o.absent = true
			if w.raceAfterRead[i] && !w.raced[i] {
				w.raced[i] = true
				w.at[i] = cFlight
			}
		case cFlight, cDamaged:
			o.occ = Flight
		case cPoison:
			o.occ = Poison
		case cUnreadable:
			o.occ = Unreadable
		}
	case opFetch:
		switch w.at[i] {
		case cFlight:
			o.copy = []byte("verified")
		case cDamaged:
			o.bad = true
		default:
			panic(fmt.Sprintf("fetch from bucket %d holding %v", i, w.at[i]))
		}
	case opCopy, opPoison:
		w.writes = append(w.writes, fmt.Sprintf("%v %d", r.op, i))
		if w.at[i] != cAbsent {
			o.recheck = true
			return o
		}
		o.won = true
		if r.op == opCopy {
			w.at[i] = cFlight
		} else {
			w.at[i] = cPoison
		}
	}
	return o
}

func (w *world) count(cs ...content) (n int) {
	for _, c := range w.at {
		for _, want := range cs {
			if c == want {
				n++
			}
		}
	}
	return n
}

// run drives a slot fence against the world: reads first with writes
// barred, then writes allowed. A failed request is retried only while its
// bucket is up (a down bucket stays down for the whole run).
func (w *world) run(k, wq int) (fate Fate, stuck bool, steps int) {
	f := newSlotFence(k, wq)
	for phase, mayWrite := range []bool{false, true} {
		for steps = 0; steps < 200; steps++ {
			reqs, fate, stuck := f.plan(mayWrite)
			if fate != Undecided || stuck {
				return fate, stuck, steps
			}
			if phase == 0 && len(reqs) == 0 {
				break
			}
			if len(reqs) == 0 {
				// Only down buckets are left to retry: nothing will change.
				return Undecided, false, steps
			}
			for _, r := range reqs {
				if phase == 0 && r.op != opRead {
					panic(fmt.Sprintf("%v before writes were allowed", r.op))
				}
				o := w.serve(r)
				f.observe(o)
				if o.err != nil && !w.down[r.bucket] {
					f.retry(r.bucket)
				}
			}
		}
	}
	panic("slot fence did not settle in 200 steps")
}

// Every content assignment and every down set of every (K ≤ 4, W), with
// and without a racing writer: the fate the fence declares is the
// world's; it never kills a slot a live writer could have committed in the
// buckets it cannot see, and it never writes over an occupant; with every
// bucket up and nothing unreadable or damaged it always decides; with
// buckets down it decides exactly when the buckets it can reach allow it.
func TestSlotFenceExhaustive(t *testing.T) {
	cases := 0
	for k := 1; k <= 4; k++ {
		for wq := 1; wq <= k; wq++ {
			total := 1
			for range k {
				total *= int(nContents)
			}
			for code := range total {
				for downMask := range 1 << k {
					for raceMask := range 1 << k {
						w := &world{at: make([]content, k), down: make([]bool, k), raceAfterRead: make([]bool, k), raced: make([]bool, k)}
						c := code
						for i := range k {
							w.at[i] = content(c % int(nContents))
							c /= int(nContents)
							w.down[i] = downMask&(1<<i) != 0
							w.raceAfterRead[i] = raceMask&(1<<i) != 0
						}
						if raceMask&downMask != 0 || (raceMask != 0 && w.count(cAbsent) == 0) {
							continue
						}
						cases++
						start := append([]content(nil), w.at...)
						fate, stuck, _ := w.run(k, wq)
						name := fmt.Sprintf("K=%d W=%d start %v down %b race %b → %v stuck=%v writes %v end %v", k, wq, start, downMask, raceMask, fate, stuck, w.writes, w.at)
						checkSlotFence(t, name, w, start, k, wq, fate, stuck, downMask, raceMask)
					}
				}
			}
		}
	}
	t.Logf("%d slot fence cases", cases)
}

func checkSlotFence(t *testing.T, name string, w *world, start []content, k, wq int, fate Fate, stuck bool, downMask, raceMask int) {
	t.Helper()
	flights := w.count(cFlight, cDamaged)
	poisons := w.count(cPoison)
	switch fate {
	case Committed:
		if flights < wq {
			t.Fatalf("%s: declared committed with %d flight copies", name, flights)
		}
	case Dead:
		if poisons < k-wq+1 {
			t.Fatalf("%s: declared dead with %d poisons", name, poisons)
		}
		if flights >= wq {
			t.Fatalf("%s: declared dead with %d flight copies standing (down buckets included)", name, flights)
		}
	}
	for i := range k {
		if start[i] != cAbsent && w.at[i] != start[i] {
			t.Fatalf("%s: bucket %d changed from %v to %v", name, i, start[i], w.at[i])
		}
	}
	// Reachable view at the start, with the racing writer's copies.
	var fr, pr, ar int
	for i := range k {
		if w.down[i] {
			continue
		}
		switch {
		case w.raceAfterRead[i], start[i] == cFlight:
			fr++
		case start[i] == cDamaged:
			fr++
		case start[i] == cPoison:
			pr++
		case start[i] == cAbsent:
			ar++
		}
	}
	clean := true
	for _, c := range start {
		clean = clean && c != cUnreadable && c != cDamaged
	}
	if downMask == 0 && raceMask == 0 && clean && fate == Undecided {
		t.Fatalf("%s: every bucket up and readable, yet undecided", name)
	}
	if raceMask == 0 && clean {
		canRoll := fr >= 1 && fr+ar >= wq
		canKill := pr+ar >= k-wq+1
		if (canRoll || canKill) != (fate != Undecided) {
			t.Fatalf("%s: reachable view flights %d poisons %d absent %d: decidable %v, fence decided %v", name, fr, pr, ar, canRoll || canKill, fate)
		}
		if canRoll && fate != Committed {
			t.Fatalf("%s: a lone copy that could be rolled forward was not", name)
		}
	}
	if stuck && (downMask != 0 || fate != Undecided) {
		t.Fatalf("%s: stuck while a bucket is down (it may come back)", name)
	}
}
