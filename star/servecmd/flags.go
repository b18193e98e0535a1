package servecmd

import (
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable"
	"github.com/starlog/starlog/star/node"
	"github.com/starlog/starlog/star/ratelimit"
	"github.com/starlog/starlog/star/server"
)

// EnvPrefix prefixes every flag's environment fallback: --s3-region is
// STARLOG_S3_REGION.
const EnvPrefix = "STARLOG_"

// EnvName is the environment variable that backs a flag.
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// annotateEnv appends the environment fallback to every flag's usage, so
// --help shows it beside the default.
func annotateEnv(fs *pflag.FlagSet) {
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Name == "help" {
			return
		}
		f.Usage += " [env " + EnvName(f.Name) + "]"
	})
}

// applyEnv sets every flag not given on the command line from its
// environment variable, if that is set. A value that does not parse is an
// error naming the variable.
func applyEnv(fs *pflag.FlagSet) error {
	var errs []string
	fs.VisitAll(func(f *pflag.Flag) {
		if f.Changed || f.Name == "help" {
			return
		}
		v, ok := os.LookupEnv(EnvName(f.Name))
		if !ok {
			return
		}
		if err := fs.Set(f.Name, v); err != nil {
			errs = append(errs, fmt.Sprintf("%s=%q: %v", EnvName(f.Name), v, err))
		}
	})
	if len(errs) > 0 {
		return fmt.Errorf("environment: %s", strings.Join(errs, "; "))
	}
	return nil
}

// common are the flags of both serve and dev.
type common struct {
	listen          string
	starID          string
	address         string
	logLevel        string
	logFormat       string
	shutdownTimeout time.Duration

	standardBuckets []string
	standardW       int
	expressBuckets  []string
	expressW        int

	memMiB, expMemMiB         int
	flush, expFlush           time.Duration
	whenIdle, expWhenIdle     bool
	uploads, expUploads       int
	flightKiB, expFlightKiB   int
	deadline, expDeadline     time.Duration
	linger, expLinger         time.Duration
	ageCap, expAgeCap         time.Duration
	gather, expGather         time.Duration
	backlogFlights            int
	backlogMiB                int
	indexCacheMiB             int
	absorbBudget              float64
	settleTriggerMiB          int
	settleOutputCapMiB        int
	readGrace                 time.Duration
	admitTimeout, delPending  time.Duration
	basinCacheTTL             time.Duration
	readCacheMiB              int
	readBudgetMiB             int
	readWindowMiB             int
	heartbeatMin, heartbeatMx time.Duration
	registryBeat, deadAfter   time.Duration
	balanceEvery              time.Duration
	idleRelease               time.Duration

	maxConns                         int
	maxConnsPerAddr                  int
	connReserve                      int
	unprovenIdle                     time.Duration
	bodyReadTimeout, requestTimeout  time.Duration
	frameTimeout, sessionWriteTimout time.Duration

	// rate limits (ratelimit.Limits, server.ClientRate)
	streamMiBPerSec, streamBatchesPerSec float64
	sessionThrottle                      time.Duration
	clientPerSec                         float64
	clientBurst                          int
	durablePrefix, durableBasin          string
	durableClass                         string
	durableLongPoll                      time.Duration
	durableLoopbackHooks                 bool
	durableAudit                         time.Duration
	durableKeyRotation                   time.Duration

	location string // server.Options.Location
}

