package verify

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
)

// Catalog is the basin of the delete and re-create nemesis (Recreate) and
// what its clients need to know of it: the round's streams, the
// incarnation of each name (how many times it was deleted and created
// again), and a gate every client operation on the basin passes.
//
// A client holds the gate's read side for one operation; Recreate holds
// its write side from before the delete until the name is created again,
// so every operation meets exactly one incarnation of its stream and the
// history can name it: the key of stream s in incarnation i is "s@i", and
// each key is checked as a stream of its own that starts empty. What the
// delete protects is then checked where it can fail: an append that a
// star acknowledges into the deleted stream after the re-create (a leader
// that never learnt of the delete, a stale cache that resolved the name
// to the old id) is an acknowledged record of the new incarnation that
// its read-back does not find, and a read that serves the old records
// under the new name is not linearizable.
type Catalog struct {
	Basin string

	gate    sync.RWMutex
	mu      sync.Mutex
	streams []string
	class   map[string]api.StorageClass
	inc     map[string]int
	// h is the round's history, and reader the client id Recreate's
	// read-backs are recorded under (SetHistory).
	h      *History
	reader int
}

// NewCatalog returns the catalog of basin.
func NewCatalog(basin string) *Catalog {
	return &Catalog{Basin: basin, class: map[string]api.StorageClass{}, inc: map[string]int{}}
}

// SetStreams sets the round's streams (created by the caller) and their
// storage classes (a re-create uses the same).
func (c *Catalog) SetStreams(streams []string, classes []api.StorageClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.streams = append([]string(nil), streams...)
	for i, s := range streams {
		c.class[s] = classes[i]
	}
}

// SetHistory sets the round's history, into which Recreate records its
// read-back of the incarnations it deletes, as client reader.
func (c *Catalog) SetHistory(h *History, reader int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.h, c.reader = h, reader
}

func (c *Catalog) history() (*History, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.h, c.reader
}

// Streams is the round's streams.
func (c *Catalog) Streams() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.streams...)
}

// Key is the history's name of stream's current incarnation.
func (c *Catalog) Key(stream string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return fmt.Sprintf("%s@%d", stream, c.inc[stream])
}

// Retired lists the keys of the round's streams' deleted incarnations:
// their acknowledged records are gone with them, so the read-back has
// nothing to find there (their histories are still checked).
func (c *Catalog) Retired() map[string]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]bool{}
	for _, s := range c.streams {
		for i := range c.inc[s] {
			out[fmt.Sprintf("%s@%d", s, i)] = true
		}
	}
	return out
}

// enter admits one client operation on stream: it returns the key of
// the incarnation the operation meets and the function that ends it.
func (c *Catalog) enter(stream string) (key string, leave func()) {
	c.gate.RLock()
	return c.Key(stream), c.gate.RUnlock
}

// Recreate deletes a stream of the catalog's basin, or the whole basin,
// through a random star, and creates it again under the same names (the
// same storage classes), through another star when there is one. The
// catalog's clients wait meanwhile (see Catalog). A deleted name answers
// 409 until the stars' --deletion-pending has passed, so the fault lasts
// at least that long.
type Recreate struct {
	Catalog *Catalog
	Clients []*sdk.Client
	Rand    *rand.Rand
	// Timeout bounds the whole fault (default 1 min).
	Timeout time.Duration
	mu      sync.Mutex
}

// recreateReadBackFor bounds Recreate's read-back of the incarnations
// it deletes (a star may be down meanwhile).
const recreateReadBackFor = 15 * time.Second

// Name implements Fault.
func (*Recreate) Name() string { return "delete+recreate" }

