// Command auditorproc runs the auditor (plan, janitor, then settle,
// trim-check and chain-settle jobs) as its own process on a SQLite
// metastore and an object folder, the way the Lambda functions run beside
// the stars in production. The rolling-upgrade test (TestRollingUpgrade)
// builds it from each version's tree, so the old auditor is the old
// version's code and the new one this version's; it answers GET /health on
// --listen once it runs, and stops on SIGTERM.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/meta/sqlite"
	"github.com/starlog/starlog/shared/objstore/fs"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/star/auditor"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "auditorproc:", err)
		os.Exit(1)
	}
}

func run() error {
	metaPath := flag.String("sqlite", "", "the SQLite metastore file the stars share")
	root := flag.String("fs-root", "", "the object folder the stars share")
	bucket := flag.String("settled-bucket", "standard", "the bucket settled objects go to")
	scratch := flag.String("scratch", "", "a scratch folder for the settle jobs")
	listen := flag.String("listen", "127.0.0.1:0", "where GET /health answers")
	every := flag.Duration("interval", time.Second, "how often the plan and the janitor run")
	linger := flag.Duration("linger", time.Second, "settle linger (both classes)")
	ageCap := flag.Duration("age-cap", 2*time.Second, "settle age cap (both classes)")
	readGrace := flag.Duration("read-grace", 2*time.Second, "how long a retired object stays readable")
	deadAfter := flag.Duration("dead-after", 2*time.Second, "the stars' --dead-after (the janitor presumes stars dead by it)")
	flag.Parse()
	if *metaPath == "" || *root == "" || *scratch == "" {
		return errors.New("--sqlite, --fs-root and --scratch are required")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	ms, err := sqlite.Open(ctx, *metaPath)
	if err != nil {
		return fmt.Errorf("metastore: %w", err)
	}
	defer ms.Close()
	objs, err := fs.New(*root)
	if err != nil {
		return fmt.Errorf("object store: %w", err)
	}
	if err := os.MkdirAll(*scratch, 0o755); err != nil {
		return err
	}
	cfg := settle.Config{
		Standard:   settle.ClassTimers{Linger: *linger, AgeCap: *ageCap},
		Express:    settle.ClassTimers{Linger: *linger, AgeCap: *ageCap},
		ReadGrace:  *readGrace,
		DeadAfter:  *deadAfter,
		ScratchDir: *scratch,
	}.WithDefaults()
	st := &settle.Stores{
		Meta: ms, Objects: objs, SettledBucket: *bucket,
		Streams: settle.MetaStreams{Meta: ms}, Config: cfg,
		Metrics: settle.NewMetrics(prometheus.NewRegistry()),
		Logger:  slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	r, err := auditor.New(st, auditor.Options{Interval: *every})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) }),
		ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	fmt.Printf("auditor running every %v on %s\n", *every, *root)
	if err := r.Run(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}
