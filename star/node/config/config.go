// Package config is a star's configuration: what the serve and dev commands
// map their flags onto, its defaults and its validation (star/node opens a
// star from it and names these types as its own).
package config

import (
	"crypto/tls"
	"errors"
	"fmt"
	"time"

	"github.com/aws/smithy-go/middleware"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/leader"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/star/catalog"
	"github.com/starlog/starlog/star/lead"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/ratelimit"
	"github.com/starlog/starlog/star/reader"
)

// Config is everything a star process needs; the serve and dev commands map
// their flags onto it. Zero values take the defaults of Defaults().
type Config struct {
	// StarID names this star in keys and rows (chains/<star>/…). Empty:
	// derived from the hostname (see DefaultStarID).
	StarID string
	// PeerTLS is how the star dials peers that advertise an https address
	// (the settle nudge; nil: the system's roots).
	PeerTLS *tls.Config
	// Address is advertised in the registry row (where peers reach this
	// star); informational until multi-star leases land.
	Address string

	Meta    MetaConfig
	Objects ObjectsConfig

	Standard ClassConfig
	Express  ClassConfig

	// BacklogFlights bounds cut-but-unabsorbed flights per chain
	// (--s3-chain-backlog-flights): how far absorb passes may be spaced,
	// and so a successor's takeover walk. Not memory: the flight index
	// keeps only IndexCacheBytes of their bundles.
	BacklogFlights int
	// BacklogBytes bounds their bytes per chain (--s3-chain-backlog-mib).
	BacklogBytes int64
	// IndexCacheBytes bounds the newest released bundles the flight index
	// keeps in memory per chain (--s3-chain-index-cache-mib); reads of
	// older unabsorbed flights GET their slot objects.
	IndexCacheBytes int64
	// AbsorbWriteBudget is the metastore writes per second the star's
	// absorb passes may average (--absorb-write-budget): passes are spaced
	// by (streams + 3) / budget, at least 100 ms apart, and sooner once a
	// chain's backlog reaches half its budget (docs/write-path.md, "Absorb
	// pace"). Zero takes the default; negative turns the budget off.
	AbsorbWriteBudget float64

	// AdmitTimeout bounds how long a unary append waits for pool budget
	// before failing with a retryable 503 (sessions wait as long as their
	// client does).
	AdmitTimeout time.Duration
	// DeletionPending is how long a deleted stream or basin answers 409
	// *_deletion_pending before it answers 404 (and stops being listed).
	DeletionPending time.Duration
	// BasinCacheTTL bounds how long a star answers from a cached basin row
	// before it reads the row again (DefaultBasinCacheTTL). Writes never
	// judge by the cache (docs/write-path.md, "Catalog invariants").
	BasinCacheTTL time.Duration
	// HeartbeatEvery is the registry heartbeat period.
	HeartbeatEvery time.Duration
	// ReadCacheBytes bounds the read path's footer and extent caches.
	ReadCacheBytes int64
	// ReadBudgetBytes bounds what all catching-up readers' read-ahead
	// holds together (reader.Config.PrefetchBudget; negative turns
	// read-ahead off), ReadWindowBytes one reader's window.
	ReadBudgetBytes int64
	ReadWindowBytes int64
	// Settle is the settlement policy (docs/design.md §10). The loglets stamp
	// their batch markers with Settle.Ripening(class), so the star and the
	// auditor that settles by the same flags agree on when a marker is
	// ripe. Zero fields take settle.DefaultConfig's values.
	Settle settle.Config

	// DeadAfter is how old a star's heartbeat may get before peers presume
	// it dead and take its streams over (docs/design.md §9). Once half of it has
	// passed without a successful heartbeat, a star stops answering from
	// its memory (check-tail, the tail window of reads) and takes no new
	// lease, so it yields before peers take over; appends to the streams
	// it has open go on (the fence keeps them safe, not the clock). Must
	// exceed twice HeartbeatEvery.
	DeadAfter time.Duration
	// LeaseCacheTTL is how long a star trusts what it remembers about
	// another star leading a stream before it re-reads the lease, in the
	// background: it forwards to the leader it knew meanwhile, and for as
	// long as the metastore cannot be read. A failed or refused forward
	// forgets it at once.
	LeaseCacheTTL time.Duration
	// BalanceEvery is the period of the balancer's rounds: a star leading
	// more than its fair share of the streams led by live stars hands the
	// excess to the stars furthest below it (balance.go). Unlike the other
	// fields, zero is not replaced by the default: zero or negative turns
	// the balancer off (Defaults() has it on).
	BalanceEvery time.Duration
	// IdleRelease releases the lease of a stream led here that no request,
	// session or read used for this long (hygiene.go), so the streams a
	// star leads idle are bounded by what clients use. Like BalanceEvery,
	// zero or negative turns it off (Defaults() has it on).
	IdleRelease time.Duration
	// Limits are the per-stream append rate limits (star/ratelimit).
	Limits ratelimit.Limits
	// QuotaPeriod is how often the star exchanges its basins' quota usage
	// rows with the other stars (0: quota.DefaultPeriod).
	QuotaPeriod time.Duration
}

