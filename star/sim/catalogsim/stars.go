package catalogsim

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/star/node"
)

var allBuckets = []string{"standard", "express-a", "express-b", "express-c"}

// Bounds in fake time.
const (
	restartAfter = 3 * time.Second  // a supervisor restarts a dead star this late
	taskTimeout  = 30 * time.Second // a handoff, leave, drain or graceful close
	heartbeat    = time.Second
	deadAfter    = 6 * time.Second
)

type incState uint8

const (
	incOpening incState = iota
	incUp               // serving
	incLeaving          // serving, releasing its leases (Leave, Drain)
	incClosing          // graceful close running
	incDown             // crashed or closed
)

// incarnation is one process of a star: node.Open to its crash or close.
type incarnation struct {
	name   string // a1, a2, b1 …
	star   string
	ctx    context.Context
	cancel context.CancelFunc

	// Under Sim.mu.
	n     *node.Node
	state incState
	dead  bool // crashed: its calls never land

	// Owned by the scheduler.
	cutUntil time.Time // cut off from the metastore until then
}

func (inc *incarnation) serving() bool { return inc.state == incUp || inc.state == incLeaving }

// config is a star's config in the simulation: short periods in fake
// time, no balancer (its rounds draw jitter from the global generator).
func (s *Sim) config(star string) node.Config {
	c := node.Defaults()
	// An address no HTTP client dials (a closing star nudges its peers over
	// HTTP): the sim forwards by star name.
	c.StarID, c.Address = star, "sim://"+star
	c.Standard.FlushInterval = 5 * time.Millisecond
	c.Express.FlushInterval = 5 * time.Millisecond
	c.DeletionPending = s.sw.DeletionPending
	c.IdleRelease = s.sw.IdleRelease
	if c.IdleRelease == 0 {
		c.IdleRelease = -1 // off
	}
	c.BalanceEvery = 0
	c.HeartbeatEvery = heartbeat
	c.DeadAfter = deadAfter
	c.LeaseCacheTTL = time.Second
	if s.sw.Audit {
		c.Settle = s.settleCfg // the markers ripen as the auditor expects
	}
	return c
}

