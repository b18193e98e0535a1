package lead

import (
	"context"
	"fmt"
	"time"

	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
)

// RegisteredStar is one star as the registry shows it (star status).
type RegisteredStar struct {
	ID          string `json:"id"`
	Address     string `json:"address,omitempty"`
	Incarnation uint64 `json:"incarnation"`
	// State is the row's state (live, draining, stopped), "dead" for a
	// live or draining row whose heartbeat is older than the dead-after
	// bound (peers presume it dead), the row's "dead", or
	// "decommissioned".
	State string `json:"state"`
	// HeartbeatAgeMs is how long ago its last heartbeat landed.
	HeartbeatAgeMs int64 `json:"heartbeat_age_ms"`
	// Leads is how many streams it led at that heartbeat.
	Leads int `json:"leads"`
}

// Stars lists every star in the registry, in directory order, with the
// state peers would judge it in now (a heartbeat older than deadAfter
// presumes its star dead).
func Stars(ctx context.Context, ms meta.Store, deadAfter time.Duration) ([]RegisteredStar, error) {
	ids, err := leader.Stars(ctx, ms)
	if err != nil {
		return nil, fmt.Errorf("list stars: %w", err)
	}
	now := time.Now()
	out := make([]RegisteredStar, 0, len(ids))
	for _, id := range ids {
		reg, _, ok, err := leader.ReadRegistration(ctx, ms, id)
		if err != nil {
			return nil, fmt.Errorf("read star %s: %w", id, err)
		}
		if !ok {
			continue
		}
		st := RegisteredStar{ID: id, Address: reg.Address, Incarnation: reg.Incarnation, State: reg.State,
			HeartbeatAgeMs: now.Sub(time.UnixMilli(reg.Heartbeat)).Milliseconds(), Leads: reg.Leads}
		switch {
		case reg.Decommissioned:
			st.State = "decommissioned"
		case (reg.State == meta.StarLive || reg.State == meta.StarDraining) && !leader.Live(reg, reg.Incarnation, now, deadAfter):
			st.State = meta.StarDead
		}
		out = append(out, st)
	}
	return out, nil
}
