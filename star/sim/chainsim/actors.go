package chainsim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle/chainsettle"
)

// role is what an actor does.
type role uint8

const (
	roleWriter  role = iota // an incarnation of the chain's star
	roleFencer              // a successor settling the chain
	roleTrimmer             // the auditor's trim
	roleSettler             // the liveness phase's final settlement
)

// actor is one simulated process.
type actor struct {
	name   string // in traces: w1, f1, t1, z1
	role   role
	id     string // its chain actor id (incarnation)
	seed   uint64
	ctx    context.Context
	cancel context.CancelFunc

	// Under Sim.mu.
	dead   bool // crashed: its calls never land
	events []event

	// Owned by the scheduler.
	exited      bool
	err         error
	gone        time.Time // when it crashed or exited
	pausedUntil time.Time
	epoch       uint64 // the last epoch it minted (writers)
	headReads   int    // metastore reads of the chain head it was served
	deposedAt   int    // its head reads when the rows first showed it deposed (-1: not)
}

type event struct {
	note string
	ack  *Ack
	exit bool
	err  error
}

func (s *Sim) emit(a *actor, ev event) {
	s.mu.Lock()
	a.events = append(a.events, ev)
	s.mu.Unlock()
}

// spawn starts an actor's goroutine.
func (s *Sim) spawn(name string, r role, id string, seed uint64, run func(ctx context.Context, a *actor) error) *actor {
	ctx, cancel := context.WithCancel(context.Background())
	a := &actor{name: name, role: r, id: id, seed: seed, ctx: ctx, cancel: cancel, deposedAt: -1}
	s.mu.Lock()
	s.actors = append(s.actors, a)
	s.mu.Unlock()
	s.trace.add(s, fmt.Sprintf("start %s %s", name, id))
	go func() {
		var err error
		defer func() {
			if p := recover(); p != nil {
				err = fmt.Errorf("panic: %v", p)
				s.emit(a, event{exit: true, err: err, note: "PANIC"})
				return
			}
			s.emit(a, event{exit: true, err: err})
		}()
		err = run(ctx, a)
	}()
	return a
}

// alive lists the actors still running, in start order.
func (s *Sim) alive(r role) []*actor {
	var out []*actor
	for _, a := range s.actors {
		if a.role == r && !a.exited && !a.dead {
			out = append(out, a)
		}
	}
	return out
}

// crash kills an actor: its pending calls are answered as gone (never
// landed) and its context ends.
func (s *Sim) crash(a *actor) {
	s.mu.Lock()
	a.dead = true
	for _, c := range slices.Clone(s.pending) {
		if c.actor == a {
			c.done = true
			s.unpendLocked(c)
			c.reply <- result{err: errGone}
		}
	}
	s.mu.Unlock()
	a.cancel()
	a.gone = time.Now()
	s.trace.add(s, "crash "+a.name)
}

// chainFor is actor a's view of the chain, seeded from its sub-seed.
func (s *Sim) chainFor(a *actor) *chain.Chain {
	c := chain.New(chainStar, chainClass, a.id, metaView(s, a), storeView{s, a}).Seed(a.seed)
	c.AttemptTimeout = s.sw.Attempt
	return c
}

func (s *Sim) streams() []string {
	out := make([]string, s.sw.Streams)
	for i := range out {
		out[i] = fmt.Sprintf("st%d", i)
	}
	return out
}

func (s *Sim) params() meta.EpochParams {
	return meta.EpochParams{Buckets: slices.Clone(s.objs.names), W: s.sw.W, Window: s.sw.Window}
}

// absorber returns an absorber on a's metastore view, seeded with the
// tails of every stream but the swarm's unseeded one (see Swarm.Unseeded).
func (s *Sim) absorber(ctx context.Context, a *actor, c *chain.Chain) (*absorb.Absorber, error) {
	ms := metaView(s, a)
	abs := &absorb.Absorber{Star: chainStar, Class: chainClass, Meta: ms, UpdateEpoch: c.UpdateEpoch, Concurrency: 4,
		Rip: absorb.Ripening{Trigger: 1 << 20, Linger: time.Second, AgeCap: time.Minute}}
	for i, st := range s.streams() {
		if i == s.sw.Unseeded {
			continue
		}
		_, tot, err := Tail(ctx, ms, st)
		if err != nil {
			return nil, err
		}
		abs.Seed(st, tot)
	}
	return abs, nil
}

func (s *Sim) actorSeed(n int) uint64 {
	return s.sw.ActorSeeds[n%len(s.sw.ActorSeeds)] + uint64(n/len(s.sw.ActorSeeds))
}

