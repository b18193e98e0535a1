package loglet

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/star/pool"
)

// Core holds the loglet's decisions for one chain, without I/O: which slot
// a cut flight claims, when flights are released (strictly in slot order),
// what a halted epoch does (drain its uploads, fence on what the writer
// knows, acknowledge late below the cut, republish the rest into the next
// epoch with the same seq nums), and when the loglet is deposed. Each event
// method changes only memory and returns the Effects its driver carries
// out; the driver feeds the outcomes back as events (run.go for a star,
// star/sim/chainsim's writer for the simulation), as etcd-io/raft's Step
// and Ready divide the work (docs/design.md §6).
//
// F is the driver's flight: Core stores it and hands it back, nothing more.
type Core[F any] struct {
	window    int
	epoch     uint64
	nextSlot  uint64
	releaseAt uint64
	inflight  map[uint64]*claimed[F]
	phase     Phase
	halted    uint64 // the epoch Draining or Fencing
}

// Phase is where a Core is in its epoch's life.
type Phase uint8

const (
	// Writing: flights are cut, uploaded and released.
	Writing Phase = iota
	// Draining: an upload failed and the epoch is halted; the driver stops
	// its uploads and feeds their results until every one has reported,
	// so nothing of this writer lands after the fence reads.
	Draining
	// Fencing: every upload reported; the fence and the next mint run
	// (Recovered or Depose ends it). Nothing is cut or released meanwhile.
	Fencing
	// Deposed: stopped for good; every unreleased flight was failed.
	Deposed
)

var phaseNames = [...]string{"writing", "draining", "fencing", "deposed"}

func (p Phase) String() string { return phaseNames[p] }

type claimed[F any] struct {
	flight    F
	committed bool
	reported  bool
	err       error // why its upload failed, once reported
}

// Claim is a flight the driver renders into Slot of Epoch and commits.
type Claim[F any] struct {
	Epoch, Slot uint64
	Flight      F
	Republished bool // carried over from a halted epoch, seq nums unchanged
}

// Halt says an epoch halted on a slot's failed upload.
type Halt struct {
	Epoch, Slot uint64
	Err         error
}

// FenceOwn asks the driver to fence its own halted epoch on what the writer
// knows, then mint the next epoch, and to report Recovered (or Depose).
type FenceOwn struct {
	Epoch uint64
	Known chain.Known
	// FirstHalt is the lowest slot whose upload failed, with its error (two
	// deadlines of one instant report in either order).
	FirstHalt uint64
	HaltErr   error
}

// Effects is what one event asks of the driver, in the order it must be
// carried out: Halt, Fence, Committed, Release, Healed, Install, Upload, then Fail
// with Deposed.
type Effects[F any] struct {
	// Halt: the epoch halted; stop its uploads (cancel them) and feed each
	// one's result until Fence comes.
	Halt *Halt
	// Fence: every upload of the halted epoch reported; close its writer,
	// then fence and mint.
	Fence *FenceOwn
	// Committed: the flight whose upload just committed (at most one).
	Committed []F
	// Release: acknowledge these flights, in this (slot) order.
	Release []F
	// Late counts the flights of Release that a fence found committed.
	Late uint64
	// Healed: the oldest waiting flight committed (or a fence found the
	// waiting flights committed, with none left to republish): the store
	// takes this class's writes.
	Healed bool
	// Install: the epoch minted by the recovery is now written (slots from 0).
	Install bool
	// Upload: render and commit these claims, in slot order.
	Upload []Claim[F]
	// Deposed: the loglet stopped for good; Fail holds every unreleased
	// flight, in slot order, to be failed with it.
	Deposed error
	Fail    []F
}

// NewCore starts a Core writing epoch (just minted) with window slots
// claimable ahead of release.
func NewCore[F any](epoch uint64, window int) *Core[F] {
	return &Core[F]{window: max(window, 1), epoch: epoch, inflight: map[uint64]*claimed[F]{}}
}

// Phase is where the core is.
func (c *Core[F]) Phase() Phase { return c.phase }

