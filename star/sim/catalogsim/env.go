package catalogsim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/starlog/starlog/star/node"
)

// parkedEnvBoost multiplies the chance of a release (handoff, leave,
// drain) while a request is parked before it opens a stream.
const parkedEnvBoost = 10

// envEvent maybe injects one environment event; it reports whether one
// happened.
func (s *Sim) envEvent(now time.Time) bool {
	var kinds []EnvKind
	for k := range numEnvKinds {
		if s.sw.Env[k] {
			kinds = append(kinds, k)
		}
	}
	// While a request waits between its lease judgment and its open and
	// another request opened the stream beside it, a release (handoff,
	// leave, drain) is what matters (issue 26 defect 8): more likely, the
	// only kinds drawn then (if the swarm has any), and a handoff is of
	// that stream, to a peer.
	releases := slices.DeleteFunc(slices.Clone(kinds), func(k EnvKind) bool { return k != EnvHandoff && k != EnvLeave && k != EnvDrain })
	beside := s.parkedBeside()
	focus := len(beside) > 0 && len(releases) > 0 && s.ch.Chance(min(1, parkedEnvBoost*s.sw.PEnv))
	if focus {
		kinds = releases
	} else if !s.ch.Chance(s.sw.PEnv) {
		return false
	}
	if len(kinds) == 0 {
		return false
	}
	k := kinds[s.ch.Pick(len(kinds))]
	var up []*incarnation // serving incarnations, in start order
	for _, inc := range s.incs {
		if inc.serving() && !inc.dead {
			up = append(up, inc)
		}
	}
	pickUp := func() *incarnation {
		if len(up) == 0 {
			return nil
		}
		return up[s.ch.Pick(len(up))]
	}
	// A leave or drain in focus is of the parked open's incarnation.
	pickRelease := func() *incarnation {
		if focus {
			inc := beside[s.ch.Pick(len(beside))].c.inc
			s.focused(inc, "")
			return inc
		}
		return pickUp()
	}
	s.faultCounts[k.String()]++
	switch k {
	case EnvCrash:
		var live []*incarnation
		for _, inc := range s.incs {
			if !inc.dead && inc.state != incDown {
				live = append(live, inc)
			}
		}
		if len(live) == 0 {
			return false
		}
		s.crash(live[s.ch.Pick(len(live))])
	case EnvPartition:
		inc := pickUp()
		if inc == nil {
			return false
		}
		d := time.Duration(2+s.ch.Pick(19)) * time.Second
		inc.cutUntil = now.Add(d)
		s.trace.add(s, fmt.Sprintf("partition %s from the metastore for %v", inc.name, d))
	case EnvHandoff:
		inc := pickUp()
		// A stream this incarnation acknowledged appends of last, if any
		// (a handoff of a stream it does not lead is refused).
		basin, stream := basinNames[s.ch.Pick(s.sw.Basins)], streamNames[s.ch.Pick(s.sw.Streams)]
		if inc != nil {
			if led := s.chk.ledBy(inc.name); len(led) > 0 {
				k := led[s.ch.Pick(len(led))]
				basin, stream = k[0], k[1]
			}
		}
		// In focus (above): the stream of a parked open, by its
		// incarnation, to a peer: the release, and a successor elsewhere,
		// between a lease judgment and the open.
		toPeer := false
		if focus {
			h := beside[s.ch.Pick(len(beside))]
			if st := s.chk.ids[strings.TrimPrefix(h.c.key, "stream#")]; st != nil {
				inc, basin, stream, toPeer = h.c.inc, st.basin, st.name, true
				s.focused(inc, h.c.key)
			}
		}
		if inc == nil {
			return false
		}
		to := ""
		var peers []string
		for _, st := range starNames[:s.sw.Stars] {
			if st != inc.star {
				peers = append(peers, st)
			}
		}
		if toPeer {
			to = peers[s.ch.Pick(len(peers))]
		} else if i := s.ch.Pick(len(peers) + 1); i > 0 {
			to = peers[i-1]
		}
		s.trace.add(s, fmt.Sprintf("handoff %s/%s by %s to %q", basin, stream, inc.name, to))
		n := inc.n
		s.task("handoff-"+inc.name, func() string {
			ctx, cancel := context.WithTimeout(withWho(inc.ctx, "h"), taskTimeout)
			defer cancel()
			res, err := n.Handoff(ctx, basin, stream, to)
			if err != nil {
				return "handoff: " + errString(err)
			}
			return fmt.Sprintf("handoff: %s released at %d to %q", abbrev(res.StreamID), res.Frontier, res.To)
		})
	case EnvLeave:
		inc := pickRelease()
		if inc == nil {
			return false
		}
		s.closeGracefully(inc, "leave", func(ctx context.Context, n *node.Node) string {
			released, failed := n.Leave(ctx)
			return fmt.Sprintf("left: %d released, %d failed", released, failed)
		})
	case EnvDrain:
		inc := pickRelease()
		if inc == nil {
			return false
		}
		s.closeGracefully(inc, "drain", func(ctx context.Context, n *node.Node) string {
			n.Drain()
			for ctx.Err() == nil {
				if st := n.DrainStatus(); st.TerminateGate {
					return "drained"
				}
				t := time.NewTimer(500 * time.Millisecond)
				select {
				case <-ctx.Done():
				case <-t.C:
				}
				t.Stop()
			}
			return "drain cut short"
		})
	case EnvZombie:
		inc := pickUp()
		if inc == nil || s.cur[inc.star] != inc {
			return false
		}
		d := time.Duration(10+s.ch.Pick(30)) * time.Second
		inc.cutUntil = now.Add(d)
		s.trace.add(s, fmt.Sprintf("zombie: %s cut off for %v while its star restarts", inc.name, d))
		s.startStar(inc.star)
	case EnvRelease:
		if len(s.held) == 0 {
			return false
		}
		s.release(s.ch.Pick(len(s.held)))
	}
	return true
}

// parkedBeside are the held pauses of requests about to open a stream
// that another request of their incarnation opened meanwhile (held.beside).
func (s *Sim) parkedBeside() []held {
	var out []held
	for _, h := range s.held {
		if h.beside && h.c.inc.serving() && !h.c.inc.dead {
			out = append(out, h)
		}
	}
	return out
}

// focused says a release in focus struck the parked opens of inc (of
// stream key, or of every stream when key is ""): one release each.
func (s *Sim) focused(inc *incarnation, key string) {
	for i := range s.held {
		if c := s.held[i].c; c.park && c.inc == inc && (key == "" || c.key == key) {
			s.held[i].beside = false
		}
	}
}
