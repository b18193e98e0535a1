// Package reader is the star's read path (docs/design.md §8): it serves a stream's
// records from the metastore's rows (span refs into transit bundles, catalog
// rows into settled objects) and then from the leader's in-memory tail
// window, contiguously from the start seq, within count, bytes and time
// limits.
//
// A Read walks: a floor lookup for the start seq, then rows forward in
// ascending key order (one page query per few rows), each row read from
// object storage through a bounded cache, then the tail window. Rows that
// leave a hole below the stream's greatest row are an error, never a skip.
//
// A Cursor (Open) is one read in progress over a led stream: its start
// placed by S2's rules (ResolveStart), its limits, catch-up batches through
// the rows and a read-ahead, then the follow of the tail window, woken by
// each release, with heartbeats and the long-poll wait. It sees the stream
// only through Led, which star/node's led slot implements.
package reader

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
)

// ErrGap reports that the stream's records are missing between rows (or
// between the rows and the tail window): a read never skips them.
var ErrGap = errors.New("reader: records missing between rows")

// ErrCorruptRow reports a row whose value breaks the row schema (no
// location, an empty extent, slot refs that do not tile it).
var ErrCorruptRow = errors.New("reader: malformed ref row")

// Stream names the stream read. Basin is part of settled objects' keys.
type Stream struct {
	ID    string
	Basin string
}

// StartKind says how a Start's value is read.
type StartKind uint8

const (
	// FromSeq starts at a seq num.
	FromSeq StartKind = iota
	// FromTimestamp starts at the first record with timestamp ≥ the value.
	FromTimestamp
	// FromTailOffset starts the value's records before the tail, saturating
	// at 0.
	FromTailOffset
)

// Start is where a read begins.
type Start struct {
	Kind  StartKind
	Value uint64
}

// AtSeq, AtTimestamp and AtTailOffset build a Start.
func AtSeq(seq uint64) Start      { return Start{Kind: FromSeq, Value: seq} }
func AtTimestamp(ts uint64) Start { return Start{Kind: FromTimestamp, Value: ts} }
func AtTailOffset(n uint64) Start { return Start{Kind: FromTailOffset, Value: n} }
func (s Start) String() string    { return fmt.Sprintf("%s %d", s.Kind, s.Value) }
func (k StartKind) String() string {
	return [...]string{"seq", "timestamp", "tail offset", "?"}[min(k, 3)]
}

// Limits bound one Read. Count and Bytes (metered, format.Record.MeteredSize)
// are upper bounds: a read stops before exceeding either. Zero means "no
// limit of the caller's"; the Reader's batch caps (Config.MaxBatchCount,
// MaxBatchBytes) bound every Read regardless, so a session reads in batches.
// A caller wanting "zero records" does not call Read. Until is an exclusive
// timestamp bound.
//
// TrimPoint and NotBefore are the stream's retained range as the leader
// knows it before the auditor reclaims anything (docs/design.md §11): a
// read skips the records below TrimPoint (acknowledged trims) and those
// whose timestamp is below NotBefore (unix ms: past the retention age), as
// it skips records the auditor already removed.
type Limits struct {
	Count     int
	Bytes     int
	Until     *uint64
	TrimPoint uint64
	NotBefore uint64
}

// TailWindow is the leader's index of released, not yet absorbed flights
// (*loglet.Index satisfies it): Read returns, in seq order, the stream's
// extents in those flights that hold seqs ≥ from, until they hold max such
// records, and the first seq it holds for the stream; ok is false when it
// holds none. Every flight it names is released, so durable at W of K.
type TailWindow interface {
	Read(streamID string, from uint64, max int) (xs []TailExtent, first uint64, ok bool)
}

// TailExtent is one stream's extent in one released flight of the tail
// window. While the leader still holds the flight's bundle in memory,
// Records are the extent's records from the read's start on. Once the
// leader evicted the bundle (its flight index keeps only the most recent
// bundles) Records is nil and the reader reads the extent from the
// flight's slot object in the epoch's bucket set, exactly as it reads an
// absorbed span ref's extent: a copy that decodes to the extent's seqs,
// the buckets tried in turn.
type TailExtent struct {
	Records []format.Record
	// Span names the flight's epoch (Star, Class, Epoch; no Slots), Slot
	// the extent in its slot object, Buckets the epoch's bucket set (nil:
	// read from the epoch record). Set when Records is nil.
	Span    *meta.Span
	Slot    meta.SlotRef
	Buckets []string
}

// Tail is the tail window of a stream this star leads: the flight index and
// the stream's durable tail (one past its last released seq) when the read
// began. A star that does not lead the stream passes nil to Read.
type Tail struct {
	Window TailWindow
	End    uint64
}

