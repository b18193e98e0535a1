package chainsim

import (
	"context"

	"github.com/starlog/starlog/star/sim/simmeta"
)

// metaView is one actor's meta.Store over the simulated table: every
// request becomes a call the scheduler serves.
func metaView(s *Sim, a *actor) simmeta.View {
	return simmeta.View{T: s.meta, Call: func(ctx context.Context, op, key string, val []byte, write bool, apply func() (any, error)) (any, error) {
		return s.do(ctx, &call{actor: a, op: op, bucket: -1, key: key, digest: digest(val), write: write, apply: apply})
	}}
}
