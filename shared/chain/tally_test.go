package chain

import "testing"

// Every assignment of occupants to every bucket of every (K, W) up to K=5,
// in every observation order prefix: the fate is Committed xor Dead once all
// buckets are known, a decided fate never changes as more is observed, and
// CanCommit is false exactly when Dead.
func TestTallyExhaustive(t *testing.T) {
	for k := 1; k <= 5; k++ {
		for w := 1; w <= k; w++ {
			total := 1
			for range k {
				total *= 3
			}
			for code := range total {
				occ := make([]Occupant, k)
				c := code
				for i := range k {
					occ[i] = Occupant(c % 3)
					c /= 3
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
				full := true
				for _, o := range occ {
					if o == Unknown {
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