func (s *Sim) logger() *slog.Logger {
	if s.opt.verbose {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// startStar opens star's next incarnation in a task; clients reach it
// once node.Open returned.
func (s *Sim) startStar(star string) *incarnation {
	s.gen[star]++
	inc := &incarnation{name: fmt.Sprintf("%s%d", star, s.gen[star]), star: star}
	inc.ctx, inc.cancel = context.WithCancel(context.Background())
	s.mu.Lock()
	s.incs = append(s.incs, inc)
	s.mu.Unlock()
	s.cur[star] = inc
	delete(s.restartAt, star)
	s.trace.add(s, "open "+inc.name)
	s.task("open-"+inc.name, func() string {
		deps := node.Deps{Meta: metaView(s, inc), Objects: gated{s, inc}, Registry: prometheus.NewRegistry(),
			Logger: s.logger().With("inc", inc.name), NewID: s.newID, Hooks: s.hooks(inc)}
		n, err := node.Open(inc.ctx, s.config(star), deps)
		s.mu.Lock()
		defer s.mu.Unlock()
		if err != nil {
			inc.state = incDown
			s.events = append(s.events, event{src: inc.name, closed: inc}) // its supervisor retries
			return "open failed: " + shortErr(err)
		}
		inc.n = n
		if inc.dead {
			inc.state = incDown
			return "opened after its crash"
		}
		inc.state = incUp
		go s.watchZombie(inc, n)
		return fmt.Sprintf("open: incarnation %d up", n.Incarnation())
	})
	return inc
}

// watchZombie tells the scheduler when an incarnation lost leadership for
// good: `star serve` exits then and its supervisor restarts it.
func (s *Sim) watchZombie(inc *incarnation, n *node.Node) {
	select {
	case <-n.Zombied():
		s.emit(event{src: inc.name, zombied: inc})
	case <-inc.ctx.Done():
	}
}

// crash kills an incarnation: its pending and held calls are answered as
// gone (never landed), its object store refuses it, and its node is
// closed with a context already cancelled (nothing it does lands).
func (s *Sim) crash(inc *incarnation) {
	s.mu.Lock()
	inc.dead = true
	inc.state = incDown
	for _, c := range slices.Clone(s.pending) {
		if c.inc == inc {
			c.done = true
			s.unpendLocked(c)
			c.reply <- result{err: errGone}
		}
	}
	n := inc.n
	s.mu.Unlock()
	s.held = slices.DeleteFunc(s.held, func(h held) bool {
		if h.c.inc == inc {
			h.c.reply <- result{err: errGone}
			return true
		}
		return false
	})
	inc.cancel()
	s.trace.add(s, "crash "+inc.name)
	if n != nil {
		s.task("reap-"+inc.name, func() string {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			n.Close(ctx)
			return "reaped"
		})
	}
	if s.cur[inc.star] == inc {
		s.restartAt[inc.star] = time.Now().Add(restartAfter)
	}
}

// closeGracefully runs fn (a leave or drain, or nothing) and then the
// node's graceful Close; the star restarts afterwards.
func (s *Sim) closeGracefully(inc *incarnation, what string, fn func(context.Context, *node.Node) string) {
	s.mu.Lock()
	n := inc.n
	if n == nil || inc.state != incUp {
		// Not up, or already leaving: a second leave, drain or exit of
		// one incarnation would race the first one's close (which of
		// the two ends first is the runtime's choice).
		s.mu.Unlock()
		return
	}
	inc.state = incLeaving
	s.mu.Unlock()
	s.trace.add(s, what+" "+inc.name)
	s.task(what+"-"+inc.name, func() string {
		ctx, cancel := context.WithTimeout(inc.ctx, taskTimeout)
		defer cancel()
		note := ""
		if fn != nil {
			note = fn(ctx, n) + "; "
		}
		s.mu.Lock()
		if inc.state == incLeaving {
			inc.state = incClosing
		}
		s.mu.Unlock()
		err := n.Close(ctx)
		s.mu.Lock()
		inc.state = incDown
		dead := inc.dead
		s.mu.Unlock()
		if dead {
			// A crash cut the close short: how far it got and what it
			// answered depend on when each goroutine saw the process
			// gone, so the trace says only that (the crash restarts the
			// star).
			return "cut short by a crash"
		}
		s.emit(event{src: inc.name, closed: inc})
		return note + "closed: " + errString(err)
	})
}

// gated is one incarnation's view of the shared object store: a crashed
// process writes nothing more.
type gated struct {
	s   *Sim
	inc *incarnation
}

func (g gated) Bucket(name string) objstore.Bucket {
	return gatedBucket{g, g.s.objs.Bucket(name)}
}

type gatedBucket struct {
	g gated
	b objstore.Bucket
}

func (b gatedBucket) check() error {
	b.g.s.mu.Lock()
	defer b.g.s.mu.Unlock()
	if b.g.inc.dead || b.g.s.closed {
		return errGone
	}
	return nil
}

func (b gatedBucket) Name() string { return b.b.Name() }

func (b gatedBucket) PutIfAbsent(ctx context.Context, key string, body []byte) (objstore.ObjectInfo, error) {
	if err := b.check(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return b.b.PutIfAbsent(ctx, key, body)
}

func (b gatedBucket) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	return b.b.Get(ctx, key, off, n)
}

func (b gatedBucket) Head(ctx context.Context, key string) (objstore.ObjectInfo, error) {
	if err := b.check(); err != nil {
		return objstore.ObjectInfo{}, err
	}
	return b.b.Head(ctx, key)
}

func (b gatedBucket) Delete(ctx context.Context, key string) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.b.Delete(ctx, key)
}

func (b gatedBucket) DeleteMany(ctx context.Context, keys []string) error {
	if err := b.check(); err != nil {
		return err
	}
	return b.b.DeleteMany(ctx, keys)
}

func (b gatedBucket) List(ctx context.Context, prefix string) iter.Seq2[objstore.ObjectInfo, error] {
	if err := b.check(); err != nil {
		return func(yield func(objstore.ObjectInfo, error) bool) { yield(objstore.ObjectInfo{}, err) }
	}
	return b.b.List(ctx, prefix)
}

func (b gatedBucket) NewMultipart(ctx context.Context, key string) (objstore.Multipart, error) {
	if err := b.check(); err != nil {
		return nil, err
	}
	return b.b.NewMultipart(ctx, key)
}
