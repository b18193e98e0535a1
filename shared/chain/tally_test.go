package chain

import "testing"

// naiveFate is the tally's twin: the fate of a full assignment computed
// from its definition, with no incremental state.
func naiveFate(occ []Occupant, w int) Fate {
	flights, blocked := 0, 0
	for _, o := range occ {
		switch o {
		case Flight:
			flights++
		case Poison:
			blocked++
		}
	}
	switch {
	case flights >= w:
		return Committed
	case blocked >= len(occ)-w+1:
		return Dead
	}
	return Undecided
}

// Every assignment of the four occupants to every bucket of every (K, W) up
// to K=5, observed in bucket order: a decided fate never changes as more is
// observed; the final fate matches the naive twin; CanCommit is false
// exactly when Dead; a full view without unreadable occupants is decided;
// and committed and dead never hold at once.
func TestTallyExhaustive(t *testing.T) {
	for k := 1; k <= 5; k++ {
		for w := 1; w <= k; w++ {
			total := 1
			for range k {
				total *= 4
			}
			for code := range total {
				occ := make([]Occupant, k)
				c := code
				for i := range k {
					occ[i] = Occupant(c % 4)
					c /= 4
				}
				ta := NewTally(k, w)
				decided := Undecided
				for i, o := range occ {
					ta.Observe(i, o)
					f := ta.Fate()
					if decided != Undecided && f != decided {
						t.Fatalf("K=%d W=%d %v: fate changed %v → %v", k, w, occ, decided, f)
					}
					if f != Undecided {
						decided = f
					}
					if (f == Dead) == ta.CanCommit() {
						t.Fatalf("K=%d W=%d %v: dead=%v but CanCommit=%v", k, w, occ, f == Dead, ta.CanCommit())
					}
				}
				if got, want := ta.Fate(), naiveFate(occ, w); got != want {
					t.Fatalf("K=%d W=%d %v: tally says %v, definition %v", k, w, occ, got, want)
				}
				full := true
				for _, o := range occ {
					if o == Unknown || o == Unreadable {
						full = false
					}
				}
				if full && ta.Fate() == Undecided {
					t.Fatalf("K=%d W=%d %v: every bucket known yet undecided", k, w, occ)
				}
				if ta.Flights() >= w && ta.Poisons() >= k-w+1 {
					t.Fatalf("K=%d W=%d %v: committed and dead at once", k, w, occ)
				}
			}
		}
	}
}

// An unreadable occupant never counts as a poison: K unreadable copies
// leave the slot undecided, so no fence can cut there.
func TestTallyUnreadableCountsNeither(t *testing.T) {
	ta := NewTally(3, 2)
	for i := range 3 {
		ta.Observe(i, Unreadable)
	}
	if ta.Fate() != Undecided || ta.Poisons() != 0 || ta.Flights() != 0 {
		t.Fatalf("three unreadable copies: %v, %d poisons, %d flights", ta.Fate(), ta.Poisons(), ta.Flights())
	}
	// A later read that decodes upgrades it; a flight stays a flight.
	ta.Observe(0, Flight)
	ta.Observe(0, Unreadable)
	ta.Observe(1, Flight)
	if ta.Fate() != Committed || ta.Seen(0) != Flight {
		t.Fatalf("after two flights: %v, bucket 0 %v", ta.Fate(), ta.Seen(0))
	}
}

func TestTallyRejectsChangedOccupant(t *testing.T) {
	ta := NewTally(3, 2)
	ta.Observe(0, Flight)
	ta.Observe(0, Flight) // same again is fine
	defer func() {
		if recover() == nil {
			t.Fatal("changing a bucket's occupant did not panic")
		}
	}()
	ta.Observe(0, Poison)
}
