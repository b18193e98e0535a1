package servecmd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	metametrics "github.com/starlog/starlog/shared/meta/metrics"
	"github.com/starlog/starlog/shared/meta/sqlite"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/fs"
	objmetrics "github.com/starlog/starlog/shared/objstore/metrics"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/tracing"
	"github.com/starlog/starlog/star/auditor"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/node"
)

// Dev defaults.
const (
	DefaultDevListen = "127.0.0.1:7480"
	DefaultDevData   = "./data"
	DefaultDevBasin  = "starlog-dev"
	// DefaultAuditorInterval is how often the dev auditor plans.
	DefaultAuditorInterval = 10 * time.Second
)

// Dev is `star dev`: one embedded star on a data folder (SQLite metastore,
// directory object store with one Standard and three Express buckets).
func Dev() *cobra.Command {
	var (
		c        common
		data     string
		basin    string
		interval time.Duration
		stars    int
		open     bool
		internal string
		kf       kafkaFace
		latency  string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run one embedded star on a local data folder",
		Long: `Run one star with everything embedded under --data:

  <data>/meta.db      the metastore (SQLite, WAL)
  <data>/objects/     the object store: buckets standard, express-a,
                      express-b, express-c (one directory each)
  <data>/star-id      this star's id, kept so a restart on the same data
                      settles what the previous run left

It also serves the Kafka protocol on --kafka-listen (127.0.0.1:9092 when
that port is free): topics are streams of --kafka-basin (docs/kafka.md).

On first start it creates the basin --basin (streams are created on first
append or read). Stop it with Ctrl-C (or kill -9) and start it again on the
same data: every acknowledged record reads back at its seq num.

The auditor runs in the same process every --auditor-interval (plan and
janitor, then settle, trim-check and chain-settle jobs from an in-memory
queue), so records settle into per-stream objects and retired slots are
deleted by the --settle-* and --read-grace policy, as on AWS.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := c.logger()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(data, 0o755); err != nil {
				return fmt.Errorf("--data %s: %w", data, err)
			}
			authCfg := auth.Open()
			if open {
				log.Warn("AUTHENTICATION IS OFF (--open): anyone who reaches " + c.listen + " can read, write and delete everything")
			} else if authCfg, err = devCredentials(data); err != nil {
				return err
			}
			if stars > 1 {
				if internal != "" {
					return errors.New("--internal-listen runs one star")
				}
				if open {
					return errors.New("--open runs one star: a cluster's stars always authenticate")
				}
				if latency != "" {
					return errors.New("--dev-express-latency runs one star")
				}
				kf.optional = !cmd.Flags().Changed("kafka-listen")
				return runCluster(cmd.OutOrStdout(), log, cmd.Flags(), data, c.listen, basin, stars, authCfg, &kf)
			}
			cfg := c.nodeConfig()
			if cfg.StarID == "" {
				if cfg.StarID, err = devStarID(data); err != nil {
					return err
				}
			}
			if interval < 0 {
				return fmt.Errorf("--auditor-interval %v: must be 0 (off) or positive", interval)
			}
			// The star and the auditor share the metastore and object
			// store handles; the star does not close handles it is given.
			ms, objs, err := openDevStores(context.Background(), data, cfg)
			if err != nil {
				return err
			}
			lat, err := parseDevLatency(latency)
			if err != nil {
				ms.Close()
				return err
			}
			closer, _ := objs.(io.Closer) // the journaled store; the latency wrapper is none
			objs = withDevLatency(objs, cfg.Express.Buckets, lat)
			defer ms.Close()
			if closer != nil {
				defer closer.Close() // materializes the journal
			}
			var audit auditorHandle
			defer audit.wait() // before the metastore closes
			out := cmd.OutOrStdout()
			kf.optional = !cmd.Flags().Changed("kafka-listen")
			o := runOptions{
				listen: c.listen, internalListen: internal, cfg: cfg, log: log, shutdownTimeout: c.shutdownTimeout,
				deps:  node.Deps{Meta: ms, Objects: objs},
				srv:   c.serverOptions(authCfg),
				kafka: &kf,
				ready: func(ctx context.Context, n *node.Node, addr net.Addr, tr *tracing.Tracing) error {
					if st, ok := closer.(*fs.Store); ok {
						if err := registerJournalMetrics(n.Registry(), st); err != nil {
							return err
						}
					}
					if basin != "" {
						if err := ensureDevBasin(ctx, n, basin); err != nil {
							return err
						}
					}
					if interval > 0 {
						st, err := devAuditStores(n, ms, objs, cfg, data)
						if err != nil {
							return err
						}
						ao := auditor.Options{Interval: interval, Registerer: n.Registry()}
						if tr.On { // the in-process auditor's spans go where the star's do
							ao.Tracer = tr
						}
						if err := audit.start(ctx, st, ao); err != nil {
							return err
						}
					}
					printBanner(out, n, addr, data, basin, authCfg, c.durableConfig(), kf.banner(authCfg.Open))
					return nil
				},
			}
			if err := o.setPeerCredential(); err != nil {
				return err
			}
			return run(o)
		},
	}
	fs := cmd.Flags()
	fs.SortFlags = false
	fs.StringVar(&data, "data", DefaultDevData, "folder holding the metastore and the object store")
	fs.StringVar(&basin, "basin", DefaultDevBasin, "basin to create on first start, with streams created on append and read (empty: none)")
	fs.DurationVar(&interval, "auditor-interval", DefaultAuditorInterval, "run the in-process auditor's plan and janitor this often (0: no auditor)")
	fs.BoolVar(&open, "open", false, "run without authentication (every request acts as the admin): local experiments only")
	fs.IntVar(&stars, "stars", 1, "run this many star processes on consecutive ports from --listen's, sharing the data folder's stores (a local cluster; no in-process auditor)")
	fs.StringVar(&internal, "internal-listen", "", "address to serve operators on (/metrics, the /v1/starlog/ endpoints and the Go profiler under /debug/pprof/); when set, --listen serves only the S2 API and /health (one star only)")
	fs.StringVar(&latency, "dev-express-latency", "", "P50,P99 (for example 5ms,20ms): add a log-normal latency with these percentiles to every request on the Express buckets, as on S3 Express (benchmarks only; one star)")
	c.register(fs, DefaultDevListen)
	kf.register(fs, DefaultDevKafkaListen)
	diskFlushDefaults(fs, true) // the directory store: no per-request price
	return withEnv(cmd)
}

// devStarID reads the star id kept in the data folder, or keeps the
// hostname-derived one there on first start.
func devStarID(data string) (string, error) {
	p := filepath.Join(data, "star-id")
	b, err := os.ReadFile(p)
	if err == nil {
		id := strings.TrimSpace(string(b))
		if err := node.ValidateStarID(id); err != nil {
			return "", fmt.Errorf("%s: %w", p, err)
		}
		return id, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", p, err)
	}
	id := node.DefaultStarID()
	if err := os.WriteFile(p, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", p, err)
	}
	return id, nil
}

// ensureDevBasin creates the dev basin if it does not exist; an existing
// one is left as the user configured it.
func ensureDevBasin(ctx context.Context, n *node.Node, name string) error {
	_, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: name, Config: &api.BasinConfig{
		CreateStreamOnAppend: true, CreateStreamOnRead: true,
	}}, "")
	var e *api.Error
	if errors.As(err, &e) && e.Status == 409 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("create basin %s: %w", name, err)
	}
	return nil
}

// devCredentials are the dev star's admin token and internal key: kept in
// <data>/dev-token and <data>/dev-internal-key (generated on first start,
// so a restart keeps them), unless STARLOG_ADMIN_TOKEN or
// STARLOG_INTERNAL_KEY set them.
func devCredentials(data string) (auth.Config, error) {
	tok, err := devSecret(filepath.Join(data, "dev-token"), EnvAdminToken, "stl_dev_")
	if err != nil {
		return auth.Config{}, err
	}
	key, err := devSecret(filepath.Join(data, "dev-internal-key"), EnvInternalKey, "")
	if err != nil {
		return auth.Config{}, err
	}
	cfg := auth.Config{AdminToken: tok, InternalKey: []byte(key)}
	if _, err := auth.Derive(cfg); err != nil {
		return auth.Config{}, err
	}
	return cfg, nil
}

// devSecret returns env's value if set, else the secret kept in path,
// else a new random one written there (mode 0600).
func devSecret(path, env, prefix string) (string, error) {
	if v := strings.TrimSpace(os.Getenv(env)); v != "" {
		return v, nil
	}
	b, err := os.ReadFile(path)
	if err == nil {
		if v := strings.TrimSpace(string(b)); v != "" {
			return v, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	r := make([]byte, 32)
	if _, err := rand.Read(r); err != nil {
		return "", err
	}
	v := prefix + hex.EncodeToString(r)
	if err := os.WriteFile(path, []byte(v+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return v, nil
}

func printBanner(w io.Writer, n *node.Node, addr net.Addr, data, basin string, authCfg auth.Config, ds *durable.Config, kafkaLine string) {
	url := "http://" + addr.String()
	fmt.Fprintf(w, "\nstarlog dev: star %s (incarnation %d) serving the S2 API on %s\n", n.StarID(), n.Incarnation(), url)
	fmt.Fprintf(w, "  data:    %s (SQLite metastore; object store with buckets standard, express-a, express-b, express-c)\n", data)
	tok, bearer := authCfg.AdminToken, ""
	if authCfg.Open {
		tok = "unused"
		fmt.Fprintf(w, "  WARNING: authentication is OFF (--open): any client can do anything\n")
	} else {
		fmt.Fprintf(w, "  token:   %s (admin, full scope; kept in %s)\n", tok, filepath.Join(data, "dev-token"))
		bearer = " -H \"authorization: Bearer $S2_ACCESS_TOKEN\""
	}
	if basin == "" {
		fmt.Fprintf(w, "\nCreate a basin first: curl -X POST%s -H 'content-type: application/json' %s/v1/basins -d '{\"basin\":\"my-basin-1\"}'\n\n", bearer, url)
		return
	}
	fmt.Fprintf(w, "  basin:   %s (creates streams on first append or read)\n", basin)
	fmt.Fprintf(w, "  metrics: %s/metrics   health: %s/health\n", url, url)
	if ds != nil {
		fmt.Fprintf(w, "  durable streams: %s%s/<stream> (basin %s; docs/durable-streams.md)\n", url, ds.Prefix, ds.Basin)
	}
	if kafkaLine != "" {
		fmt.Fprintf(w, "  kafka:   %s\n", kafkaLine)
	}
	fmt.Fprintf(w, "\nTry it:\n")
	fmt.Fprintf(w, "  export S2_ACCOUNT_ENDPOINT=%s S2_BASIN_ENDPOINT=%s S2_ACCESS_TOKEN=%s\n", url, url, tok)
	fmt.Fprintf(w, "  curl -s -X POST%s -H 's2-basin: %s' -H 'content-type: application/json' \\\n", bearer, basin)
	fmt.Fprintf(w, "    -d '{\"records\":[{\"body\":\"hello\"}]}' %s/v1/streams/hello/records\n", url)
	fmt.Fprintf(w, "  curl -s%s -H 's2-basin: %s' '%s/v1/streams/hello/records?seq_num=0'\n", bearer, basin, url)
	fmt.Fprintf(w, "\nS2 SDKs and the star CLI read S2_ACCOUNT_ENDPOINT, S2_BASIN_ENDPOINT and S2_ACCESS_TOKEN.\n\n")
}

// registerJournalMetrics exports the dev store journal's counters: group
// syncs against the records they carried say how well concurrent PUTs
// (and a flight's copies) share an fdatasync, and the missed copy waits
// how often a group gave up on a flight's copies.
func registerJournalMetrics(reg prometheus.Registerer, st *fs.Store) error {
	for _, m := range []struct {
		name, help string
		pick       func(fs.JournalStats) uint64
	}{
		{"starlog_fs_journal_syncs_total", "Data syncs of the directory store's journal (one per group of PUTs).", func(j fs.JournalStats) uint64 { return j.Syncs }},
		{"starlog_fs_journal_records_total", "Create-once PUTs the directory store's journal made durable.", func(j fs.JournalStats) uint64 { return j.Records }},
		{"starlog_fs_journal_segments_retired_total", "Journal segments materialized into files and removed.", func(j fs.JournalStats) uint64 { return j.Retired }},
		{"starlog_fs_journal_copy_waits_missed_total", "Journal groups that stopped waiting for a flight's other copies when the wait's bound passed.", func(j fs.JournalStats) uint64 { return j.CopyWaitsMissed }},
	} {
		c := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: m.name, Help: m.help}, func() float64 {
			return float64(m.pick(st.JournalStats()))
		})
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("journal metrics: %w", err)
		}
	}
	return nil
}

// openDevStores opens the data folder's metastore and object store, with
// every bucket of both sets created.
func openDevStores(ctx context.Context, data string, cfg node.Config) (meta.Store, objstore.Store, error) {
	ms, err := sqlite.Open(ctx, filepath.Join(data, "meta.db"))
	if err != nil {
		return nil, nil, fmt.Errorf("metastore: %w", err)
	}
	// One star writes the folder: its small PUTs go through the store's
	// journal (a cluster's stars share theirs without one).
	objs, err := fs.Open(filepath.Join(data, "objects"), fs.Options{Journal: true})
	if err != nil {
		ms.Close()
		if errors.Is(err, fs.ErrLocked) {
			return nil, nil, fmt.Errorf("object store: %w (is a star dev running on %s? stop it first)", err, data)
		}
		return nil, nil, fmt.Errorf("object store: %w", err)
	}
	for _, b := range append(slices.Clone(cfg.Standard.Buckets), cfg.Express.Buckets...) {
		if err := objs.CreateBucket(b); err != nil {
			objs.Close()
			ms.Close()
			return nil, nil, fmt.Errorf("object store: %w", err)
		}
	}
	return ms, objs, nil
}

// devAuditStores are the auditor's stores in dev: the star's, its
// settlement policy, scratch under the data folder, metrics beside the
// star's on /metrics: its metastore writes in the star's count of writes,
// by pass and job (starlog_meta_writes_total's writer), and its object
// requests as auditor_starlog_objstore_* (apart from the star's).
func devAuditStores(n *node.Node, ms meta.Store, objs objstore.Store, cfg node.Config, data string) (*settle.Stores, error) {
	sc := cfg.Settle
	sc.ScratchDir = filepath.Join(data, "scratch")
	sc.DeadAfter = cfg.DeadAfter
	ms, err := metametrics.WrapWrites(ms, n.Registry(), meta.WriterAuditor)
	if err != nil {
		return nil, err
	}
	counted, err := objmetrics.Wrap(objs, prometheus.WrapRegistererWithPrefix("auditor_", n.Registry()))
	if err != nil {
		return nil, err
	}
	objs = counted
	return &settle.Stores{
		Meta: ms, Objects: objs,
		SettledBucket: cfg.Standard.Buckets[0],
		Streams:       settle.MetaStreams{Meta: ms},
		Config:        sc,
		Metrics:       settle.NewMetrics(n.Registry()),
		Logger:        n.Logger(),
	}, nil
}

// auditorHandle runs the dev auditor beside the star and waits for it.
type auditorHandle struct{ done chan struct{} }

// start runs the auditor until ctx (the star's run) ends.
func (a *auditorHandle) start(ctx context.Context, st *settle.Stores, o auditor.Options) error {
	if err := os.MkdirAll(st.Config.ScratchDir, 0o755); err != nil {
		return fmt.Errorf("auditor scratch: %w", err)
	}
	r, err := auditor.New(st, o)
	if err != nil {
		return err
	}
	a.done = make(chan struct{})
	go func() {
		defer close(a.done)
		r.Run(ctx)
	}()
	return nil
}

// wait returns once a started auditor has stopped.
func (a *auditorHandle) wait() {
	if a.done != nil {
		<-a.done
	}
}
