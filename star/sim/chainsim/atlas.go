package chainsim

import (
	"fmt"
	"slices"
	"strings"

	"github.com/starlog/starlog/shared/chain"
)

// The fault atlas keeps the liveness demand fair (TigerBeetle's
// ClusterFaultAtlas keeps one good copy): it lets a fault damage a copy
// only while the slot stays decidable, picks the liveness phase's down
// buckets so every slot a fence must decide stays decidable, and waives
// the demand when the sim itself made a slot undecidable anyway.

// occupants is what each bucket holds at a slot now.
func (c *checker) occupants(ev *epochView, s uint64) []occ {
	key := chain.SlotKey(chainStar, chainClass, ev.epoch, s)
	out := make([]occ, len(c.s.objs.buckets))
	for b := range c.s.objs.buckets {
		if obj := c.s.objs.buckets[b][key]; obj != nil {
			out[b] = classify(obj.data, ev.epoch, s, ev.nonce)
		}
	}
	return out
}

// goodCopies counts the undamaged flight copies of a slot outside bucket
// except (-1: none excepted).
func (c *checker) goodCopies(ev *epochView, s uint64, except int) int {
	key := chain.SlotKey(chainStar, chainClass, ev.epoch, s)
	n := 0
	for b := range c.s.objs.buckets {
		obj := c.s.objs.buckets[b][key]
		if b != except && obj != nil && obj.damage == "" && classify(obj.data, ev.epoch, s, ev.nonce) == occFlight {
			n++
		}
	}
	return n
}

func allLive(k int) []bool {
	live := make([]bool, k)
	for i := range live {
		live[i] = true
	}
	return live
}

// target is one stored copy a fault may damage.
type target struct {
	bucket int
	key    string
}

// damageable lists, in a stable order, the stored slot copies whose
// damage leaves one good copy of the slot and the slot decidable.
func (c *checker) damageable() []target {
	var out []target
	for _, bk := range c.s.objs.keys() {
		e, s, ok := parseSlotKey(bk[1])
		ev := c.epochs[e]
		if !ok || ev == nil || !ev.known {
			continue
		}
		b := c.s.objs.index(bk[0])
		occs := c.occupants(ev, s)
		o := occs[b]
		if c.s.objs.buckets[b][bk[1]].damage != "" || (o != occFlight && o != occPoison) {
			continue
		}
		if o == occFlight && c.goodCopies(ev, s, b) == 0 {
			continue // keep one good copy
		}
		if ev.cut == nil {
			after := slices.Clone(occs)
			after[b] = occUnreadable
			if _, ok := decide(c.s.sw.K, c.s.sw.W, after, allLive(c.s.sw.K)); !ok {
				continue
			}
		}
		out = append(out, target{b, bk[1]})
	}
	return out
}

// undecidable says where a fence with the live buckets cannot finish, or
// "": for each unsettled epoch without a recorded cut, the slots from its
// checkpoint up to the first the fence decides dead; and below every cut
// (recorded or decided) one good copy in a live bucket for the walk.
func (c *checker) undecidable(live []bool) string {
	k, w := c.s.sw.K, c.s.sw.W
	for _, ev := range c.sortedEpochs() {
		if ev.settled || !ev.known {
			continue
		}
		cut, found := uint64(0), ev.cut != nil
		if found {
			cut = *ev.cut
		}
		for s := ev.checkpoint; !found && s <= ev.maxSlot+1; s++ {
			f, ok := decide(k, w, c.occupants(ev, s), live)
			if !ok {
				return fmt.Sprintf("e%d/%d undecidable with %v (%s)", ev.epoch, s, liveString(live), c.describe(ev, s))
			}
			if f == chain.Dead {
				cut, found = s, true
			}
		}
		if !found {
			return fmt.Sprintf("e%d has no slot the fence can kill with %v", ev.epoch, liveString(live))
		}
		// The garbage probe, which settlement waits for, finishes a slot
		// of [cut, cut+window) once K−W+1 poisons stand, or every bucket
		// holds poison or something unreadable (never deleted).
		for s := cut; s < cut+uint64(ev.window); s++ {
			killable, all := 0, true
			for b, o := range c.occupants(ev, s) {
				if live[b] && o != occUnreadable {
					killable++ // it answers, and holds poison or takes it
				}
				all = all && live[b]
			}
			if killable < k-w+1 && !all {
				return fmt.Sprintf("garbage slot e%d/%d cannot be killed with %v (%s)", ev.epoch, s, liveString(live), c.describe(ev, s))
			}
		}
		for s := ev.checkpoint; s < cut; s++ {
			key := chain.SlotKey(chainStar, chainClass, ev.epoch, s)
			good := false
			for b, l := range live {
				obj := c.s.objs.buckets[b][key]
				good = good || (l && obj != nil && obj.damage == "" && classify(obj.data, ev.epoch, s, ev.nonce) == occFlight)
			}
			if !good {
				return fmt.Sprintf("e%d/%d has no good copy in a live bucket with %v (%s)", ev.epoch, s, liveString(live), c.describe(ev, s))
			}
		}
	}
	return ""
}