// startWriter starts the chain's star as its next incarnation.
func (s *Sim) startWriter() *actor {
	s.incarnation++
	n := s.incarnation
	id := chain.Incarnation(chainStar, n)
	seed := s.actorSeed(int(n))
	w := s.opt.newWriter()
	return s.spawn(fmt.Sprintf("w%d", n), roleWriter, id, seed, func(ctx context.Context, a *actor) error {
		c := s.chainFor(a)
		env := WriterEnv{
			Star: chainStar, Incarnation: id, Class: chainClass, Params: s.params(),
			Chain: c, Meta: metaView(s, a), Deadline: s.sw.Deadline,
			Streams: s.streams(), Flights: s.sw.Flights, MaxRecords: max(1, s.sw.MaxRecords),
			Rand: rand.New(rand.NewPCG(seed, 1)),
			Settle: func(ctx context.Context) error {
				abs, err := s.absorber(ctx, a, c)
				if err != nil {
					return err
				}
				return chainsettle.Chain(ctx, c, abs)
			},
			NewAbsorber: func() *absorb.Absorber {
				return &absorb.Absorber{Star: chainStar, Class: chainClass, Meta: metaView(s, a), UpdateEpoch: c.UpdateEpoch, Concurrency: 4,
					Rip: absorb.Ripening{Trigger: 1 << 20, Linger: time.Second, AgeCap: time.Minute}}
			},
			Ack:  func(ack Ack) { s.emit(a, event{ack: &ack}) },
			Note: func(f string, args ...any) { s.emit(a, event{note: stable(fmt.Sprintf(f, args...))}) },
		}
		return w.Run(ctx, env)
	})
}

// startFencer starts a successor (another star) that settles the chain
// through the head it judged, as an open gate or the janitor does.
func (s *Sim) startFencer(name string, r role, retry bool) *actor {
	s.fencers++
	id := chain.Incarnation(fmt.Sprintf("s%d", 100+s.fencers), 1)
	return s.spawn(name, r, id, s.actorSeed(100+s.fencers), func(ctx context.Context, a *actor) error {
		c := s.chainFor(a)
		for attempt := 0; ; attempt++ {
			err := s.settleOnce(ctx, a, c)
			if err == nil || !retry || ctx.Err() != nil || isUndecidable(err) {
				return err
			}
			s.emit(a, event{note: "settle failed; retrying: " + stable(err.Error())})
			t := time.NewTimer(time.Second)
			select {
			case <-ctx.Done():
				t.Stop()
				return ctx.Err()
			case <-t.C:
			}
		}
	})
}

func (s *Sim) settleOnce(ctx context.Context, a *actor, c *chain.Chain) error {
	h, _, ok, err := c.Head(ctx)
	if err != nil || !ok {
		return err
	}
	abs, err := s.absorber(ctx, a, c)
	if err != nil {
		return err
	}
	return chainsettle.ChainThrough(ctx, c, abs, h.Epoch)
}

// isUndecidable reports the fence's typed refusal to guess.
func isUndecidable(err error) bool {
	var ue *chain.UndecidableError
	return errors.As(err, &ue)
}

// startTrimmer starts the auditor's trim: for every settled epoch, the
// settle moves the absorbed slots' bytes (modelled by the archive call),
// the rewritten cursor advances over them the way the trim-check does,
// then the real chain.Trim deletes them.
func (s *Sim) startTrimmer() *actor {
	s.trims++
	return s.spawn(fmt.Sprintf("t%d", s.trims), roleTrimmer, "auditor", s.actorSeed(200+s.trims), func(ctx context.Context, a *actor) error {
		c := s.chainFor(a)
		epochs, err := listEpochs(ctx, metaView(s, a))
		if err != nil {
			return err
		}
		for _, e := range epochs {
			if !e.Settled || e.Rewritten >= e.Checkpoint {
				continue
			}
			upTo := e.Checkpoint
			if _, err := s.do(ctx, &call{actor: a, op: "archive", bucket: -2, key: fmt.Sprintf("e%d [%d,%d)", e.Epoch, e.Rewritten, upTo),
				apply: func() (any, error) { s.chk.archive(e.Epoch, e.Rewritten, upTo); return nil, nil }}); err != nil {
				return err
			}
			rec, err := c.UpdateEpoch(ctx, e.Epoch, func(x *meta.Epoch) bool {
				if x.Rewritten >= upTo {
					return false
				}
				x.Rewritten = upTo
				return true
			})
			if err != nil {
				return err
			}
			if err := c.Trim(ctx, rec, rec.Rewritten); err != nil {
				return err
			}
		}
		return nil
	})
}

// listEpochs reads every epoch record of the chain, in order.
func listEpochs(ctx context.Context, ms meta.Store) ([]meta.Epoch, error) {
	q := meta.Query{PK: meta.ChainPK(chainStar, chainClass), From: "e#", To: "e#~"}
	var out []meta.Epoch
	for range 1000 {
		pg, err := ms.Query(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, it := range pg.Items {
			var e meta.Epoch
			if err := meta.Decode(it.Val, &e); err != nil {
				return nil, err
			}
			out = append(out, e)
		}
		if pg.Next == "" {
			return out, nil
		}
		q.PageToken = pg.Next
	}
	return nil, errors.New("chainsim: epoch listing does not end")
}
