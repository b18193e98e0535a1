package node

import (
	"errors"
	"fmt"
	"strings"

	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/loglet"
)

// Degraded names each storage class whose loglet is degraded (its buckets
// refuse or do not answer its writes: loglet.ErrUnavailable) with the
// reason. Appends to such a class answer 503 (waiting ones within the
// recovery deadline, new ones at once) until a flight commits; the other
// class is unaffected. It does no I/O: /health reports it.
func (n *Node) Degraded() map[meta.Class]string {
	var out map[meta.Class]string
	for _, c := range n.commits {
		err := c.src.CommitErr()
		if !errors.Is(err, loglet.ErrUnavailable) {
			continue
		}
		if out == nil {
			out = map[meta.Class]string{}
		}
		out[c.class] = err.Error()
	}
	return out
}

// commitReady is Healthy's judgment of the loglets: a loglet that stopped
// (closed, deposed) makes the star not ready, and so does every class
// being degraded at once (the star can commit nothing). One degraded
// class does not: the star still serves the other, and the class is
// degraded on every star that writes to its buckets, so a load balancer
// (or an autoscaling group replacing unhealthy stars) that drained them
// for it would turn one class's outage into a total one. /health names
// the degraded class instead.
func (n *Node) commitReady() error {
	degraded := map[meta.Class]error{}
	for _, c := range n.commits {
		err := c.src.CommitErr()
		switch {
		case err == nil:
		case errors.Is(err, loglet.ErrUnavailable):
			degraded[c.class] = err
		default:
			return fmt.Errorf("%s loglet cannot commit: %w", c.class, err)
		}
	}
	classes := map[meta.Class]bool{}
	for _, c := range n.commits {
		classes[c.class] = true
	}
	if len(degraded) < len(classes) {
		return nil
	}
	var b strings.Builder
	b.WriteString("every storage class is degraded:")
	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		if err, ok := degraded[class]; ok {
			fmt.Fprintf(&b, " %s: %v;", class, err)
		}
	}
	return errors.New(strings.TrimSuffix(b.String(), ";"))
}
