package chainsim

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// Tape is a run's choices: recording one (around another Chooser) keeps
// every choice made; replaying one makes them again, and answers the
// default (0: no fault, no preemption, the first ready call) past its end,
// and the last alternative where a value no longer fits. Replays of
// shrunk tapes need not follow
// the original run: they only need to fail the same way.
type Tape struct {
	Vals []int
	src  Chooser // recording when set
	pos  int
}

// Record wraps src and keeps its choices.
func Record(src Chooser) *Tape { return &Tape{src: src} }

// Replay answers with vals.
func Replay(vals []int) *Tape { return &Tape{Vals: slices.Clone(vals)} }

func (t *Tape) Pick(n int) int {
	if n <= 1 {
		return 0
	}
	if t.src != nil {
		v := t.src.Pick(n)
		t.Vals = append(t.Vals, v)
		return v
	}
	v := 0
	if t.pos < len(t.Vals) {
		v = min(t.Vals[t.pos], n-1)
	}
	t.pos++
	return v
}

func (t *Tape) Chance(p float64) bool {
	if p <= 0 {
		return false
	}
	if t.src != nil {
		c := t.src.Chance(p)
		t.Vals = append(t.Vals, map[bool]int{true: 1}[c])
		return c
	}
	return t.Pick(2) == 1
}

// String is the tape as a file line.
func (t *Tape) String() string {
	var b strings.Builder
	for i, v := range t.Vals {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(v))
	}
	return b.String()
}

// ParseTape reads a tape line.
func ParseTape(line string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(strings.TrimSpace(line), ",") {
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("chainsim: bad tape value %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// Shrink zeroes what it can of a failing run's tape (faults that were not
// needed, preemptions, non-default picks), chunk by chunk, keeping every
// change after which the run still breaks the same invariant: the trace
// of the result has only the events the failure needs. It runs the sim
// at most budget times.
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
			if r := Run(t, sw, Replay(cand), opts...); r.Failure != nil && r.Failure.Invariant == invariant {
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
