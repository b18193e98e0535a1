package catalogsim

import (
	"context"
	"hash/fnv"

	"github.com/starlog/starlog/star/sim/simmeta"
)

// metaView is one star incarnation's meta.Store over the simulated
// table: every request becomes a call the scheduler serves, labelled with
// the client whose request made it (ctx) or the incarnation itself.
func metaView(s *Sim, inc *incarnation) simmeta.View {
	return simmeta.View{T: s.meta, Call: func(ctx context.Context, op, key string, val []byte, write bool, apply func() (any, error)) (any, error) {
		who := inc.name
		if w, ok := ctx.Value(whoKey{}).(string); ok {
			who = w + "@" + inc.name
		}
		return s.do(ctx, &call{inc: inc, who: who, op: op, key: key, digest: digest(val), write: write, apply: apply})
	}}
}

type whoKey struct{}

// withWho labels the metastore calls made under ctx with a client's name.
func withWho(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, whoKey{}, who)
}

func digest(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}