// DefaultIdleRelease is Config.IdleRelease's default.
const DefaultIdleRelease = 10 * time.Minute

// DefaultAbsorbWriteBudget is the default of Config.AbsorbWriteBudget:
// the tens of metastore operations a second per star of docs/design.md §5.
const DefaultAbsorbWriteBudget = 50

// ClassConfig fixes one storage class's chain and loglet.
type ClassConfig struct {
	// Buckets is the bucket set (K = len); W of them must confirm a slot.
	Buckets []string
	W       int
	// MemoryBufferBytes is the pool budget (--s3-memory-buffer-mib,
	// --s3-express-memory-buffer-mib).
	MemoryBufferBytes int64
	// FlushInterval bounds the age of the oldest pooled byte before a cut
	// (--s3-flush-interval, --s3-express-flush-interval).
	FlushInterval time.Duration
	// CutWhenIdle cuts a flight at once whenever none of the chain's is
	// uploading (--s3-cut-when-idle, --s3-express-cut-when-idle): on by
	// default on a directory store, where a PUT has no price.
	CutWhenIdle bool
	// ParallelUploads is the pipeline window: slots claimed ahead of
	// release (--s3-parallel-uploads, --s3-express-parallel-uploads).
	ParallelUploads int
	// TargetFlightBytes cuts a flight before its deadline once reached.
	TargetFlightBytes int64
	// FlightDeadline bounds how long a flight may take to reach W before
	// the epoch halts and recovers.
	FlightDeadline time.Duration
}

// MetaConfig selects the metastore: SQLitePath, or a DynamoDB table.
type MetaConfig struct {
	SQLitePath string

	DynamoTable    string
	DynamoEndpoint string // empty: AWS's regional endpoint
	DynamoRegion   string
	// DynamoCreateTable creates the table if missing (local development
	// against DynamoDB Local or dynalite; production tables come from CDK).
	DynamoCreateTable bool
	AccessKey         string
	SecretKey         string
	// APIOptions are extra SDK middleware on the DynamoDB client (the
	// rehearsal's operation recorder, shared/awsrecord).
	APIOptions []func(*middleware.Stack) error
}

// ObjectsConfig selects the object store: a directory (FSRoot) or S3.
type ObjectsConfig struct {
	FSRoot string

	S3Endpoint  string // empty: AWS
	S3Region    string
	S3PathStyle bool
	AccessKey   string
	SecretKey   string
	// APIOptions are extra SDK middleware on the S3 client (the
	// rehearsal's operation recorder, shared/awsrecord).
	APIOptions []func(*middleware.Stack) error
}

// Defaults returns the built-in defaults (docs/design.md §4.2, §6, §10 and the
// seed's flag defaults). Standard: K=1 W=1; Express: K=3 W=2.
func Defaults() Config {
	return Config{
		Standard: ClassConfig{
			Buckets:           []string{"standard"},
			W:                 1,
			MemoryBufferBytes: 256 << 20,
			FlushInterval:     50 * time.Millisecond,
			ParallelUploads:   16,
			TargetFlightBytes: 4 << 20,
			FlightDeadline:    10 * time.Second,
		},
		Express: ClassConfig{
			Buckets:           []string{"express-a", "express-b", "express-c"},
			W:                 2,
			MemoryBufferBytes: 32 << 20,
			FlushInterval:     5 * time.Millisecond,
			ParallelUploads:   8,
			TargetFlightBytes: 1 << 20,
			FlightDeadline:    5 * time.Second,
		},
		BacklogFlights:    loglet.DefaultBacklogFlights,
		BacklogBytes:      loglet.DefaultBacklogBytes,
		IndexCacheBytes:   loglet.DefaultIndexCacheBytes,
		AbsorbWriteBudget: DefaultAbsorbWriteBudget,
		AdmitTimeout:      5 * time.Second,
		DeletionPending:   30 * time.Second,
		BasinCacheTTL:     catalog.DefaultBasinCacheTTL,
		HeartbeatEvery:    10 * time.Second,
		ReadCacheBytes:    64 << 20,
		ReadBudgetBytes:   reader.DefaultPrefetchBudget,
		ReadWindowBytes:   reader.DefaultPrefetchWindow,
		Settle:            settle.DefaultConfig(),
		DeadAfter:         leader.DefaultDeadAfter,
		LeaseCacheTTL:     time.Second,
		BalanceEvery:      30 * time.Second,
		IdleRelease:       DefaultIdleRelease,
	}
}