// Stop says why a Read returned.
type Stop uint8

const (
	// StopCount: the caller's count limit is met.
	StopCount Stop = iota + 1
	// StopBytes: the next record would exceed the caller's bytes limit.
	StopBytes
	// StopUntil: the next record's timestamp is at or past Until.
	StopUntil
	// StopBatch: the Reader's batch cap is met; more records may follow.
	StopBatch
	// StopCaughtUp: every released record from the start was returned (the
	// read reached the tail; a session waits for the next release).
	StopCaughtUp
	// StopFrontier: the rows ran out and there is no tail window (this
	// star does not lead the stream): records past Next, if any, are with
	// the leader, which the caller forwards to.
	StopFrontier
)

func (s Stop) String() string {
	switch s {
	case StopCount:
		return "count"
	case StopBytes:
		return "bytes"
	case StopUntil:
		return "until"
	case StopBatch:
		return "batch"
	case StopCaughtUp:
		return "caught-up"
	case StopFrontier:
		return "frontier"
	}
	return "none"
}

// Result is one Read's outcome.
type Result struct {
	// Records are contiguous from Start. They are shared with the cache and
	// other readers: read-only.
	Records []format.Record
	// Start is the seq the read began at: the resolved start (a timestamp or
	// tail offset made a seq), moved up past records a trim or retention
	// already removed. Records[0].SeqNum when Records is not empty.
	Start uint64
	// Next is the seq a following read continues from.
	Next uint64
	// Bytes is the metered size of Records.
	Bytes int
	Stop  Stop
}

// Config configures a Reader. Zero values take the defaults named.
type Config struct {
	Meta    meta.Store
	Objects objstore.Store
	// SettledBucket is the standard bucket every settled object lives in.
	SettledBucket string
	// CacheBytes bounds the footer, extent and settled-chunk caches
	// together (default 64 MiB).
	CacheBytes int64
	// EpochCacheEntries bounds the cached epoch bucket sets (default 4096).
	// Epoch params never change once minted, so entries never go stale.
	EpochCacheEntries int
	// MaxBatchCount and MaxBatchBytes cap every Read (defaults 1000 records
	// and 1 MiB metered, S2's batch caps).
	MaxBatchCount int
	MaxBatchBytes int
	// RowPage is how many rows one forward metastore query fetches
	// (default 32): low-volume streams have many small rows.
	RowPage int
	// SettledChunkBytes is the unit a settled object is read and cached in
	// (default 1 MiB): the blocks starting in one aligned window of the
	// object, so every reader asks for (and caches) the same ranges.
	SettledChunkBytes int64
	// FooterSuffixBytes is how many trailing bytes of a settled object the
	// first footer GET asks for (default 16 KiB); a larger footer costs one
	// more GET.
	FooterSuffixBytes int64
	// BucketAttemptTimeout bounds one extent GET from one bucket of a set
	// while another bucket is left to ask (default 2 s): a black-holed
	// zone must not hold a read for the client's whole timeout.
	BucketAttemptTimeout time.Duration
	// HedgeAfter is how long an extent GET may go unanswered before the
	// next bucket of the set is asked too (default 250 ms).
	HedgeAfter time.Duration
	// SuspectFor is how long a bucket that failed, timed out or was
	// outpaced by a hedge is asked last (default 10 s).
	SuspectFor time.Duration
	// PrefetchBudget bounds the bytes all readers' read-ahead windows hold
	// together: GETs in flight and data fetched ahead (default 256 MiB;
	// negative: no read-ahead).
	PrefetchBudget int64
	// PrefetchWindow caps one reader's window (default 32 MiB), which
	// starts at PrefetchMinWindow (default 2 MiB) and doubles per batch
	// while the reader catches up.
	PrefetchWindow    int64
	PrefetchMinWindow int64
	// PrefetchGets caps one reader's GETs in flight ahead (default 32).
	PrefetchGets int
	// Registerer registers the reader's metrics (nil: none).
	Registerer prometheus.Registerer
	// Logger (nil: slog.Default()).
	Logger *slog.Logger
}

// Reader serves reads. Safe for concurrent use; one per process.
type Reader struct {
	cfg     Config
	log     *slog.Logger
	m       *metrics
	epochs  *loader[[]string]
	footers *loader[*format.SettledFooter]
	extents *loader[[]format.Record]
	chunks  *loader[[]format.Record]
	health  *bucketHealth
	budget  *budget // nil: no read-ahead
}

