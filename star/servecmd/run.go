// Package servecmd holds the star binary's server commands: `star serve`
// (production: DynamoDB and S3, every flag with an environment fallback)
// and `star dev` (one embedded star on a data folder).
package servecmd

import (
	"context"
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

	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/server"
)

// runOptions is one run of a star.
type runOptions struct {
	listen          string
	cfg             node.Config
	deps            node.Deps
	srv             server.Options
	shutdownTimeout time.Duration
	log             *slog.Logger
	// ready runs once the star serves, with its address (the dev banner,
	// the default basin).
	ready func(ctx context.Context, n *node.Node, addr net.Addr) error
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
	o.deps.Logger = o.log
	if o.cfg.Address == "" {
		o.cfg.Address = advertised(ln.Addr())
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		lim := o.cfg.MemoryLimit()
		debug.SetMemoryLimit(lim)
		o.log.Info("soft memory limit from the pool and backlog budgets", "mib", lim>>20)
	}
	n, err := node.Open(ctx, o.cfg, o.deps)
	if err != nil {
		ln.Close()
		return err
	}
	srv, err := server.New(n, o.srv)
	if err != nil {
		ln.Close()
		n.Close(context.Background())
		return err
	}
	hs := srv.HTTPServer(o.listen)
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()
	o.log.Info("serving", "listen", ln.Addr().String())
	var readyErr error
	if o.ready != nil {
		if readyErr = o.ready(ctx, n, ln.Addr()); readyErr != nil {
			o.log.Error("startup failed; shutting down", "err", readyErr)
			stop()
		}
	}

	var zombie error
	select {
	case <-ctx.Done():
		o.log.Info("shutting down: draining sessions and pending acks", "timeout", o.shutdownTimeout)
	case err := <-serveErr:
		o.log.Error("server stopped", "err", err)
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
	// Release the leases while the server still forwards: successors take
	// the streams over without a settle and without waiting for this
	// star's remaining requests (Close releases any stream left).
	if released, failed := n.Leave(sctx); released+failed > 0 {
		o.log.Info("shutdown: released stream leases", "released", released, "failed", failed)
	}
	if err := hs.Shutdown(sctx); err != nil {
		o.log.Warn("shutdown: some requests did not finish in time", "err", err)
		hs.Close()
	}
	if err := n.Close(sctx); err != nil {
		return fmt.Errorf("close star: %w", err)
	}
	if err := <-serveErr; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	if zombie != nil {
		return zombie
	}
	return readyErr
}