// Inject implements Fault.
func (r *Recreate) Inject(ctx context.Context, c *Cluster) (FaultEvent, error) {
	ev := FaultEvent{Fault: r.Name(), Star: -1}
	cat := r.Catalog
	streams := cat.Streams()
	if len(streams) == 0 {
		ev.Failed, ev.Detail = true, "no stream"
		return ev, nil
	}
	r.mu.Lock()
	wholeBasin := r.Rand.IntN(3) == 0
	victim := streams[r.Rand.IntN(len(streams))]
	via := r.Rand.IntN(len(r.Clients))
	again := via
	if len(r.Clients) > 1 {
		again = (via + 1 + r.Rand.IntN(len(r.Clients)-1)) % len(r.Clients)
	}
	r.mu.Unlock()
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = time.Minute
	}
	fctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	t0 := time.Now()
	cat.gate.Lock() // waits for the operations under way (each bounded)
	defer cat.gate.Unlock()
	gone := []string{victim}
	what := fmt.Sprintf("stream %s/%s", cat.Basin, victim)
	if wholeBasin {
		gone, what = streams, "basin "+cat.Basin
	}
	ev.Stream = victim
	// The incarnations about to go are read to their tails first, their
	// clients held at the gate. No read-back follows a delete, so an
	// indefinite append no read saw stays open in the check to the end of
	// the round, and a few dozen (a leader killed under a catalog
	// stream's clients) leave porcupine undecided. Read here, every seq
	// up to the tail is pinned: an append that lands after this, or
	// never, is past every seq the incarnation's history looks at, and
	// the checker drops it (extent.canPlace). Best effort: a failed
	// read-back leaves those appends open, as before.
	readBack := ""
	if h, reader := cat.history(); h != nil {
		rctx, rcancel := context.WithTimeout(fctx, recreateReadBackFor)
		got, err := ReadBack(rctx, r.Clients, cat.Basin, gone, cat.Key, h, reader)
		rcancel()
		n := 0
		for _, recs := range got {
			n += len(recs)
		}
		readBack = fmt.Sprintf("; %d records read back before the delete", n)
		if err != nil {
			readBack = fmt.Sprintf("; read-back before the delete failed: %v", err)
		}
	}
	// A star that answers "not found" for a name that exists (a basin
	// or stream the fault created through another star) judged it from
	// a stale catalog cache: a violation; the call goes to the next star.
	wrongly := func(star int, call string, err error) bool {
		ae, ok := errors.AsType[*api.Error](err)
		if !ok || ae.Code != api.CodeBasinNotFound && ae.Code != api.CodeStreamNotFound {
			return false
		}
		ev.Violations = append(ev.Violations, fmt.Sprintf("star %d answered %v to %s, which exists", star+1, err, call))
		return true
	}
	deleted := time.Now()
	err := retryDone(fctx, deleteDone, func() error {
		if wholeBasin {
			return r.Clients[via].DeleteBasin(fctx, cat.Basin)
		}
		return r.Clients[via].Basin(cat.Basin).DeleteStream(fctx, victim)
	}, func(err error) bool {
		if wrongly(via, "delete "+what, err) {
			via = (via + 1) % len(r.Clients)
			return true
		}
		return false
	})
	if err != nil {
		return ev, fmt.Errorf("delete %s via star %d: %w", what, via+1, err)
	}
	deleteTook := time.Since(deleted)
	// Created again through another star (409 while the deletion is
	// pending: retry answers 409 by trying again).
	if wholeBasin {
		err := retryDone(fctx, createDone, func() error {
			_, err := r.Clients[again].CreateBasin(fctx, cat.Basin, &api.BasinConfig{})
			return err
		}, nil)
		if err != nil {
			return ev, fmt.Errorf("re-create %s via star %d: %w", what, again+1, err)
		}
	}
	for _, s := range gone {
		cat.mu.Lock()
		class := cat.class[s]
		cat.mu.Unlock()
		err := retryDone(fctx, createDone, func() error {
			_, err := r.Clients[again].Basin(cat.Basin).CreateStream(fctx, s, &api.StreamConfig{StorageClass: &class})
			return err
		}, func(err error) bool {
			if wrongly(again, "create stream "+s+" in basin "+cat.Basin, err) {
				again = (again + 1) % len(r.Clients)
				return true
			}
			return false
		})
		if err != nil {
			return ev, fmt.Errorf("re-create stream %s/%s via star %d: %w", cat.Basin, s, again+1, err)
		}
	}
	cat.mu.Lock()
	for _, s := range gone {
		cat.inc[s]++
	}
	cat.mu.Unlock()
	ev.Recovered = time.Since(t0)
	ev.Detail = fmt.Sprintf("%s deleted via star %d (%v), re-created via star %d after %v%s",
		what, via+1, deleteTook.Round(time.Millisecond), again+1, time.Since(deleted).Round(time.Millisecond), readBack)
	return ev, nil
}

// retryDone is retry for a delete or a create, whose attempt may take
// effect without an answer: once an attempt failed indefinitely, an error
// that done accepts means the call's work is done. Before that, a
// definite error that wrong accepts (it judged the error wrong, and chose
// another star) is tried again.
func retryDone(ctx context.Context, done func(*api.Error) bool, f func() error, wrong func(error) bool) error {
	mayHaveActed := false
	return retry(ctx, func() error {
		err := f()
		if err == nil {
			return nil
		}
		ae, isAPI := errors.AsType[*api.Error](err)
		switch {
		case isAPI && mayHaveActed && done(ae):
			return nil
		case !mayHaveActed && wrong != nil && wrong(err):
			return errRetry
		case !sdk.IsDefinite(err):
			mayHaveActed = true
		}
		return err
	})
}

// errRetry makes retry try again (it retries every error that is not a
// definite API error).
var errRetry = errors.New("judged from a stale cache: try the next star")

// deleteDone: the name is gone, or its deletion pending.
func deleteDone(ae *api.Error) bool {
	switch ae.Code {
	case api.CodeBasinNotFound, api.CodeStreamNotFound, api.CodeBasinDeletionPending, api.CodeStreamDeletionPending:
		return true
	}
	return false
}

// createDone: the name exists (the attempt without an answer made it).
func createDone(ae *api.Error) bool { return ae.Code == api.CodeResourceAlreadyExists }
