// Package servecmd holds the star binary's server commands: `star serve`
// (production: DynamoDB and S3, every flag with an environment fallback)
// and `star dev` (one embedded star on a data folder).
package servecmd

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"runtime/debug"
	"strconv"
	"syscall"
	"time"

	"github.com/starlog/starlog/shared/tracing"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/kafka"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// runOptions is one run of a star.
type runOptions struct {
	listen string
	// internalListen, when set, is a second listener for peers and
	// operators: forwarding between stars, the settle nudge, drain,
	// handoff and /metrics. The listen address then serves only S2's API
	// and /health (server.Public), and peers are told the internal one.
	internalListen  string
	cfg             node.Config
	deps            node.Deps
	srv             server.Options
	shutdownTimeout time.Duration
	// kafka, when set, serves the Kafka protocol too (kafka.go).
	kafka *kafkaFace
	// tls, when set, serves every listener over TLS (tls.go) and makes
	// the advertised address https.
	tls *tls.Config
	log *slog.Logger
	// ready runs once the star serves, with its address (the dev banner,
	// the default basin).
	ready func(ctx context.Context, n *node.Node, addr net.Addr, tr *tracing.Tracing) error
}

// setPeerCredential makes the star's own calls to peers (the settle
// nudge) carry the internal credential its server's Auth derives.
func (o *runOptions) setPeerCredential() error {
	keys, err := auth.Derive(o.srv.Auth)
	if err != nil {
		return err
	}
	if c := keys.Internal(); c != "" {
		o.deps.PeerHeader = http.Header{auth.HeaderInternal: {c}}
	}
	return nil
}

// advertised is the address peers forward to when --address is not given:
// the listen address, with an unspecified host replaced by loopback (fine
// on one host; a real cluster sets --address).
func advertised(a net.Addr) string {
	ta, ok := a.(*net.TCPAddr)
	if !ok || !ta.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ta.Port))
}

// run serves until SIGINT or SIGTERM, then shuts down gracefully: end
// sessions, release every stream lease once its rows cover it (so
// successors open without a settle), stop accepting, let pending acks
// finish (bounded by the shutdown timeout), close the loglets and mark
// the registry row stopped. A second signal exits at once.
func run(o runOptions) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	// Listen first: a busy port fails before any chain is settled.
	ln, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", o.listen, err)
	}
	var iln net.Listener
	if o.internalListen != "" {
		if iln, err = net.Listen("tcp", o.internalListen); err != nil {
			ln.Close()
			return fmt.Errorf("listen on %s (--internal-listen): %w", o.internalListen, err)
		}
	}
	kln, err := o.kafka.listenOn(o.log)
	if err != nil {
		ln.Close()
		if iln != nil {
			iln.Close()
		}
		return err
	}
	closeListeners := func() {
		ln.Close()
		if iln != nil {
			iln.Close()
		}
		if kln != nil {
			kln.Close()
		}
	}
	o.deps.Logger = o.log
	if o.cfg.Address == "" {
		// Peers reach this star where it serves them.
		if iln != nil {
			o.cfg.Address = advertised(iln.Addr())
		} else {
			o.cfg.Address = advertised(ln.Addr())
		}
	}
	if o.tls != nil {
		o.cfg.Address = httpsAddress(o.cfg.Address)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		lim := o.cfg.MemoryLimit()
		debug.SetMemoryLimit(lim)
		o.log.Info("soft memory limit from the pool and backlog budgets", "mib", lim>>20)
	}
	// Traces go where the OpenTelemetry environment says, if anywhere.
	tr, err := tracing.FromEnv(ctx, "starlog-star")
	if err != nil {
		closeListeners()
		return err
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tr.Shutdown(fctx); err != nil {
			o.log.Warn("tracing: spans not exported at shutdown", "err", err)
		}
	}()
	if tr.On {
		o.srv.Tracer = tr
		o.log.Info("tracing: exporting spans over OTLP (OTEL_* environment)")
	}
	n, err := node.Open(ctx, o.cfg, o.deps)
	if err != nil {
		closeListeners()
		return err
	}
	srv, err := server.New(n, o.srv)
	if err != nil {
		closeListeners()
		n.Close(context.Background())
		return err
	}
	var ks *kafka.Server
	if kln != nil {
		if ks, err = o.kafka.start(n, srv, kln, o.srv, o.tls, o.log); err != nil {
			closeListeners()
			n.Close(context.Background())
			return err
		}
	}
	httpServer := srv.HTTPServer
	if o.tls != nil {
		httpServer = func(addr string) *http.Server { return srv.HTTPSServer(addr, o.tls) }
	}
	hs := httpServer(o.listen)
	servers := []*http.Server{hs}
	serveErr := make(chan error, 2)
	if iln != nil {
		hs.Handler = srv.Public()
		ihs := httpServer(o.internalListen)
		ihs.Handler = srv.Admin() // the profiler is on this listener only
		servers = append(servers, ihs)
		go func() { serveErr <- serve(ihs, srv.Listener(iln), o.tls != nil) }()
	}
	go func() { serveErr <- serve(hs, srv.Listener(ln), o.tls != nil) }()
	if iln != nil {
		o.log.Info("serving", "listen", ln.Addr().String(), "internal", iln.Addr().String(), "address", o.cfg.Address)
	} else {
		o.log.Info("serving", "listen", ln.Addr().String(), "address", o.cfg.Address)
	}
	var readyErr error
	if o.ready != nil {
		if readyErr = o.ready(ctx, n, ln.Addr(), tr); readyErr != nil {
			o.log.Error("startup failed; shutting down", "err", readyErr)
			stop()
		}
	}

	var zombie, stopped error
	pending := len(servers) // Serve calls yet to return
	select {
	case <-ctx.Done():
		o.log.Info("shutting down: draining sessions and pending acks", "timeout", o.shutdownTimeout)
	case stopped = <-serveErr:
		pending--
		o.log.Error("server stopped", "err", stopped)
	case <-n.Zombied():
		// Exit so the supervisor (systemd on an instance) restarts the star
		// as a new incarnation, which settles its chains and serves again.
		zombie = errors.New("this star incarnation was presumed dead or deposed by a successor; exiting to restart as a new incarnation")
		o.log.Error("shutting down: " + zombie.Error())
	}
	stop() // a second signal now kills the process

	sctx, cancel := context.WithTimeout(context.Background(), o.shutdownTimeout)
	defer cancel()
	srv.Drain()
	if ks != nil {
		ks.Close() // its produces in flight are cancelled, as on a broken connection
	}
	// Release the leases while the server still forwards: successors take
	// the streams over without a settle and without waiting for this
	// star's remaining requests (Close releases any stream left).
	if released, failed := n.Leave(sctx); released+failed > 0 {
		o.log.Info("shutdown: released stream leases", "released", released, "failed", failed)
	}
	// The public listener stops first; the internal one keeps serving
	// peers' forwards until the requests already taken have finished.
	for _, h := range servers {
		if err := h.Shutdown(sctx); err != nil {
			o.log.Warn("shutdown: some requests did not finish in time", "err", err)
			h.Close()
		}
	}
	if err := n.Close(sctx); err != nil {
		return fmt.Errorf("close star: %w", err)
	}
	for ; pending > 0; pending-- {
		if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) && stopped == nil {
			stopped = err
		}
	}
	if stopped != nil && !errors.Is(stopped, http.ErrServerClosed) {
		return stopped
	}
	if zombie != nil {
		return zombie
	}
	return readyErr
}
