package chainsim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/objstore"
)

// errGone answers the calls of a crashed actor and every call once the
// run is over: they never land.
var errGone = errors.New("chainsim: the process is gone")

// Injected failures, as the caller sees them.
var (
	errLost     = errors.New("chainsim: reply lost")
	errBucket   = errors.New("chainsim: bucket unavailable")
	errMetaDown = errors.New("chainsim: metastore unavailable")
	errMetaLost = errors.New("chainsim: metastore reply lost")
)

type result struct {
	v   any
	err error
}

// call is one store or metastore request waiting for the scheduler.
type call struct {
	actor   *actor
	op      string // put get head delete deletes list | m.get m.put m.del m.query m.batchput m.batchdel | archive
	bucket  int    // the bucket; -1 the metastore; -2 the sim itself
	key     string
	digest  uint64 // of the body or value: orders calls that tie on the rest
	write   bool   // mutates: a lost reply leaves the outcome unknown
	arrival uint64
	arrived time.Time
	apply   func() (any, error) // the effect, run on the scheduler goroutine
	reply   chan result
	done    bool // answered or withdrawn (under Sim.mu)
}

// less orders pending calls by what they are, never by arrival (only
// identical calls fall back to it).
func (c *call) compare(d *call) int {
	if x := strings.Compare(c.actor.name, d.actor.name); x != 0 {
		return x
	}
	if x := strings.Compare(c.op, d.op); x != 0 {
		return x
	}
	if c.bucket != d.bucket {
		return c.bucket - d.bucket
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

// do hands a call to the scheduler and blocks until it is served, or ctx
// ends first (the call then never lands).
func (s *Sim) do(ctx context.Context, c *call) (any, error) {
	s.mu.Lock()
	if s.closed || c.actor.dead {
		s.mu.Unlock()
		return nil, errGone
	}
	if err := ctx.Err(); err != nil {
		s.mu.Unlock()
		return nil, s.ctxErr(c, err)
	}
	if s.direct {
		defer s.mu.Unlock()
		return c.apply()
	}
	c.arrival, c.arrived, c.reply = s.arrivals, time.Now(), make(chan result, 1)
	s.arrivals++
	// pending stays in the stable order, so a step only filters it.
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
	if c.done { // served meanwhile: the reply stands
		s.mu.Unlock()
		r := <-c.reply
		return r.v, r.err
	}
	c.done = true
	s.unpendLocked(c)
	s.mu.Unlock()
	return nil, s.ctxErr(c, ctx.Err())
}

// ctxErr is what a client returns when it gives up on a call: for a
// store write the outcome is unknown (S3 clients report a timed-out PUT
// as indefinite).
func (s *Sim) ctxErr(c *call, err error) error {
	if c.write && c.bucket >= 0 {
		return &objstore.IndefiniteError{Err: err}
	}
	return err
}

func (s *Sim) unpendLocked(c *call) {
	if i := slices.Index(s.pending, c); i >= 0 {
		s.pending = slices.Delete(s.pending, i, i+1)
	}
}
