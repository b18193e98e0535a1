package catalogsim

import (
	"context"

	"github.com/starlog/starlog/star/node"
)

// hooks are one incarnation's decision points (node.Hooks) as calls the
// scheduler serves: a request that reaches one waits there like a
// metastore call, so the scheduler can run other calls and events (a
// release, a leave) before it goes on, or park it (Swarm.PPark).
func (s *Sim) hooks(inc *incarnation) *node.Hooks {
	return &node.Hooks{
		// Between the lease judgment and the slot lock (issue 26 defect
		// 8: a release in that window must fence the request).
		BeforeOpen: func(ctx context.Context, id string) {
			s.pause(ctx, inc, "hook.open", "stream#"+id)
		},
	}
}

// pause blocks the calling goroutine until the scheduler serves the
// pause, or ctx ends, or the incarnation dies (the request then goes on
// to what a cancelled or dead process does next).
func (s *Sim) pause(ctx context.Context, inc *incarnation, op, key string) {
	who := inc.name
	if w, ok := ctx.Value(whoKey{}).(string); ok {
		who = w + "@" + inc.name
	}
	_, _ = s.do(ctx, &call{inc: inc, who: who, op: op, key: key, park: true, apply: func() (any, error) { return nil, nil }})
}