func (c *common) register(fs *pflag.FlagSet, defListen string) {
	d := node.Defaults()
	fs.StringVar(&c.listen, "listen", defListen, "address to serve the API on (HTTP/1.1 and h2c on one port)")
	fs.StringVar(&c.starID, "star-id", "", "this star's id in keys and rows (default: derived from the hostname)")
	fs.StringVar(&c.address, "address", "", "address peers forward requests to, recorded in its registry row (default: the listen address)")
	fs.StringVar(&c.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.StringVar(&c.logFormat, "log-format", "text", "log format: text or json")
	fs.DurationVar(&c.shutdownTimeout, "shutdown-timeout", 15*time.Second, "on SIGINT/SIGTERM, how long pending acks may take before the star stops anyway")

	fs.StringSliceVar(&c.standardBuckets, "standard-buckets", d.Standard.Buckets, "the Standard chain's bucket set (K = count); the first also holds settled objects")
	fs.IntVar(&c.standardW, "standard-w", d.Standard.W, "Standard copies that must confirm a slot (W ≤ K)")
	fs.StringSliceVar(&c.expressBuckets, "express-buckets", d.Express.Buckets, "the Express chain's bucket set, one directory bucket per zone (K = count)")
	fs.IntVar(&c.expressW, "express-w", d.Express.W, "Express copies that must confirm a slot (W ≤ K)")

	fs.IntVar(&c.memMiB, "s3-memory-buffer-mib", int(d.Standard.MemoryBufferBytes>>20), "Standard pool budget: admitted, uncut bytes before appends block")
	fs.IntVar(&c.expMemMiB, "s3-express-memory-buffer-mib", int(d.Express.MemoryBufferBytes>>20), "Express pool budget")
	fs.DurationVar(&c.flush, "s3-flush-interval", d.Standard.FlushInterval, "Standard: at most one flight below the target size per interval, and no pooled byte waits longer; a batch after an idle interval is cut at once. On S3 the default trades ack latency for PUT cost; on a directory store (--fs-root, star dev) it is "+DiskFlushInterval.String()+": a PUT there has no price")
	fs.DurationVar(&c.expFlush, "s3-express-flush-interval", d.Express.FlushInterval, "Express: as --s3-flush-interval, for the Express chain (default "+DiskFlushInterval.String()+" on a directory store)")
	fs.BoolVar(&c.whenIdle, "s3-cut-when-idle", d.Standard.CutWhenIdle, "Standard: cut a flight at once whenever none of the chain's is uploading, so an append after an ack never waits out the flush interval (appends that arrive during an upload still group). Off on S3, where it would cut a PUT per round trip past the interval's bound on the bill; on by default on a directory store (--fs-root, star dev)")
	fs.BoolVar(&c.expWhenIdle, "s3-express-cut-when-idle", d.Express.CutWhenIdle, "Express: as --s3-cut-when-idle, for the Express chain (on by default on a directory store)")
	fs.IntVar(&c.uploads, "s3-parallel-uploads", d.Standard.ParallelUploads, "Standard pipeline window: slots uploading ahead of release")
	fs.IntVar(&c.expUploads, "s3-express-parallel-uploads", d.Express.ParallelUploads, "Express pipeline window")
	fs.IntVar(&c.flightKiB, "s3-target-flight-kib", int(d.Standard.TargetFlightBytes>>10), "Standard: cut a flight early once it reaches this size")
	fs.IntVar(&c.expFlightKiB, "s3-express-target-flight-kib", int(d.Express.TargetFlightBytes>>10), "Express: cut a flight early once it reaches this size")
	fs.DurationVar(&c.deadline, "s3-flight-deadline", d.Standard.FlightDeadline, "Standard: a flight not at W by then halts the epoch (it recovers into the next)")
	fs.DurationVar(&c.expDeadline, "s3-express-flight-deadline", d.Express.FlightDeadline, "Express: flight deadline")
	fs.IntVar(&c.backlogFlights, "s3-chain-backlog-flights", d.BacklogFlights, "flights a chain may hold cut but unabsorbed (released, or at most the window uploading) before publishing blocks: absorb passes run early once half are taken, so it bounds how far the write budget may space them (streams per pass / budget) and a successor's takeover walk; not memory (see --s3-chain-index-cache-mib)")
	fs.IntVar(&c.backlogMiB, "s3-chain-backlog-mib", int(d.BacklogBytes>>20), "the same bound in bytes of rendered flights, per chain (in object storage: the flight index keeps only --s3-chain-index-cache-mib of them in memory)")
	fs.IntVar(&c.indexCacheMiB, "s3-chain-index-cache-mib", int(d.IndexCacheBytes>>20), "per chain, the newest released-but-unabsorbed bundles the flight index keeps in memory for tail reads; reads of older ones GET their slot objects (0 keeps none)")
	fs.Float64Var(&c.absorbBudget, "absorb-write-budget", d.AbsorbWriteBudget, "metastore writes per second the star's absorb passes may average (one span ref per stream per pass): passes are spaced to stay within it, at least 100 ms apart, and sooner when a chain's backlog reaches half its budget (0 turns the budget off)")
	sd := d.Settle
	fs.IntVar(&c.settleTriggerMiB, "settle-trigger-mib", int(sd.Trigger>>20), "un-settled bytes per stream that ripen its batches at the linger")
	fs.DurationVar(&c.linger, "settle-linger", sd.Standard.Linger, "Standard: a batch past the size trigger ripens this long after its birth (plus jitter)")
	fs.DurationVar(&c.expLinger, "settle-express-linger", sd.Express.Linger, "Express: settle linger")
	fs.DurationVar(&c.ageCap, "settle-age-cap", sd.Standard.AgeCap, "Standard: every batch ripens at most this long after its birth")
	fs.DurationVar(&c.expAgeCap, "settle-express-age-cap", sd.Express.AgeCap, "Express: settle age cap")
	fs.DurationVar(&c.gather, "settle-gather", sd.Standard.Gather, "Standard: an era behind a ripe marker also settles the age-cap markers that ripen within this long (so at many streams a stream settles about once per gather, not once per absorb pass); 0 is two thirds of the age cap (10m at the default cap), negative turns it off")
	fs.DurationVar(&c.expGather, "settle-express-gather", sd.Express.Gather, "Express: settle gather (0: two thirds of the age cap, 80s at the default)")
	fs.IntVar(&c.settleOutputCapMiB, "settle-output-cap-mib", int(sd.OutputCap>>20), "a settled object grows by settles up to this size, then the next one starts")
	fs.DurationVar(&c.readGrace, "read-grace", sd.ReadGrace, "settled slots stay readable this long before the auditor deletes them")
	fs.DurationVar(&c.admitTimeout, "admit-timeout", d.AdmitTimeout, "how long a unary append waits for pool budget before a retryable 503")
	fs.DurationVar(&c.delPending, "deletion-pending", d.DeletionPending, "how long a deleted stream or basin answers 409 before 404; every star re-checks the rows of the streams it leads a third of this apart")
	fs.DurationVar(&c.basinCacheTTL, "basin-cache-ttl", d.BasinCacheTTL, "how long a star trusts its cached basin row before it reads it again (a stream row naming another basin id is always judged on a fresh read)")
	fs.IntVar(&c.readCacheMiB, "read-cache-mib", int(d.ReadCacheBytes>>20), "read path cache of footers and extents")
	fs.IntVar(&c.readBudgetMiB, "read-budget-mib", int(d.ReadBudgetBytes>>20), "bytes all catching-up readers may hold fetched ahead (GETs in flight and data not yet served), shared evenly among them (0 turns read-ahead off)")
	fs.IntVar(&c.readWindowMiB, "read-window-mib", int(d.ReadWindowBytes>>20), "most one catching-up reader fetches ahead")
	fs.DurationVar(&c.heartbeatMin, "session-heartbeat-min", 5*time.Second, "idle read sessions get a heartbeat every random min..max")
	fs.DurationVar(&c.heartbeatMx, "session-heartbeat-max", 15*time.Second, "see --session-heartbeat-min")
	fs.DurationVar(&c.registryBeat, "registry-heartbeat", d.HeartbeatEvery, "how often the star renews its registry row")
	fs.DurationVar(&c.deadAfter, "dead-after", d.DeadAfter, "a star whose registry heartbeat is this old is presumed dead and its streams are taken over (> 2× --registry-heartbeat); a star whose own heartbeat is half this old stops answering check-tails and tail reads from memory, but keeps acknowledging appends (the chain's fence, not the clock, keeps those safe)")
	fs.DurationVar(&c.idleRelease, "idle-release", d.IdleRelease, "release the lease of a stream no request, session or read used for this long (the next request re-acquires it; 0 turns it off)")
	fs.IntVar(&c.maxConns, "max-connections", server.DefaultMaxConns, "connections served at once per listener; more wait in the accept backlog")
	fs.IntVar(&c.maxConnsPerAddr, "max-connections-per-address", server.DefaultMaxConnsPerAddr, "connections one remote address may hold on a listener; past it a new one is closed at once (loopback addresses are not capped)")
	fs.IntVar(&c.connReserve, "connection-reserve", 0, "connection slots kept for clients that authenticate: past --max-connections minus this, the longest idle connections that carried no authenticated request are closed (0: an eighth of --max-connections)")
	fs.DurationVar(&c.unprovenIdle, "unauthenticated-idle-timeout", server.DefaultUnprovenIdleTimeout, "an idle connection that has carried no authenticated request (only /health, say) is closed after this; an authenticated client's keep-alive lasts 2 min")
	fs.DurationVar(&c.bodyReadTimeout, "body-read-timeout", server.DefaultBodyReadTimeout, "a unary request's body must arrive within this (408 timeout)")
	fs.DurationVar(&c.requestTimeout, "request-timeout", server.DefaultRequestTimeout, "a unary request's whole life, its response written (a read's wait comes on top)")
	fs.DurationVar(&c.frameTimeout, "frame-timeout", server.DefaultFrameTimeout, "an S2S frame must complete within this of its header (the session ends with 408)")
	fs.DurationVar(&c.sessionWriteTimout, "session-write-timeout", server.DefaultSessionWriteTimeout, "a session's client must take each frame or event within this, or it is cut off")
	fs.Float64Var(&c.streamMiBPerSec, "append-stream-mib-per-sec", ratelimit.DefaultStreamBytesPerSec/(1<<20), "per-stream append throughput limit in MiB/s of metered bytes, all clients together (S2's limit; 0 turns it off): past it a unary append is 429 rate_limited, a session is throttled")
	fs.Float64Var(&c.streamBatchesPerSec, "append-stream-batches-per-sec", 0, fmt.Sprintf("append batches per second one client connection may send to one stream; 0 (the default) turns it off. S2 sets %d to share a multi-tenant service: set it on a star many tenants share", ratelimit.S2BatchesPerSec))
	fs.DurationVar(&c.sessionThrottle, "append-session-throttle", ratelimit.DefaultSessionThrottle, "longest an append-session input waits for the rate limits before the session ends with 429 rate_limited")
	fs.Float64Var(&c.clientPerSec, "client-rate-per-sec", 0, "requests per second each client (access token; the admin token and open stars by IP address) may make on S2's API; 0 (the default) turns the limit off")
	fs.IntVar(&c.clientBurst, "client-rate-burst", 0, "requests a client may make at once under --client-rate-per-sec (0: one second's worth)")
	fs.StringVar(&c.durablePrefix, "durable-prefix", durable.DefaultPrefix, "path prefix of the Durable Streams protocol on the API port (empty: not served)")
	fs.StringVar(&c.durableBasin, "durable-basin", durable.DefaultBasin, "basin holding the Durable Streams streams (created on first use)")
	fs.StringVar(&c.durableClass, "durable-storage-class", string(durable.DefaultStorageClass), "default storage class of the Durable Streams basin when the star creates it: express or standard")
	fs.DurationVar(&c.durableLongPoll, "durable-long-poll", durable.DefaultLongPoll, "how long a Durable Streams long-poll waits for data before 204")
	fs.DurationVar(&c.durableAudit, "durable-subscription-audit", durable.DefaultSubscriptionAudit, "how often each star re-reads every Durable Streams subscription row and audits the subscriptions it owns (finds what no append reported; a subscription created on another star is seen by this star within it)")
	fs.BoolVar(&c.durableLoopbackHooks, "durable-webhook-loopback", false, "let Durable Streams subscriptions name webhooks on loopback (http://127.0.0.1/…, http://localhost/…), for development and tests; off, only https to public addresses")
	fs.DurationVar(&c.durableKeyRotation, "durable-key-rotation", durable.DefaultKeyRotation, "how often the stars add a new Durable Streams subscription key (webhook signatures, wake tokens): the key is in the JWK Set at once and signs "+
		shortDuration(durable.KeyPublishLead)+" later; the key it replaces stays published, and its wake tokens valid, "+shortDuration(durable.KeyRetain)+
		" more (0: never; at least "+shortDuration(durable.MinKeyRotation)+"; star durable rotate-keys rotates at once)")
	fs.StringVar(&c.location, "location", server.DefaultLocation, "the deployment's location (S2's region, e.g. aws:us-east-1): what /v1/locations and basin info answer")
	fs.DurationVar(&c.balanceEvery, "balance-every", d.BalanceEvery, "how often the star compares the streams it leads with the fair share across live stars and hands the excess to the least-loaded ones (0 turns the balancer off)")
}

// shortDuration writes whole minutes and hours without their zero
// remainders: 10m, 1h, 720h.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// DiskFlushInterval is both classes' flush interval on a directory store:
// a PUT there costs a few fsyncs and no money, so the interval only has to
// keep flights from being cut faster than the disk takes them (the window
// bounds the rest). On S3 the interval is what bounds the request bill, and
// the node's defaults stay. With the cut-when-idle rule on (the directory
// store's default) the interval only groups appends that arrive while a
// flight uploads: an append that finds the chain idle is cut at once.
const DiskFlushInterval = time.Millisecond

// DiskBacklogFlights is a chain's backlog in flights on a directory store.
// Cut when idle, a flight there carries one producer's append or a few
// (2 MiB/s of 16 KiB appends is 128 flights a second, where S3's 50 ms
// interval cuts 20), so the S3 default of 12,288 put the backlog at half
// (an early absorb pass) every 48 s, and a star at 10,000 streams wrote a
// span ref per append, 162 writes a second against its budget of 50. At
// this bound the passes may be spaced 512 s at that rate, past the 400 s
// the budget asks at 10,000 streams. Its flights are small: the flight
// index's entries for 131,072 flights of one stream are about 15 MiB.
const DiskBacklogFlights = 131072

// diskFlushDefaults makes the flush intervals default to DiskFlushInterval,
// the cut-when-idle rule to on, and the backlog to DiskBacklogFlights
// where the flags were not given (on the command line or by environment).
// withDefault also shows it in --help.
func diskFlushDefaults(fs *pflag.FlagSet, withDefault bool) {
	for name, v := range map[string]string{
		"s3-flush-interval": DiskFlushInterval.String(), "s3-express-flush-interval": DiskFlushInterval.String(),
		"s3-cut-when-idle": "true", "s3-express-cut-when-idle": "true",
		"s3-chain-backlog-flights": strconv.Itoa(DiskBacklogFlights),
	} {
		f := fs.Lookup(name)
		if f == nil || f.Changed {
			continue
		}
		if err := f.Value.Set(v); err != nil {
			panic(err) // a constant that does not parse as its own flag's type
		}
		if withDefault {
			f.DefValue = v
		}
	}
}

// nodeConfig maps the flags onto a node config.
func (c *common) nodeConfig() node.Config {
	cfg := node.Defaults()
	cfg.StarID, cfg.Address = c.starID, c.address
	cfg.Standard.Buckets, cfg.Standard.W = c.standardBuckets, c.standardW
	cfg.Express.Buckets, cfg.Express.W = c.expressBuckets, c.expressW
	cfg.Standard.MemoryBufferBytes = int64(c.memMiB) << 20
	cfg.Express.MemoryBufferBytes = int64(c.expMemMiB) << 20
	cfg.Standard.FlushInterval, cfg.Express.FlushInterval = c.flush, c.expFlush
	cfg.Standard.CutWhenIdle, cfg.Express.CutWhenIdle = c.whenIdle, c.expWhenIdle
	cfg.Standard.ParallelUploads, cfg.Express.ParallelUploads = c.uploads, c.expUploads
	cfg.Standard.TargetFlightBytes = int64(c.flightKiB) << 10
	cfg.Express.TargetFlightBytes = int64(c.expFlightKiB) << 10
	cfg.Standard.FlightDeadline, cfg.Express.FlightDeadline = c.deadline, c.expDeadline
	cfg.BacklogFlights = c.backlogFlights
	cfg.BacklogBytes = int64(c.backlogMiB) << 20
	cfg.IndexCacheBytes = int64(c.indexCacheMiB) << 20
	if c.indexCacheMiB <= 0 {
		cfg.IndexCacheBytes = -1 // none (the config fills 0 with the default)
	}
	cfg.AbsorbWriteBudget = c.absorbBudget
	if c.absorbBudget <= 0 {
		cfg.AbsorbWriteBudget = -1 // off (the config fills 0 with the default)
	}
	cfg.Settle = c.settleConfig()
	cfg.AdmitTimeout, cfg.DeletionPending, cfg.BasinCacheTTL = c.admitTimeout, c.delPending, c.basinCacheTTL
	cfg.ReadCacheBytes = int64(c.readCacheMiB) << 20
	cfg.ReadBudgetBytes = int64(c.readBudgetMiB) << 20
	if c.readBudgetMiB <= 0 {
		cfg.ReadBudgetBytes = -1
	}
	cfg.ReadWindowBytes = int64(c.readWindowMiB) << 20
	cfg.HeartbeatEvery, cfg.DeadAfter = c.registryBeat, c.deadAfter
	cfg.BalanceEvery = c.balanceEvery
	cfg.IdleRelease = c.idleRelease
	cfg.Limits = ratelimit.Limits{
		StreamBytesPerSec:   offIfZero(c.streamMiBPerSec * (1 << 20)),
		StreamBatchesPerSec: offIfZero(c.streamBatchesPerSec),
		SessionThrottle:     c.sessionThrottle,
	}
	return cfg
}

// offIfZero maps a flag's 0 ("off") onto a negative rate (ratelimit.Limits
// fills zero with the default).
func offIfZero(v float64) float64 {
	if v <= 0 {
		return -1
	}
	return v
}

// serverOptions maps the flags onto the HTTP server's options.
func (c *common) serverOptions(ac auth.Config) server.Options {
	return server.Options{
		Auth:         ac,
		HeartbeatMin: c.heartbeatMin, HeartbeatMax: c.heartbeatMx,
		MaxConns: c.maxConns, MaxConnsPerAddr: c.maxConnsPerAddr,
		ConnReserve: c.connReserve, UnprovenIdleTimeout: c.unprovenIdle,
		BodyReadTimeout: c.bodyReadTimeout, RequestTimeout: c.requestTimeout,
		FrameTimeout: c.frameTimeout, SessionWriteTimeout: c.sessionWriteTimout,
		ClientRate: server.ClientRate{PerSec: c.clientPerSec, Burst: c.clientBurst},
		Durable:    c.durableConfig(),
		Location:   c.location,
	}
}

// durableConfig is the Durable Streams face's config, nil when off.
func (c *common) durableConfig() *durable.Config {
	if c.durablePrefix == "" {
		return nil
	}
	rotation := c.durableKeyRotation
	if rotation <= 0 {
		rotation = -1 // never (the config fills 0 with the default)
	}
	return &durable.Config{Prefix: c.durablePrefix, Basin: c.durableBasin, LongPoll: c.durableLongPoll,
		StorageClass: api.StorageClass(c.durableClass), AllowLoopbackWebhooks: c.durableLoopbackHooks,
		KeyRotation: rotation, SubscriptionAudit: c.durableAudit}
}

// settleConfig maps the --settle-* and --read-grace flags onto the
// settlement policy: the star's loglets ripen markers by it and the dev
// auditor settles and trims by it. Zero values take the defaults.
func (c *common) settleConfig() settle.Config {
	cfg := node.Defaults().Settle
	cfg.Trigger = uint64(c.settleTriggerMiB) << 20
	cfg.Standard = settle.ClassTimers{Linger: c.linger, AgeCap: c.ageCap, Gather: c.gather}
	cfg.Express = settle.ClassTimers{Linger: c.expLinger, AgeCap: c.expAgeCap, Gather: c.expGather}
	cfg.OutputCap = uint64(c.settleOutputCapMiB) << 20
	cfg.ReadGrace = c.readGrace
	return cfg
}

// logger builds the process logger from --log-level and --log-format.
func (c *common) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(c.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: %w", c.logLevel, err)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch c.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", c.logFormat)
}

// withEnv wires the environment fallback into a command: usage strings
// name the variables, and PreRunE applies them.
func withEnv(cmd *cobra.Command) *cobra.Command {
	annotateEnv(cmd.Flags())
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error { return applyEnv(cmd.Flags()) }
	return cmd
}