// Epoch is the epoch being written (or, while recovering, the halted one).
func (c *Core[F]) Epoch() uint64 { return c.epoch }

// Inflight counts the claimed, unreleased flights.
func (c *Core[F]) Inflight() int { return len(c.inflight) }

// CanClaim reports whether a cut may claim a slot now: the core is writing
// and fewer than window flights wait for release.
func (c *Core[F]) CanClaim() bool { return c.phase == Writing && len(c.inflight) < c.window }

// CutVerdict is what the flusher does with the pool now.
type CutVerdict uint8

const (
	CutIdle       CutVerdict = iota // nothing pooled (or not writing)
	CutWait                         // not due yet: look again after the wait
	CutWindowFull                   // due, but window flights wait for release
	CutNow                          // due and a slot is free (the backlog budget still decides)
)

var cutVerdictNames = [...]string{"idle", "wait", "window-full", "cut"}

func (v CutVerdict) String() string { return cutVerdictNames[v] }

// Cut decides whether the pool's bytes are cut into a flight now, by the
// cut policy (pool.CutPolicy: the interval, the target, cutting when idle)
// and the window; when the verdict is CutWait, wait is how long until the
// flight is due (at least a microsecond).
func (c *Core[F]) Cut(p pool.CutPolicy, now time.Time, pooled int, bytes int64, oldest, lastCut time.Time) (v CutVerdict, wait time.Duration) {
	if pooled == 0 || c.phase != Writing {
		return CutIdle, 0
	}
	if due, at := p.Due(now, bytes, oldest, lastCut, len(c.inflight) == 0); !due {
		return CutWait, max(at.Sub(now), time.Microsecond)
	}
	if len(c.inflight) >= c.window {
		return CutWindowFull, 0
	}
	return CutNow, 0
}

// ErrCannotClaim is a Claim while CanClaim is false (a driver bug).
var ErrCannotClaim = errors.New("loglet: no slot can be claimed now")

// Claim gives a cut flight the next slot of the epoch; the driver renders
// and commits it (Upload).
func (c *Core[F]) Claim(f F) (Effects[F], error) {
	if !c.CanClaim() {
		return Effects[F]{}, fmt.Errorf("%w: %s with %d of %d in flight", ErrCannotClaim, c.phase, len(c.inflight), c.window)
	}
	return Effects[F]{Upload: []Claim[F]{c.claim(f, false)}}, nil
}

func (c *Core[F]) claim(f F, republished bool) Claim[F] {
	s := c.nextSlot
	c.nextSlot++
	c.inflight[s] = &claimed[F]{flight: f}
	return Claim[F]{Epoch: c.epoch, Slot: s, Flight: f, Republished: republished}
}

// Uploaded takes one upload's outcome. Writing, a commit releases every
// flight now committed in slot order, and a failure halts the epoch.
// Draining, it records the report, and the last report asks for the fence.
// A straggler of another epoch, or one that comes while fencing, is ignored.
func (c *Core[F]) Uploaded(epoch, slot uint64, err error) Effects[F] {
	var eff Effects[F]
	if epoch != c.epoch {
		return eff
	}
	cl, ok := c.inflight[slot]
	if !ok {
		return eff
	}
	switch c.phase {
	case Writing:
		cl.reported, cl.err = true, err
		if err != nil {
			c.phase, c.halted = Draining, c.epoch
			eff.Halt = &Halt{Epoch: c.epoch, Slot: slot, Err: err}
			eff.Fence = c.drained()
			return eff
		}
		cl.committed = true
		eff.Committed = []F{cl.flight}
		// The oldest waiting flight goes through (a later slot's commit
		// alone would restart the recovery deadline while it waits).
		eff.Healed = slot == c.releaseAt
		eff.Release = c.releaseReady()
	case Draining:
		if !cl.reported {
			cl.reported, cl.err = true, err
		}
		cl.committed = cl.committed || err == nil
		eff.Fence = c.drained()
	}
	return eff
}