// WithDefaults fills zero fields from Defaults().
func (c Config) WithDefaults() Config {
	d := Defaults()
	c.Standard = c.Standard.withDefaults(d.Standard)
	c.Express = c.Express.withDefaults(d.Express)
	if c.BacklogFlights <= 0 {
		c.BacklogFlights = d.BacklogFlights
	}
	if c.BacklogBytes <= 0 {
		c.BacklogBytes = d.BacklogBytes
	}
	if c.IndexCacheBytes == 0 {
		c.IndexCacheBytes = d.IndexCacheBytes
	}
	if c.AbsorbWriteBudget == 0 {
		c.AbsorbWriteBudget = d.AbsorbWriteBudget
	}
	if c.AdmitTimeout <= 0 {
		c.AdmitTimeout = d.AdmitTimeout
	}
	if c.DeletionPending <= 0 {
		c.DeletionPending = d.DeletionPending
	}
	if c.BasinCacheTTL <= 0 {
		c.BasinCacheTTL = d.BasinCacheTTL
	}
	if c.HeartbeatEvery <= 0 {
		c.HeartbeatEvery = d.HeartbeatEvery
	}
	if c.ReadCacheBytes <= 0 {
		c.ReadCacheBytes = d.ReadCacheBytes
	}
	if c.ReadBudgetBytes == 0 {
		c.ReadBudgetBytes = d.ReadBudgetBytes
	}
	if c.ReadWindowBytes <= 0 {
		c.ReadWindowBytes = d.ReadWindowBytes
	}
	c.Settle = c.Settle.WithDefaults()
	c.Limits = c.Limits.WithDefaults()
	if c.DeadAfter <= 0 {
		c.DeadAfter = d.DeadAfter
	}
	if c.LeaseCacheTTL <= 0 {
		c.LeaseCacheTTL = d.LeaseCacheTTL
	}
	return c
}

func (c ClassConfig) withDefaults(d ClassConfig) ClassConfig {
	if len(c.Buckets) == 0 {
		c.Buckets = d.Buckets
	}
	if c.W <= 0 {
		c.W = d.W
	}
	if c.MemoryBufferBytes <= 0 {
		c.MemoryBufferBytes = d.MemoryBufferBytes
	}
	if c.FlushInterval <= 0 {
		c.FlushInterval = d.FlushInterval
	}
	if c.ParallelUploads <= 0 {
		c.ParallelUploads = d.ParallelUploads
	}
	if c.TargetFlightBytes <= 0 {
		c.TargetFlightBytes = d.TargetFlightBytes
	}
	if c.FlightDeadline <= 0 {
		c.FlightDeadline = d.FlightDeadline
	}
	return c
}

// Validate checks what a star cannot open without.
func (c Config) Validate() error {
	var errs []error
	if err := lead.ValidateStarID(c.StarID); err != nil {
		errs = append(errs, err)
	}
	for _, cl := range []struct {
		name string
		cc   ClassConfig
	}{{"standard", c.Standard}, {"express", c.Express}} {
		if k := len(cl.cc.Buckets); cl.cc.W < 1 || cl.cc.W > k {
			errs = append(errs, fmt.Errorf("%s bucket set: need 1 ≤ W ≤ K, have W=%d K=%d", cl.name, cl.cc.W, k))
		}
		seen := map[string]bool{}
		for _, b := range cl.cc.Buckets {
			if seen[b] {
				errs = append(errs, fmt.Errorf("%s bucket set names %q twice", cl.name, b))
			}
			seen[b] = true
		}
	}
	if err := c.Settle.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.DeadAfter <= 2*c.HeartbeatEvery {
		errs = append(errs, fmt.Errorf("dead-after %v must exceed twice the heartbeat period %v", c.DeadAfter, c.HeartbeatEvery))
	}
	return errors.Join(errs...)
}

// Class returns the class's config.
func (c Config) Class(cl meta.Class) ClassConfig {
	if cl == meta.Express {
		return c.Express
	}
	return c.Standard
}

// Ripening is class's marker schedule: the settle policy's, so markers
// ripen by the flags the auditor settles by.
func (c Config) Ripening(class meta.Class) absorb.Ripening {
	return c.Settle.WithDefaults().Ripening(class)
}

// MemoryLimit is the soft limit a star process gives the Go runtime when
// GOMEMLIMIT is not set: per class, the pool budget (admitted, uncut
// bytes), the window of flights uploading (window × target flight) and the
// flight index's bundle cache (released bundles it keeps), plus a quarter:
// together they bound every record the star holds for writing. The backlog
// bounds are not in it: a released flight's bundle leaves memory once the
// index evicts it, so the backlog holds only the index's extent entries
// (docs/write-path.md, "Defaults, and why"). Without the limit the garbage
// collector lets the heap grow to twice what is live; with it the star
// keeps to its budgets under write load (the read cache, ReadCacheBytes,
// and the read-ahead budget, ReadBudgetBytes, come on top when readers are
// cold).
func (c Config) MemoryLimit() int64 {
	c = c.WithDefaults()
	var budgets int64
	for _, cc := range []ClassConfig{c.Standard, c.Express} {
		budgets += cc.MemoryBufferBytes + int64(cc.ParallelUploads)*cc.TargetFlightBytes + max(c.IndexCacheBytes, 0)
	}
	return budgets + budgets/4
}
