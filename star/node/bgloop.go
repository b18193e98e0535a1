package node

import (
	"context"
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// bgLoop is one of the node's background loops (the balancer, the idle
// release): started under the node's drain context, stopped and waited for
// on close. The zero value is a loop that never started.
type bgLoop struct {
	stop context.CancelFunc
	done chan struct{} // closed when the loop ends; nil: no loop
}

// start runs fn in a goroutine under a child of parent; fn must return
// once its context ends.
func (l *bgLoop) start(parent context.Context, fn func(context.Context)) {
	ctx, stop := context.WithCancel(parent)
	l.stop, l.done = stop, make(chan struct{})
	go func() {
		defer close(l.done)
		fn(ctx)
	}()
}

// halt stops the loop and waits for it (idempotent; a no-op if it never
// started).
func (l *bgLoop) halt() {
	if l.done == nil {
		return
	}
	l.stop()
	<-l.done
}

// registerShared registers c with the node's registry; when a registry
// shared by several nodes (tests) has it already, it returns the one
// registered, so this node counts there too. Another failure is logged
// and c is returned unregistered.
func registerShared[C prometheus.Collector](n *Node, c C, what string) C {
	err := n.reg.Register(c)
	if err == nil {
		return c
	}
	if dup, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if prev, ok := dup.ExistingCollector.(C); ok {
			return prev
		}
	}
	n.log.Warn("registering a metric failed", "metric", what, "err", err)
	return c
}