// New returns a Reader over cfg's stores.
func New(cfg Config) (*Reader, error) {
	if cfg.Meta == nil || cfg.Objects == nil {
		return nil, errors.New("reader: Meta and Objects are required")
	}
	if cfg.SettledBucket == "" {
		return nil, errors.New("reader: SettledBucket is required")
	}
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def64 := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	def64(&cfg.CacheBytes, 64<<20)
	def(&cfg.EpochCacheEntries, 4096)
	def(&cfg.MaxBatchCount, 1000)
	def(&cfg.MaxBatchBytes, 1<<20)
	def(&cfg.RowPage, 32)
	def64(&cfg.SettledChunkBytes, 1<<20)
	def64(&cfg.FooterSuffixBytes, 16<<10)
	if cfg.PrefetchBudget == 0 {
		cfg.PrefetchBudget = DefaultPrefetchBudget
	}
	def64(&cfg.PrefetchWindow, DefaultPrefetchWindow)
	def64(&cfg.PrefetchMinWindow, DefaultPrefetchMinWindow)
	cfg.PrefetchMinWindow = min(cfg.PrefetchMinWindow, cfg.PrefetchWindow)
	def(&cfg.PrefetchGets, DefaultPrefetchGets)
	for _, d := range []struct {
		v   *time.Duration
		def time.Duration
	}{{&cfg.BucketAttemptTimeout, DefaultBucketAttemptTimeout}, {&cfg.HedgeAfter, DefaultHedgeAfter}, {&cfg.SuspectFor, DefaultSuspectFor}} {
		if *d.v <= 0 {
			*d.v = d.def
		}
	}
	if cfg.FooterSuffixBytes < format.SettledTrailerSize {
		cfg.FooterSuffixBytes = format.SettledTrailerSize
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	m := newMetrics(cfg.Registerer)
	// Footers are small and save a request per cold read of an object, so
	// they get their own eighth of the budget rather than competing with
	// megabyte extents.
	footerBytes := max(cfg.CacheBytes/8, 1)
	dataBytes := max(cfg.CacheBytes-footerBytes, 1)
	var b *budget
	if cfg.PrefetchBudget > 0 {
		b = &budget{capacity: cfg.PrefetchBudget, m: m}
	}
	return &Reader{
		budget:  b,
		cfg:     cfg,
		log:     log,
		m:       m,
		epochs:  newLoader[[]string](int64(cfg.EpochCacheEntries), kindEpoch, m),
		footers: newLoader[*format.SettledFooter](footerBytes, kindFooter, m),
		extents: newLoader[[]format.Record](dataBytes/2, kindExtent, m),
		chunks:  newLoader[[]format.Record](dataBytes-dataBytes/2, kindSettled, m),
		health:  newBucketHealth(),
	}, nil
}

// Read returns records of stream from start, within lim, contiguous from
// Result.Start. It walks the stream's rows (span refs and catalog rows)
// and then, when tail is not nil, the tail window.
//
// A tail-offset start is resolved here: against tail.End when tail is
// given, else against the ref-covered frontier (the greatest row's end; a
// star that does not lead the stream should resolve against the leader's
// tail and pass a seq instead). A timestamp start scans the rows forward
// from the stream's first row, one page query per RowPage rows, comparing
// each row's time bounds (cost: linear in the rows below the target, which
// settling keeps few: catalog rows cover up to 256 MiB each), then reads
// the first row whose max timestamp reaches it, skipping earlier records.
//
// A start past the available records returns no records with StopCaughtUp
// (or StopFrontier without a tail window); answering 416 is the caller's.
func (r *Reader) Read(ctx context.Context, stream Stream, start Start, lim Limits, tail *Tail) (Result, error) {
	return r.read(ctx, stream, start, lim, tail, nil)
}

func (r *Reader) read(ctx context.Context, stream Stream, start Start, lim Limits, tail *Tail, pf *Prefetch) (Result, error) {
	t0 := time.Now()
	defer func() { r.m.readLatency.Observe(time.Since(t0).Seconds()) }()
	if stream.ID == "" {
		return Result{}, errors.New("reader: empty stream id")
	}
	w := newWalk(r, stream, lim, tail, pf)
	if pf != nil {
		// Reads of one Prefetch are sequential: the cursor is the walk's
		// for its run.
		w.rows = pf.walkRows
		defer func() { pf.walkRows = w.rows }()
	}
	ctx, sp := startRead(ctx, stream, start) // nil unless traced
	res, err := w.run(ctx, start)
	endRead(sp, res, err)
	if err != nil {
		return Result{}, fmt.Errorf("reader: read stream %s from %s: %w", stream.ID, start, err)
	}
	return res, nil
}
