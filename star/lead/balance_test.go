package lead

import (
	"fmt"
	"slices"
	"testing"
)

// The balancer's plan, apart from any I/O: who moves which stream where.
func TestPlanBalance(t *testing.T) {
	ids := func(n int) []string {
		var out []string
		for i := n - 1; i >= 0; i-- { // unsorted on purpose
			out = append(out, fmt.Sprintf("s%02d", i))
		}
		return out
	}
	mv := func(id, to string) BalanceMove { return BalanceMove{StreamID: id, To: to} }
	cases := []struct {
		name      string
		mine      []string
		peers     []StarLoad
		want      []BalanceMove
		wantShare int
	}{
		{name: "alone", mine: ids(9), wantShare: 9},
		{name: "nothing led", peers: []StarLoad{{"b", 0}}, wantShare: 0},
		{
			name: "9 over three stars: 3 each, alternating, smallest ids first",
			mine: ids(9), peers: []StarLoad{{"c", 0}, {"b", 0}},
			want:      []BalanceMove{mv("s00", "b"), mv("s01", "c"), mv("s02", "b"), mv("s03", "c"), mv("s04", "b"), mv("s05", "c")},
			wantShare: 3,
		},
		{
			name: "9 over two stars: 5 and 4",
			mine: ids(9), peers: []StarLoad{{"b", 0}},
			want:      []BalanceMove{mv("s00", "b"), mv("s01", "b"), mv("s02", "b"), mv("s03", "b")},
			wantShare: 5,
		},
		// share 3; 4 is within share+1.
		{name: "within the slack", mine: ids(4), peers: []StarLoad{{"b", 3}, {"c", 2}}, wantShare: 3},
		// share 5: 10 → 5, all to c (b is at the share already).
		{
			name: "only stars below the share take streams",
			mine: ids(10), peers: []StarLoad{{"b", 5}, {"c", 0}},
			want:      []BalanceMove{mv("s00", "c"), mv("s01", "c"), mv("s02", "c"), mv("s03", "c"), mv("s04", "c")},
			wantShare: 5,
		},
		// share ⌈12/3⌉ = 4: 7 → 4; c (2) is furthest below, then b and c tie at 3 (b first by id), then c.
		{
			name: "furthest below first, recounting",
			mine: ids(7), peers: []StarLoad{{"b", 3}, {"c", 2}},
			want:      []BalanceMove{mv("s00", "c"), mv("s01", "b"), mv("s02", "c")},
			wantShare: 4,
		},
		// Another star above the share does not take; nor does this star
		// plan to go below the share.
		{
			name: "two loaded stars",
			mine: ids(8), peers: []StarLoad{{"b", 8}, {"c", 0}, {"d", 0}},
			want:      []BalanceMove{mv("s00", "c"), mv("s01", "d"), mv("s02", "c"), mv("s03", "d")},
			wantShare: 4,
		},
	}
	for _, c := range cases {
		peers := slices.Clone(c.peers)
		got, share := PlanBalance(c.mine, c.peers)
		if !slices.Equal(got, c.want) || share != c.wantShare {
			t.Errorf("%s: plan %v share %d, want %v share %d", c.name, got, share, c.want, c.wantShare)
		}
		if !slices.Equal(peers, c.peers) {
			t.Errorf("%s: the plan changed its input %v", c.name, c.peers)
		}
	}
}
