package kafka

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kmsg"
	"go.opentelemetry.io/otel/trace"

	"github.com/starlog/starlog/star/auth"
)

// Server is the Kafka listener of one star.
type Server struct {
	cfg   Config
	star  Star
	basin string
	log   *slog.Logger

	ctx    context.Context // ends at Close: every request's parent
	cancel context.CancelFunc

	mu     sync.Mutex
	lns    map[net.Listener]struct{}
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup

	basinMu sync.Mutex
	basinOK bool

	topics topicCache // topic rows for the data path (topiccache.go)
	peers  *peers     // the leaders of partitions led elsewhere (nil: not reached)

	groups  *coordinator // consumer groups' membership (groups.go)
	offsets offsetRows   // their committed offsets' rows (grouprow.go)

	pids producerIDs // this star's block of producer ids (producerid.go)
	// pidRecheck is how soon after a read of the producer id counter an
	// id past it is checked against the counter again (producerid.go).
	pidRecheck time.Duration
	fwd        *forwardMetrics // of group requests sent to their coordinator
	tracer     trace.Tracer    // nil: tracing off (tracing.go)
	// requestTimeout is RequestTimeout (tests shorten it).
	requestTimeout time.Duration

	requests  *prometheus.CounterVec
	connGauge prometheus.Gauge
	refused   prometheus.Counter

	// fetchWaiting, when set (tests), runs as a fetch starts to wait for
	// an append.
	fetchWaiting func()
}

// New returns a server and registers its metrics with the star's
// registry. Serve it on one or more listeners.
func New(cfg Config) (*Server, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{cfg: cfg, star: cfg.Star, basin: cfg.Basin, log: cfg.Logger.With("face", "kafka"),
		ctx: ctx, cancel: cancel, lns: map[net.Listener]struct{}{}, conns: map[net.Conn]struct{}{},
		groups: newCoordinator(), pidRecheck: producerIDRecheck, requestTimeout: RequestTimeout}
	s.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "kafka", Name: "requests_total",
		Help: "Kafka requests by API (ApiVersions, Produce, Fetch, …; unknown: a key not served) and result (ok; error: answered with an error code in some part; refused: the connection was closed for it; peer: a group request another star forwarded here, its coordinator).",
	}, []string{"api", "result"})
	s.connGauge = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "starlog", Subsystem: "kafka", Name: "connections",
		Help: "Open Kafka client connections.",
	})
	s.refused = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "starlog", Subsystem: "kafka", Name: "connections_refused_total",
		Help: "Kafka connections closed at once: the listener held MaxConns already.",
	})
	if cfg.Forward != nil {
		s.peers = newPeers(*cfg.Forward, cfg.Basin)
	}
	s.fwd = newForwardMetrics()
	if cfg.Tracer != nil {
		s.tracer = cfg.Tracer.Tracer("github.com/starlog/starlog/star/kafka")
	}
	for _, c := range append([]prometheus.Collector{s.requests, s.connGauge, s.refused}, s.fwd.collectors()...) {
		if err := cfg.Star.Registry().Register(c); err != nil {
			cancel()
			return nil, err
		}
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.groups.run(s.ctx)
	}()
	return s, nil
}

// Basin is the basin the topics live in.
func (s *Server) Basin() string { return s.basin }

// Serve accepts connections on ln until ln or the server is closed; it
// returns net.ErrClosed then.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		ln.Close()
		return net.ErrClosed
	}
	s.lns[ln] = struct{}{}
	s.mu.Unlock()
	var backoff time.Duration
	for {
		c, err := ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// A transient accept failure (out of descriptors): wait,
				// bounded, as net/http does.
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				time.Sleep(backoff)
				continue
			}
			if s.ctx.Err() != nil {
				return net.ErrClosed
			}
			return err
		}
		backoff = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return net.ErrClosed
		}
		if len(s.conns) >= s.cfg.MaxConns {
			s.mu.Unlock()
			c.Close() // over the bound: the client retries elsewhere or later
			s.refused.Inc()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.serveConn(c)
	}
}

// Close stops the listeners, closes every connection (a request in
// flight is cancelled: a produce not yet acknowledged may still become
// durable, as when a client's connection breaks) and waits for the
// connections' goroutines.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for ln := range s.lns {
		ln.Close()
	}
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.cancel()
	s.wg.Wait()
}

// conn is one client connection's state.
type conn struct {
	s      *Server
	c      net.Conn
	client string // the peer's address
	// clientID is the client id of the request being served (a group
	// member's, as DescribeGroups shows it).
	clientID string
	// mechanism is the SASL mechanism the handshake chose ("" before).
	mechanism string
	// principal is who the connection acts for: nil until it has
	// authenticated (the admin from the start on an open star).
	principal *auth.Principal
	// token and checked: the access token and when it was last checked,
	// so a revoked or expired token stops the connection (recheck).
	token   string
	checked time.Time
	// rawSASL: a SaslHandshake v0 made the next frame a bare SASL
	// message.
	rawSASL bool
	// closeAfter closes the connection once the current response is out
	// (a failed authentication).
	closeAfter bool
	// peer: the request came from another star (grouppeer.go), which
	// forwarded it here as to the group's coordinator: it is answered
	// here, never forwarded again.
	peer bool
}

// errClose ends a connection without a response: what a Kafka broker
// does with a request it cannot or will not answer.
var errClose = errors.New("kafka: closing the connection")

func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	s.connGauge.Inc()
	defer func() {
		c.Close()
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		s.connGauge.Dec()
	}()
	cs := &conn{s: s, c: c, client: c.RemoteAddr().String()}
	if s.cfg.Open {
		p := auth.AdminPrincipal()
		cs.principal = &p
	}
	fr := &frameReader{r: bufio.NewReaderSize(c, 64<<10), max: MaxFrameBytes,
		onSize: func() { _ = c.SetReadDeadline(time.Now().Add(s.cfg.IOTimeout)) }}
	var out []byte
	authBy := time.Now().Add(s.cfg.AuthTimeout)
	for {
		next := time.Now().Add(s.cfg.IdleTimeout)
		if cs.principal == nil && authBy.Before(next) {
			next = authBy // authenticate within AuthTimeout, or go
		}
		_ = c.SetReadDeadline(next)
		frame, err := fr.next()
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				s.log.Debug("kafka connection read", "client", cs.client, "err", err)
			}
			return
		}
		if cs.rawSASL {
			if err := cs.rawAuthenticate(frame); err != nil {
				s.log.Debug("kafka connection closed by the star", "client", cs.client, "err", err)
				return
			}
			_ = c.SetWriteDeadline(time.Now().Add(s.cfg.IOTimeout))
			if _, err := c.Write([]byte{0, 0, 0, 0}); err != nil {
				return
			}
			continue
		}
		h, resp, err := cs.handle(frame)
		if err != nil {
			s.log.Debug("kafka connection closed by the star", "client", cs.client, "api", kmsg.NameForKey(h.key), "version", h.version, "err", err)
			return
		}
		if resp == nil {
			continue // Produce with acks=0: no response
		}
		out = appendResponse(out[:0], h.correlation, resp)
		_ = c.SetWriteDeadline(time.Now().Add(s.cfg.IOTimeout))
		if _, err := c.Write(out); err != nil {
			s.log.Debug("kafka connection write", "client", cs.client, "err", err)
			return
		}
		if cs.closeAfter {
			return
		}
		if cap(out) > 1<<20 {
			out = nil // keep no large buffer between requests
		}
	}
}
