package catalogsim

import (
	"bytes"
	"runtime"
	"strconv"
	"strings"
	"testing/synctest"
)

// settle returns once every other goroutine of the run's bubble is parked:
// durably blocked (on a call, a timer, a channel), or waiting for a mutex.
//
// synctest.Wait alone does not do: star/node holds a stream's slot lock
// across metastore calls (leadIn opens the stream under it), so a
// goroutine waiting for that lock (the heartbeat counting led streams, a
// request, a release) is not durably blocked while its holder waits for
// the scheduler, and synctest.Wait, like fake time, would wait forever.
// The goroutine dump says who waits on what ("(durable)" marks the
// durable waits), so the scheduler reads it instead, after a
// synctest.Wait attempt is known to be safe: with no goroutine of the
// bubble on a mutex, synctest.Wait itself is used (cheaper, and exact).
func (s *Sim) settle() {
	for spins := 0; ; spins++ {
		runtime.Gosched()
		switch s.bubbleState() {
		case bubbleParked:
			return
		case bubbleDurable:
			synctest.Wait()
			return
		}
		if spins > 1_000_000 {
			panic("catalogsim: the bubble never settles")
		}
	}
}

type bubbleState uint8

const (
	bubbleBusy    bubbleState = iota // a goroutine runs or can run
	bubbleParked                     // every goroutine is durably blocked or on a mutex, some on a mutex
	bubbleDurable                    // every goroutine is durably blocked
)

// bubbleState reads the goroutine dump for this bubble's goroutines.
func (s *Sim) bubbleState() bubbleState {
	if s.bubble == "" {
		own := make([]byte, 512)
		own = own[:runtime.Stack(own, false)]
		s.bubble = bubbleOf(own[:bytes.IndexByte(own, '\n')])
		s.self = string(own[:bytes.IndexByte(own, '[')])
	}
	var buf []byte
	for n := len(s.dump); ; n *= 2 {
		if n < 1<<16 {
			n = 1 << 16
		}
		if len(s.dump) < n {
			s.dump = make([]byte, n)
		}
		m := runtime.Stack(s.dump, true)
		if m < len(s.dump) {
			buf = s.dump[:m]
			s.dumpLen = m
			break
		}
	}
	state := bubbleDurable
	for len(buf) > 0 {
		line := buf
		if i := bytes.IndexByte(buf, '\n'); i >= 0 {
			line, buf = buf[:i], buf[i+1:]
		} else {
			buf = nil
		}
		if !bytes.HasPrefix(line, []byte("goroutine ")) || bubbleOf(line) != s.bubble || bytes.HasPrefix(line, []byte(s.self)) {
			continue
		}
		st := line[bytes.IndexByte(line, '[')+1:]
		switch {
		case bytes.Contains(st, []byte("(durable)")):
		case bytes.HasPrefix(st, []byte("sync.Mutex.Lock")), bytes.HasPrefix(st, []byte("sync.RWMutex.")):
			state = bubbleParked
		default:
			return bubbleBusy
		}
	}
	return state
}

// bubbleOf is the bubble id in a goroutine header line ("" outside any).
func bubbleOf(header []byte) string {
	const tag = "synctest bubble "
	i := bytes.Index(header, []byte(tag))
	if i < 0 {
		return ""
	}
	rest := header[i+len(tag):]
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	if _, err := strconv.Atoi(string(rest[:j])); err != nil {
		return ""
	}
	return string(rest[:j])
}

// bubbleDump is the goroutine dump of this run's bubble (a stall's report).
func (s *Sim) bubbleDump() string {
	s.bubbleState() // fills s.dump
	var out []string
	for _, g := range strings.Split(string(s.dump[:s.dumpLen]), "\n\n") {
		if nl := strings.IndexByte(g, '\n'); nl > 0 && bubbleOf([]byte(g[:nl])) == s.bubble {
			out = append(out, g)
		}
	}
	return strings.Join(out, "\n\n")
}
