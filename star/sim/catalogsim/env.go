package catalogsim

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/starlog/starlog/star/node"
)

// parkedEnvBoost multiplies the chance of an environment event while a
// request is parked before it opens a stream.
const parkedEnvBoost = 5

// envEvent maybe injects one environment event; it reports whether one
// happened.
func (s *Sim) envEvent(now time.Time) bool {
	p := s.sw.PEnv
	if len(s.parkedOpens()) > 0 {
		// A request waits between its lease judgment and its open: the
		// moment a release (handoff, leave, drain) matters most.
		p = min(1, parkedEnvBoost*p)
	}
	if !s.ch.Chance(p) {
		return false
	}
	var kinds []EnvKind
	for k := range numEnvKinds {
		if s.sw.Env[k] {
			kinds = append(kinds, k)
		}
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
		// Half the time while a request is parked before it opens a
		// stream, that stream, by the parked request's incarnation, to a
		// peer: the release (and a successor elsewhere) between a lease
		// judgment and the open that issue 26 defect 8 is about. It is
		// refused unless another request opened the stream meanwhile.
		toPeer := false
		if parked := s.parkedOpens(); len(parked) > 0 && s.ch.Chance(0.5) {
			h := parked[s.ch.Pick(len(parked))]
			if st := s.chk.ids[strings.TrimPrefix(h.c.key, "stream#")]; st != nil && h.c.inc.serving() && !h.c.inc.dead {
				inc, basin, stream, toPeer = h.c.inc, st.basin, st.name, true
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
		inc := pickUp()
		if inc == nil {
			return false
		}
		s.closeGracefully(inc, "leave", func(ctx context.Context, n *node.Node) string {
			released, failed := n.Leave(ctx)
			return fmt.Sprintf("left: %d released, %d failed", released, failed)
		})
	case EnvDrain:
		inc := pickUp()
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

// parkedOpens are the held pauses of requests about to open a stream.
func (s *Sim) parkedOpens() []held {
	var out []held
	for _, h := range s.held {
		if h.c.park && h.c.op == "hook.open" {
			out = append(out, h)
		}
	}
	return out
}
