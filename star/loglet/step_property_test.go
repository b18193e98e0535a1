package loglet_test

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"pgregory.net/rapid"

	"github.com/starlog/starlog/star/loglet"
)

// TestCoreProperties drives a Core with random events, as a driver that
// keeps every promise would (results only for slots it uploaded, a cut
// from the own fence's rules), and checks after every step:
//   - acks go out strictly in slot order within each epoch, from slot 0,
//     each for a flight that committed there or that a fence cut above;
//   - every flight cut is exactly one of released, failed or waiting, and
//     released or failed once;
//   - at most window flights wait; a republished flight keeps its order.
func TestCoreProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		window := rapid.IntRange(1, 4).Draw(t, "window")
		c := loglet.NewCore[int](1, window)
		type where struct{ epoch, slot uint64 }
		at := map[int]where{}              // each waiting flight's claim
		committed := map[int]bool{}        // committed in its claim
		uploading := map[int]bool{}        // claimed, not yet reported
		nextRelease := map[uint64]uint64{} // per epoch
		done := map[int]string{}           // released or failed
		cut, epoch := 0, uint64(1)

		take := func(eff loglet.Effects[int], late map[int]bool) {
			for _, f := range eff.Release {
				w := at[f]
				if !committed[f] && !late[f] {
					t.Fatalf("flight %d released from e%d/%d without a commit", f, w.epoch, w.slot)
				}
				if w.slot != nextRelease[w.epoch] {
					t.Fatalf("flight %d released from e%d/%d, the next release was slot %d", f, w.epoch, w.slot, nextRelease[w.epoch])
				}
				nextRelease[w.epoch]++
				if d, ok := done[f]; ok {
					t.Fatalf("flight %d released, already %s", f, d)
				}
				done[f] = "released"
				delete(at, f)
			}
			for _, f := range eff.Fail {
				if d, ok := done[f]; ok {
					t.Fatalf("flight %d failed, already %s", f, d)
				}
				done[f] = "failed"
				delete(at, f)
			}
			var prev []int
			for _, u := range eff.Upload {
				at[u.Flight] = where{u.Epoch, u.Slot}
				committed[u.Flight], uploading[u.Flight] = false, true
				if u.Republished {
					prev = append(prev, u.Flight)
				}
			}
			if !slices.IsSorted(prev) { // flights are numbered in cut order
				t.Fatalf("republished out of order: %v", prev)
			}
		}

		for step := range rapid.IntRange(1, 60).Draw(t, "steps") {
			switch op := rapid.IntRange(0, 9).Draw(t, fmt.Sprint("op", step)); {
			case op < 3 && c.CanClaim():
				eff, err := c.Claim(cut)
				if err != nil {
					t.Fatal(err)
				}
				cut++
				take(eff, nil)
			case op < 8 && len(uploading) > 0 && c.Phase() != loglet.Fencing:
				var keys []int
				for f := range uploading {
					keys = append(keys, f)
				}
				slices.Sort(keys)
				f := rapid.SampledFrom(keys).Draw(t, fmt.Sprint("report", step))
				var err error
				if rapid.IntRange(0, 3).Draw(t, fmt.Sprint("fails", step)) == 0 {
					err = errors.New("timeout")
				}
				delete(uploading, f)
				committed[f] = err == nil
				take(c.Uploaded(at[f].epoch, at[f].slot, err), nil)
			case c.Phase() == loglet.Fencing:
				// The own fence cuts at the first slot, from the lowest
				// unreleased one, that did not commit (it never kills a
				// committed slot the writer knows of); sometimes it finds
				// a slot the writer saw fail committed after all.
				waiting := c.Waiting()
				late := map[int]bool{}
				n := 0
				for _, f := range waiting {
					if !committed[f] && rapid.IntRange(0, 2).Draw(t, fmt.Sprint("rolled", step, f)) != 0 {
						break
					}
					late[f] = true
					n++
				}
				lowest := nextRelease[epoch]
				epoch++
				take(c.Recovered(lowest+uint64(n), epoch), late)
			case op == 9 && rapid.IntRange(0, 9).Draw(t, fmt.Sprint("depose", step)) == 0:
				take(c.Depose(errors.New("deposed")), nil)
			}
			if c.Phase() == loglet.Writing && c.Epoch() != epoch {
				t.Fatalf("core writes e%d, the driver minted e%d", c.Epoch(), epoch)
			}
			if c.Inflight() > window {
				t.Fatalf("%d flights wait, window %d", c.Inflight(), window)
			}
			waiting := c.Waiting()
			if len(waiting)+len(done) != cut {
				t.Fatalf("%d cut, %d waiting and %d released or failed", cut, len(waiting), len(done))
			}
			for _, f := range waiting {
				if d, ok := done[f]; ok {
					t.Fatalf("flight %d waits, already %s", f, d)
				}
			}
			if c.Phase() == loglet.Deposed {
				return
			}
		}
	})
}
