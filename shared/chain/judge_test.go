package chain

import (
	"fmt"
	"testing"

	"github.com/starlog/starlog/shared/meta"
)

// heads enumerates chain heads over every state, owner, fencer and cut a
// judge can meet, for epoch 5 of star "s" as seen by "s:2".
func heads() []meta.Head {
	ids := []string{"", "s:1", "s:2", "s:3", "peer:1", "auditor"}
	cut := uint64(7)
	var out []meta.Head
	for _, epoch := range []uint64{4, 5, 6} {
		for _, st := range []meta.HeadState{meta.HeadOpen, meta.HeadFencing, meta.HeadSettled, "bogus"} {
			for _, owner := range ids[1:] {
				for _, fencer := range ids {
					for _, c := range []*uint64{nil, &cut} {
						out = append(out, meta.Head{Epoch: epoch, State: st, Owner: owner, Fencer: fencer, Cut: c})
					}
				}
			}
		}
	}
	return out
}

const me = "s:2"

// judgeFence over every head: the properties that make a fence safe.
func TestJudgeFence(t *testing.T) {
	if v := judgeFence(meta.Head{}, false, 5, "s", me, false); v != vNotMinted {
		t.Fatalf("no head: %v", v)
	}
	for _, h := range heads() {
		for _, own := range []bool{true, false} {
			v := judgeFence(h, true, 5, "s", me, own)
			name := fmt.Sprintf("%+v own=%v → %v", h, own, v)
			mineFence := h.State == meta.HeadFencing && h.Fencer == me
			switch {
			case h.Owner == "s:3" || h.Fencer == "s:3":
				if v != vDeposed {
					t.Errorf("%s: a later incarnation on the head deposes %s, even as a successor", name, me)
				}
				continue
			case h.Epoch < 5:
				if v != vNotMinted {
					t.Errorf("%s: an epoch above the head is not minted", name)
				}
			case h.Epoch > 5 && own:
				if v != vDeposed {
					t.Errorf("%s: a writer whose epoch the head passed is deposed", name)
				}
			case h.Epoch > 5:
				if v != vCutOnRecord {
					t.Errorf("%s: below the head, the cut is on the record", name)
				}
			case mineFence:
				if want := map[bool]verdict{true: vCutOnHead, false: vFindCut}[h.Cut != nil]; v != want {
					t.Errorf("%s: my own fence: want %v", name, want)
				}
			case own:
				// The writer claims only its own open epoch; anything else
				// is another actor's doing.
				if want := map[bool]verdict{true: vClaim, false: vDeposed}[h.State == meta.HeadOpen && h.Owner == me]; v != want {
					t.Errorf("%s: want %v", name, want)
				}
			case h.State == meta.HeadSettled:
				if v != vCutOnHead {
					t.Errorf("%s: a settled head's cut is adopted", name)
				}
			default:
				if v != vClaim {
					t.Errorf("%s: a successor takes over an open epoch or another's fence", name)
				}
			}
			if !own && v == vDeposed {
				t.Errorf("%s: a successor is deposed only by a later incarnation", name)
			}
		}
	}
}

// judgeMint over every head: a later incarnation always wins, a writer
// never mints over an open epoch of another, and self-recovery mints
// only from its own fenced epoch with the cut recorded.
func TestJudgeMint(t *testing.T) {
	if v := judgeMint(meta.Head{}, false, "s", me); v != vMintFirst {
		t.Fatalf("no head: %v", v)
	}
	for _, h := range heads() {
		v := judgeMint(h, true, "s", me)
		name := fmt.Sprintf("%+v → %v", h, v)
		later := h.Owner == "s:3" || h.Fencer == "s:3"
		switch {
		case later:
			if v != vDeposed {
				t.Errorf("%s: a later incarnation on the head deposes %s", name, me)
			}
		case h.State == meta.HeadOpen && h.Owner == me:
			if v != vAdoptOpen {
				t.Errorf("%s: my own open epoch is adopted (a lost mint reply)", name)
			}
		case h.State == meta.HeadOpen:
			if v != vNotFenced {
				t.Errorf("%s: an earlier incarnation's open epoch must be settled first", name)
			}
		case h.State == meta.HeadFencing && h.Fencer == me && h.Owner == me && h.Cut != nil:
			if v != vMintNext {
				t.Errorf("%s: self-recovery mints past its own fenced epoch", name)
			}
		case h.State == meta.HeadFencing && h.Owner == me:
			if v != vDeposed && !(h.Fencer == me) {
				t.Errorf("%s: another actor fencing my epoch deposes me", name)
			}
			if h.Fencer == me && v != vNotFenced {
				t.Errorf("%s: my fence without its cut is not finished", name)
			}
		case h.State == meta.HeadFencing:
			if v != vNotFenced {
				t.Errorf("%s: an earlier incarnation's epoch being fenced must be settled first", name)
			}
		case h.State == meta.HeadSettled && h.Owner == me:
			if v != vDeposed {
				t.Errorf("%s: my epoch settled by another deposes me", name)
			}
		case h.State == meta.HeadSettled:
			if v != vMintNext {
				t.Errorf("%s: an earlier incarnation's settled epoch may be minted past", name)
			}
		default:
			if v != vDeposed {
				t.Errorf("%s: an unknown head state is never written over", name)
			}
		}
	}
}

func TestIncarnationOf(t *testing.T) {
	for id, want := range map[string]uint64{"s:1": 1, "s:12": 12, "s": 0, "s:x": 0, "peer:3": 0, "s:-1": 0, "": 0, "ss:2": 0} {
		if got := incarnationOf(id, "s"); got != want {
			t.Errorf("incarnationOf(%q) = %d, want %d", id, got, want)
		}
	}
}
