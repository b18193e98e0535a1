package chainsim

import (
	"fmt"
	"hash"
	"hash/fnv"
	"regexp"
	"slices"
	"strings"
	"time"
)

// traceTail is how many trace lines a run keeps unless told to keep all.
const traceTail = 400

// Trace is a run's op trace: one line per step and per actor report. Its
// hash covers every line, so two runs of one seed compare by hash.
type Trace struct {
	keepAll bool
	lines   []string
	dropped int
	h       hash.Hash64
}

func newTrace(keepAll bool) *Trace { return &Trace{keepAll: keepAll, h: fnv.New64a()} }

func (t *Trace) add(s *Sim, text string) {
	if s.over {
		return // what actors do while they exit is not part of the run
	}
	line := fmt.Sprintf("%6d %10s %s", s.step, fmtElapsed(time.Since(s.start)), text)
	t.h.Write([]byte(line))
	t.h.Write([]byte{'\n'})
	t.lines = append(t.lines, line)
	if !t.keepAll && len(t.lines) > 2*traceTail {
		t.dropped += len(t.lines) - traceTail
		t.lines = append(t.lines[:0], t.lines[len(t.lines)-traceTail:]...)
	}
}

func fmtElapsed(d time.Duration) string { return fmt.Sprintf("%.3fs", d.Seconds()) }

// Hash is the hash of every line added.
func (t *Trace) Hash() uint64 { return t.h.Sum64() }

// String is the kept lines (the tail, unless the run kept all).
func (t *Trace) String() string {
	var b strings.Builder
	lines, dropped := t.lines, t.dropped
	if !t.keepAll && len(lines) > traceTail {
		dropped += len(lines) - traceTail
		lines = lines[len(lines)-traceTail:]
	}
	if dropped > 0 {
		fmt.Fprintf(&b, "… %d earlier lines dropped (replay with -chainsim.trace for all)\n", dropped)
	}
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	return b.String()
}

var (
	padded   = regexp.MustCompile(`\d{20}`)
	keyNoise = strings.NewReplacer("chains/"+chainStar+"/"+string(chainClass)+"/", "e", "chain#"+chainStar+"/"+string(chainClass)+" ", "", "stream#", "")
)

// abbrev shortens a key for the trace: chains/s1/express/000…1/000…3 is
// e1/3, the chain's partition is dropped, zero padding goes.
func abbrev(key string) string {
	return padded.ReplaceAllStringFunc(keyNoise.Replace(key), func(n string) string {
		if t := strings.TrimLeft(n, "0"); t != "" {
			return t
		}
		return "0"
	})
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return s
}

// stable orders the lines of a message: errors.Join of errors gathered
// from goroutines (chain.ProbeGarbage) lists them in arrival order.
// The first line carries the wrapping context: it is split off where the
// second line's kind of message starts.
func stable(msg string) string {
	lines := strings.Split(msg, "\n")
	if len(lines) == 1 {
		return msg
	}
	prefix := ""
	if marker := lines[1][:min(len(lines[1]), 14)]; marker != "" {
		if i := strings.LastIndex(lines[0], marker); i > 0 {
			prefix, lines[0] = lines[0][:i], lines[0][i:]
		}
	}
	slices.Sort(lines)
	return prefix + "[" + strings.Join(lines, " | ") + "]"
}

func stableErr(err error) string {
	if err == nil {
		return "<nil>"
	}
	return stable(err.Error())
}
