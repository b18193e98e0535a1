package catalogsim

import (
	"fmt"
	"hash"
	"hash/fnv"
	"regexp"
	"strings"
	"time"
)

// traceTail is how many trace lines a run keeps unless told to keep all.
const traceTail = 400

// Trace is a run's op trace: one line per step and per report. Its hash
// covers every line, so two runs of one seed compare by hash.
type Trace struct {
	keepAll bool
	lines   []string
	dropped int
	h       hash.Hash64
}

func newTrace(keepAll bool) *Trace { return &Trace{keepAll: keepAll, h: fnv.New64a()} }

func (t *Trace) add(s *Sim, text string) {
	if s.over {
		return // what goroutines do while they exit is not part of the run
	}
	line := fmt.Sprintf("%6d %9.3fs %s", s.step, time.Since(s.start).Seconds(), text)
	t.h.Write([]byte(line))
	t.h.Write([]byte{'\n'})
	t.lines = append(t.lines, line)
	if !t.keepAll && len(t.lines) > 2*traceTail {
		t.dropped += len(t.lines) - traceTail
		t.lines = append(t.lines[:0], t.lines[len(t.lines)-traceTail:]...)
	}
}

// Hash is the hash of every line added.
func (t *Trace) Hash() uint64 { return t.h.Sum64() }

// Lines is the kept lines.
func (t *Trace) Lines() []string { return t.lines }

// String is the kept lines (the tail, unless the run kept all).
func (t *Trace) String() string {
	var b strings.Builder
	lines, dropped := t.lines, t.dropped
	if !t.keepAll && len(lines) > traceTail {
		dropped += len(lines) - traceTail
		lines = lines[len(lines)-traceTail:]
	}
	if dropped > 0 {
		fmt.Fprintf(&b, "… %d earlier lines dropped (replay with -catalogsim.trace for all)\n", dropped)
	}
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

var (
	simID  = regexp.MustCompile(`\b0{16}[0-9a-f]{16}\b`)
	padded = regexp.MustCompile(`\d{20}`)
)

// abbrev shortens a key for the trace: the sim's ids (a counter in 32 hex
// digits) become #n, zero padding goes.
func abbrev(key string) string {
	key = simID.ReplaceAllStringFunc(key, func(id string) string {
		var n uint64
		fmt.Sscanf(id, "%x", &n)
		return fmt.Sprintf("#%d", n)
	})
	return padded.ReplaceAllStringFunc(key, func(n string) string {
		if t := strings.TrimLeft(n, "0"); t != "" {
			return t
		}
		return "0"
	})
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}