// releaseReady takes, strictly in slot order, every committed flight whose
// predecessors are all released.
func (c *Core[F]) releaseReady() []F {
	var out []F
	for {
		cl, ok := c.inflight[c.releaseAt]
		if !ok || !cl.committed {
			return out
		}
		delete(c.inflight, c.releaseAt)
		c.releaseAt++
		out = append(out, cl.flight)
	}
}

// drained moves a draining core to Fencing once every upload reported,
// with what it knows: released below releaseAt, and which slots above
// committed.
func (c *Core[F]) drained() *FenceOwn {
	committed := map[uint64]bool{}
	fo := &FenceOwn{Epoch: c.halted, FirstHalt: c.nextSlot}
	for s, cl := range c.inflight {
		if !cl.reported {
			return nil
		}
		if cl.committed {
			committed[s] = true
		} else if cl.err != nil && s <= fo.FirstHalt {
			fo.FirstHalt, fo.HaltErr = s, cl.err
		}
	}
	c.phase = Fencing
	fo.Known = chain.Known{Released: c.releaseAt, Committed: func(s uint64) bool { return committed[s] }}
	return fo
}

// Recovered resumes after the halted epoch was fenced at cut and epoch
// next was minted: every flight below the cut is committed and released
// late, the rest are republished, in order, into next's first slots. A
// cut below a released slot, or over a slot this writer never claimed,
// means another writer's hand: the core is deposed.
func (c *Core[F]) Recovered(cut, next uint64) Effects[F] {
	if c.phase != Fencing {
		return c.Depose(fmt.Errorf("loglet: recovered while %s", c.phase))
	}
	if cut < c.releaseAt {
		// Released slots are committed, so the cut can't be below them.
		return c.Depose(fmt.Errorf("loglet: epoch %d cut %d below released slot %d", c.halted, cut, c.releaseAt))
	}
	for s := c.releaseAt; s < cut; s++ {
		if _, ok := c.inflight[s]; !ok {
			return c.Depose(fmt.Errorf("loglet: epoch %d: committed slot %d below cut %d is not ours", c.halted, s, cut))
		}
	}
	var eff Effects[F]
	for s := c.releaseAt; s < cut; s++ {
		c.inflight[s].committed = true
	}
	eff.Late = cut - c.releaseAt
	eff.Release = c.releaseReady()
	rest := c.sorted()
	clear(c.inflight)
	// Nothing is left to probe the store with, and the fence found the
	// flights committed: the class takes writes. (With flights left, the
	// first of them to commit in the new epoch decides.)
	eff.Healed = len(rest) == 0 && eff.Late > 0
	c.phase, c.epoch, c.nextSlot, c.releaseAt = Writing, next, 0, 0
	eff.Install = true
	for _, f := range rest {
		eff.Upload = append(eff.Upload, c.claim(f, true))
	}
	return eff
}

// Depose stops the core for good (a successor owns the chain, the recovery
// failed, or a flight cannot be rendered): every unreleased flight is
// handed back, in slot order, to be failed with cause.
func (c *Core[F]) Depose(cause error) Effects[F] {
	if c.phase == Deposed {
		return Effects[F]{}
	}
	c.phase = Deposed
	return Effects[F]{Deposed: cause, Fail: c.Stop()}
}

// Stop hands back every unreleased flight in slot order and forgets them
// (the loglet is closing).
func (c *Core[F]) Stop() []F {
	out := c.sorted()
	clear(c.inflight)
	return out
}

// Waiting lists the unreleased flights in slot order (kept: a degraded
// class answers their batches, and they may still commit).
func (c *Core[F]) Waiting() []F { return c.sorted() }

func (c *Core[F]) sorted() []F {
	slots := make([]uint64, 0, len(c.inflight))
	for s := range c.inflight {
		slots = append(slots, s)
	}
	slices.SortFunc(slots, cmp.Compare)
	out := make([]F, len(slots))
	for i, s := range slots {
		out[i] = c.inflight[s].flight
	}
	return out
}
