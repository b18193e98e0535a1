package server

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Connection admission (docs/security.md, "Connections and requests"). A
// listener's connections are bounded in all (MaxConns: past it Accept
// waits, and connections queue in the kernel's backlog) and per remote
// address (MaxConnsPerAddr: past it a new connection is closed at once),
// so one address cannot take every slot. A connection that has carried
// no authenticated request yet (only /health, say, or nothing) is
// "unproven": idle, it is closed after UnprovenIdleTimeout rather than
// the 2 minutes an authenticated client's keep-alive gets, and once more
// than MaxConns − ConnReserve connections are open the oldest idle
// unproven ones are closed to keep that reserve for clients that
// authenticate.
const (
	DefaultMaxConnsPerAddr     = 64
	DefaultUnprovenIdleTimeout = 10 * time.Second
	// DefaultConnReserveDiv: the reserve is MaxConns / 8 by default.
	DefaultConnReserveDiv = 8
	// IdleTimeout is an authenticated connection's keep-alive.
	IdleTimeout = 2 * time.Minute
	// ReadHeaderTimeout bounds a request's line and headers.
	ReadHeaderTimeout = 10 * time.Second
)

// connGate is one listener's admission.
type connGate struct {
	net.Listener
	max, perAddr, reserve int
	unprovenIdle          time.Duration
	// capLoopback: the per-address cap applies to loopback addresses too
	// (off by default: the star's own host, where its tests and local
	// tools run, is not an attacker a cap would stop).
	capLoopback bool
	refused     prometheus.Counter
	evicted     prometheus.Counter

	slots chan struct{} // one per open connection
	done  chan struct{}
	once  sync.Once

	mu     sync.Mutex
	byAddr map[netip.Addr]int
	idle   map[*gatedConn]time.Time // unproven connections now idle, since
}

func newConnGate(ln net.Listener, o Options, refused, evicted prometheus.Counter) *connGate {
	return &connGate{Listener: ln, max: o.MaxConns, perAddr: o.MaxConnsPerAddr, reserve: o.ConnReserve,
		unprovenIdle: o.UnprovenIdleTimeout, capLoopback: o.CapLoopbackConns,
		refused: refused, evicted: evicted,
		slots: make(chan struct{}, o.MaxConns), done: make(chan struct{}),
		byAddr: map[netip.Addr]int{}, idle: map[*gatedConn]time.Time{}}
}

// Accept takes a slot (waiting for one, after closing the oldest idle
// unproven connection if the listener is full), then a connection whose
// address is under its cap.
func (g *connGate) Accept() (net.Conn, error) {
	for {
		select {
		case g.slots <- struct{}{}:
		default:
			g.evictIdle(1)
			select {
			case g.slots <- struct{}{}:
			case <-g.done:
				return nil, net.ErrClosed
			}
		}
		c, err := g.Listener.Accept()
		if err != nil {
			<-g.slots
			return nil, err
		}
		addr := remoteAddr(c)
		g.mu.Lock()
		capped := g.perAddr > 0 && (g.capLoopback || !addr.IsLoopback()) && g.byAddr[addr] >= g.perAddr
		if !capped {
			g.byAddr[addr]++
		}
		g.mu.Unlock()
		if capped {
			<-g.slots
			c.Close()
			g.refused.Inc()
			continue
		}
		if over := len(g.slots) - (g.max - g.reserve); over > 0 {
			g.evictIdle(over)
		}
		return &gatedConn{Conn: c, gate: g, addr: addr}, nil
	}
}

// Close stops Accept waiting for a slot.
func (g *connGate) Close() error {
	g.once.Do(func() { close(g.done) })
	return g.Listener.Close()
}

// evictIdle closes up to n idle unproven connections, the longest idle
// first.
func (g *connGate) evictIdle(n int) {
	g.mu.Lock()
	var victims []*gatedConn
	for range n {
		var oldest *gatedConn
		for c, since := range g.idle {
			if oldest == nil || since.Before(g.idle[oldest]) {
				oldest = c
			}
		}
		if oldest == nil {
			break
		}
		delete(g.idle, oldest)
		victims = append(victims, oldest)
	}
	g.mu.Unlock()
	for _, c := range victims {
		g.evicted.Inc()
		c.Close()
	}
}

// gatedConn is a connection the gate admitted.
type gatedConn struct {
	net.Conn
	gate *connGate
	addr netip.Addr
	// proven: the connection carried an authenticated request.
	proven atomic.Bool

	mu     sync.Mutex
	timer  *time.Timer
	closed bool
}

// Close frees the connection's slot and its address's count once.
func (c *gatedConn) Close() error {
	c.mu.Lock()
	first := !c.closed
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
	}
	c.mu.Unlock()
	if first {
		g := c.gate
		g.mu.Lock()
		delete(g.idle, c)
		if g.byAddr[c.addr]--; g.byAddr[c.addr] <= 0 {
			delete(g.byAddr, c.addr)
		}
		g.mu.Unlock()
		<-g.slots
	}
	return c.Conn.Close()
}

// setIdle follows the connection's HTTP state: an idle unproven
// connection is closed after the gate's unproven idle timeout, and may
// be evicted before that.
func (c *gatedConn) setIdle(idle bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	g := c.gate
	g.mu.Lock()
	delete(g.idle, c)
	if idle && !c.proven.Load() {
		g.idle[c] = time.Now()
	}
	g.mu.Unlock()
	if idle && !c.proven.Load() && g.unprovenIdle > 0 {
		c.timer = time.AfterFunc(g.unprovenIdle, func() { c.Close() })
	}
}

// prove marks the connection as an authenticated client's.
func (c *gatedConn) prove() {
	if c.proven.CompareAndSwap(false, true) {
		c.gate.mu.Lock()
		delete(c.gate.idle, c)
		c.gate.mu.Unlock()
	}
}

// connState is the http.Server's ConnState hook for gated connections.
func connState(c net.Conn, s http.ConnState) {
	gc, ok := c.(*gatedConn)
	if !ok {
		return
	}
	switch s {
	case http.StateIdle:
		gc.setIdle(true)
	case http.StateActive:
		gc.setIdle(false)
	}
}

type connKey struct{}

// connContext is the http.Server's ConnContext hook: a request can name
// the connection it came on (proveConn).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if gc, ok := c.(*gatedConn); ok {
		return context.WithValue(ctx, connKey{}, gc)
	}
	return ctx
}

// proveConn marks r's connection as an authenticated client's.
func proveConn(r *http.Request) {
	if gc, ok := r.Context().Value(connKey{}).(*gatedConn); ok {
		gc.prove()
	}
}

func remoteAddr(c net.Conn) netip.Addr {
	if ap, err := netip.ParseAddrPort(c.RemoteAddr().String()); err == nil {
		return ap.Addr().Unmap()
	}
	return netip.Addr{}
}