func liveString(live []bool) string {
	var down []string
	for b, l := range live {
		if !l {
			down = append(down, fmt.Sprintf("b%d", b))
		}
	}
	if len(down) == 0 {
		return "all buckets up"
	}
	return strings.Join(down, ",") + " down"
}

// liveDownSet picks the buckets the liveness phase keeps down: up to
// Swarm.LiveDown of them, among the sets that keep every slot decidable.
func (c *checker) liveDownSet() []int {
	k := c.s.sw.K
	for d := min(c.s.sw.LiveDown, k-c.s.sw.W, c.s.sw.W-1); d > 0; d-- {
		var fair [][]int
		for _, set := range combinations(k, d) {
			live := allLive(k)
			for _, b := range set {
				live[b] = false
			}
			if c.undecidable(live) == "" {
				fair = append(fair, set)
			}
		}
		if len(fair) > 0 {
			return fair[c.s.ch.Pick(len(fair))]
		}
	}
	return nil
}

// combinations lists the d-subsets of [0, k) in lexicographic order.
func combinations(k, d int) [][]int {
	var out [][]int
	var rec func(from int, cur []int)
	rec = func(from int, cur []int) {
		if len(cur) == d {
			out = append(out, slices.Clone(cur))
			return
		}
		for i := from; i < k; i++ {
			rec(i+1, append(cur, i))
		}
	}
	rec(0, nil)
	return out
}

// liveDemand says why the final settlement need not return (the sim made
// a slot undecidable), or "" when it must.
func (c *checker) liveDemand() string {
	live := allLive(c.s.sw.K)
	for b, h := range c.s.health {
		if h.mode == "down" || h.mode == "hang" {
			live[b] = false
		}
	}
	if why := c.undecidable(live); why != "" {
		c.s.trace.add(c.s, "liveness waived: "+why)
		return why
	}
	return ""
}

// fenced: the lowest unsettled epoch (the one a settlement works on, in
// order) has a recorded cut, so what is stuck is its walk, absorb or
// garbage probe, not its fence.
func (c *checker) fenced() bool {
	for _, ev := range c.sortedEpochs() {
		if !ev.settled {
			return ev.cut != nil
		}
	}
	return true
}

// stuckWhere describes the chain for a liveness failure.
func (c *checker) stuckWhere() string {
	var parts []string
	if c.head != nil {
		cut := "none"
		if c.head.Cut != nil {
			cut = fmt.Sprint(*c.head.Cut)
		}
		parts = append(parts, fmt.Sprintf("head e%d %s owner %s fencer %s cut %s", c.head.Epoch, c.head.State, c.head.Owner, c.head.Fencer, cut))
	}
	first := true
	for _, ev := range c.sortedEpochs() {
		if ev.settled {
			continue
		}
		parts = append(parts, fmt.Sprintf("e%d unsettled (checkpoint %d)", ev.epoch, ev.checkpoint))
		for s := ev.checkpoint; first && s <= min(ev.maxSlot, ev.checkpoint+uint64(ev.window)); s++ {
			parts = append(parts, fmt.Sprintf("e%d/%d: %s", ev.epoch, s, c.describe(ev, s)))
		}
		first = false
	}
	c.s.mu.Lock()
	pend := slices.Clone(c.s.pending)
	c.s.mu.Unlock()
	slices.SortFunc(pend, (*call).compare)
	for i, p := range pend {
		if i == 6 {
			parts = append(parts, fmt.Sprintf("… %d more pending", len(pend)-i))
			break
		}
		where := ""
		if p.bucket >= 0 {
			where = c.s.objs.names[p.bucket] + " "
		}
		parts = append(parts, fmt.Sprintf("pending %s %s %s%s", p.actor.name, p.op, where, abbrev(p.key)))
	}
	return strings.Join(parts, "; ")
}
