package catalogsim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"
)

// errGone answers the calls of a crashed incarnation and every call once
// the run is over: they never land.
var errGone = errors.New("catalogsim: the process is gone")

// Injected failures, as the caller sees them.
var (
	errMetaDown = errors.New("catalogsim: metastore unavailable")
	errMetaLost = errors.New("catalogsim: metastore reply lost")
	errCutOff   = errors.New("catalogsim: this star is cut off from the metastore")
)

type result struct {
	v   any
	err error
}

// call is one metastore request waiting for the scheduler.
type call struct {
	inc     *incarnation
	who     string // the client and incarnation (c1@a2), or the incarnation (a2)
	op      string // m.get m.put m.del m.query m.batchput m.batchdel
	key     string
	digest  uint64 // of the value: orders calls that tie on the rest
	write   bool
	park    bool // a pause at a decision point of star/node (hooks.go), not a metastore call
	arrival uint64
	apply   func() (any, error) // the effect, run on the scheduler goroutine
	reply   chan result
	done    bool // answered, held or withdrawn (under Sim.mu)
}

// compare orders pending calls by what they are, never by arrival (only
// identical calls fall back to it).
func (c *call) compare(d *call) int {
	if x := strings.Compare(c.who, d.who); x != 0 {
		return x
	}
	if x := strings.Compare(c.op, d.op); x != 0 {
		return x
	}
	if x := strings.Compare(c.key, d.key); x != 0 {
		return x
	}
	if c.digest != d.digest {
		if c.digest < d.digest {
			return -1
		}
		return 1
	}
	return int(int64(c.arrival) - int64(d.arrival))
}

// held is a reply the scheduler held back: the call landed (or failed)
// when it was served, its caller hears only when the reply is released.
type held struct {
	c     *call
	r     result
	since time.Time
	// beside: a parked open (call.park) beside which another request of
	// the same incarnation went through the same pause, so the stream is
	// likely open there now.
	beside bool
}

// do hands a call to the scheduler and blocks until it is served, or ctx
// ends first (the call then never lands).
func (s *Sim) do(ctx context.Context, c *call) (any, error) {
	s.mu.Lock()
	if s.closed || c.inc.dead {
		s.mu.Unlock()
		return nil, errGone
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	c.arrival, c.reply = s.arrivals, make(chan result, 1)
	s.arrivals++
	i, _ := slices.BinarySearchFunc(s.pending, c, (*call).compare)
	s.pending = slices.Insert(s.pending, i, c)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	select {
	case r := <-c.reply:
		return r.v, r.err
	case <-ctx.Done():
	}
	s.mu.Lock()
	if c.done { // served (or held) meanwhile: the reply stands
		s.mu.Unlock()
		r := <-c.reply
		return r.v, r.err
	}
	c.done = true
	s.unpendLocked(c)
	s.mu.Unlock()
	return nil, ctx.Err()
}

func (s *Sim) unpendLocked(c *call) {
	if i := slices.Index(s.pending, c); i >= 0 {
		s.pending = slices.Delete(s.pending, i, i+1)
	}
}
