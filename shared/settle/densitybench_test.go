package settle_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
	"github.com/starlog/starlog/shared/testsvc"
)

// densityClass is one class's write path as the star runs it by default
// (star/node Defaults: flush interval, target flight, bucket set, pipeline
// window) and the star's absorb pace (star/loglet: passes at least 100 ms
// apart, spaced by the 50 writes/s budget unless the backlog is under
// pressure, at most BacklogFlights/2 slots each).
type densityClass struct {
	class   meta.Class
	buckets []string
	w       int
	window  int
	flush   time.Duration
	target  int64
	// run is the measured phase's length by default: a class's steady
	// state needs at least its age cap (and Standard N = 100 a few trigger
	// crossings, 200 s apart at 4 MiB/s over 100 streams). runDense is
	// N = 10,000's: there every era settles every stream (a revision per
	// stream per era), so a few eras measure it and more take hours.
	run, runDense time.Duration
}

var densityClasses = map[string]densityClass{
	"standard": {meta.Standard, []string{settledB}, 1, 16, 50 * time.Millisecond, 4 << 20, 5 * time.Minute, time.Minute},
	"express":  {meta.Express, zones, 2, 8, 5 * time.Millisecond, 1 << 20, 2 * time.Minute, 15 * time.Second},
}

const (
	densityRate      = 4 << 20 // bytes per second appended
	densityRecord    = 1 << 10 // record body bytes
	densityBacklog   = 12288   // star/loglet DefaultBacklogFlights
	densityBacklogB  = 4 << 30 // and DefaultBacklogBytes
	densityBudget    = 50.0    // star/node DefaultAbsorbWriteBudget
	densityMinPass   = 100 * time.Millisecond
	densityPlanEvery = time.Minute // EventBridge rate of plan and janitor
	// densityGrace replaces the 5 min read grace: at N = 1 a tail is
	// extended every linger round (about every 2 s), and the mem store
	// would hold every superseded revision of up to 256 MiB for the whole
	// grace (some 20 GiB). The requests are the same, only sooner.
	densityGrace = 30 * time.Second
)

// densityPhase names where the auditor's requests are counted.
type densityPhase int

const (
	phSettle  densityPhase = iota // settle jobs (Plan's settle kind, through settle.Do)
	phTrim                        // trim jobs (slot retirement)
	phReclaim                     // the janitor's reclaim pass (superseded settled revisions)
	phPlan                        // Plan itself
	numPhases
)

var phaseNames = [numPhases]string{"settle", "trim", "reclaim", "plan"}

// densityCounts is what the auditor did in one phase.
type densityCounts struct {
	obj  faults.Counters
	meta mfaults.Counts
}

// densitySim is one star's chain of one class under a simulated clock: the
// write path (bundles rendered and committed by the chain writer, absorbed
// by the absorber at the star's pace), plan and janitor every minute, every
// job they plan run at once through settle.Do.
type densitySim struct {
	tb    testing.TB
	dc    densityClass
	meta  *mfaults.Store
	objs  *faults.Store
	st    *settle.Stores
	abs   *absorb.Absorber
	w     *chain.Writer
	epoch uint64
	ch    settle.ChainRef

	now      time.Time
	ids      []string
	seqs     []uint64
	next     int     // round-robin cursor over ids
	carry    float64 // records owed to the next flight
	slot     uint64
	pending  []absorb.Slot
	sizes    []int64 // bundle bytes of each pending slot
	pendingB int64
	lastPass time.Time
	paid     time.Time // the pacer's debt clock
	lastPlan time.Time
	payload  []byte

	counting bool
	appended int64 // record body bytes appended while counting
	counts   [numPhases]densityCounts
	jobs     [numPhases]int
	eras     int
	settled  int // stream windows settled (Report.Settled summed)
	objects  int
}

func newDensitySim(tb testing.TB, dc densityClass, streams int) *densitySim {
	tb.Helper()
	ctx := context.Background()
	m, err := mem.New(append(slices.Clone(zones), settledB)...)
	if err != nil {
		tb.Fatal(err)
	}
	s := &densitySim{tb: tb, dc: dc, meta: mfaults.New(testsvc.SQLite(tb), 1), objs: faults.Wrap(m, faults.WithSeed(1)),
		now: time.UnixMilli(1_700_000_000_000), payload: make([]byte, densityRecord)}
	for i := range s.payload {
		s.payload[i] = byte(i * 31)
	}
	s.st = &settle.Stores{Meta: s.meta, Objects: s.objs, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: s.meta},
		Config: settle.Config{ScratchDir: tb.TempDir(), ReadGrace: densityGrace}, Logger: quietLog(), Now: func() time.Time { return s.now }}
	s.ch = settle.ChainRef{Star: "star1", Class: dc.class}
	c := chain.New("star1", dc.class, chain.Incarnation("star1", 1), s.meta, s.objs)
	rec, err := c.Mint(ctx, meta.EpochParams{Buckets: dc.buckets, W: dc.w, Window: dc.window})
	if err != nil {
		tb.Fatal(err)
	}
	s.epoch = rec.Epoch
	if s.w, err = c.Writer(rec, chain.WriterOptions{}); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.w.Close)
	s.abs = &absorb.Absorber{Star: "star1", Class: dc.class, Meta: s.meta, Rip: s.st.Config.WithDefaults().Ripening(dc.class),
		UpdateEpoch: c.UpdateEpoch, Concurrency: 32, Now: func() time.Time { return s.now }}
	// Stream ids are 32 hex digits, as star/node mints them (the marker's
	// inline stream set and its shards depend on their length).
	var rows []meta.Item
	for i := range streams {
		id := fmt.Sprintf("%032x", i)
		s.ids = append(s.ids, id)
		k := meta.StreamMetaKey(id)
		rows = append(rows, meta.Item{PK: k.PK, SK: k.SK, Val: meta.Encode(meta.StreamMeta{Basin: basin, Name: id, Class: dc.class})})
	}
	for i := 0; i < len(rows); i += 500 {
		if err := s.meta.BatchPut(ctx, rows[i:min(i+500, len(rows))]); err != nil {
			tb.Fatal(err)
		}
	}
	s.seqs = make([]uint64, streams)
	s.lastPlan = s.now
	return s
}

// flight appends one flush interval's records (4 MiB/s of 1 KiB records,
// round-robin over the streams) as one flight: at the star's defaults a
// flight is due one flush interval after the previous cut (pool.CutPolicy)
// and never reaches its target at this rate.
func (s *densitySim) flight(ctx context.Context) {
	s.carry += densityRate * s.dc.flush.Seconds() / densityRecord
	n := int(s.carry)
	s.carry -= float64(n)
	if int64(n)*densityRecord > s.dc.target {
		s.tb.Fatalf("a flight of %d records passes the target flight", n)
	}
	ts := uint64(s.now.UnixMilli())
	var batches []format.Batch
	at := map[int]int{} // stream index → its batch in this flight
	for range n {
		i := s.next
		s.next = (s.next + 1) % len(s.ids)
		b, ok := at[i]
		if !ok {
			b = len(batches)
			at[i] = b
			batches = append(batches, format.Batch{StreamID: s.ids[i]})
		}
		batches[b].Records = append(batches[b].Records, format.Record{SeqNum: s.seqs[i], Timestamp: ts, Body: s.payload})
		s.seqs[i]++
	}
	body, err := s.w.Render(s.slot, batches)
	if err != nil {
		s.tb.Fatal(err)
	}
	if err := s.w.Commit(ctx, s.slot, body); err != nil {
		s.tb.Fatal(err)
	}
	_, f, err := format.DecodeBundle(body)
	if err != nil {
		s.tb.Fatal(err)
	}
	s.pending = append(s.pending, absorb.Slot{Slot: s.slot, Extents: f.Extents})
	s.sizes = append(s.sizes, int64(len(body)))
	s.pendingB += int64(len(body))
	s.slot++
	if s.counting {
		s.appended += int64(n) * densityRecord
	}
}

// absorbDue runs the star's absorb pass when its pace allows (the
// loglet's nextPass): at least 100 ms after the last, and no sooner than
// the budget's debt clock unless the backlog is pressured (half its
// flights or bytes, or a whole pass of slots pending). force absorbs
// everything pending (the end of the writes).
func (s *densitySim) absorbDue(ctx context.Context, force bool) {
	maxSlots := densityBacklog / 2
	for len(s.pending) > 0 {
		pressured := len(s.pending) >= maxSlots || s.pendingB >= densityBacklogB/2
		at := s.lastPass.Add(densityMinPass)
		if !pressured && s.paid.After(at) {
			at = s.paid
		}
		if !force && s.now.Before(at) {
			return
		}
		take := s.pending[:min(maxSlots, len(s.pending))]
		n, err := s.abs.Pass(ctx, s.epoch, take)
		if err != nil {
			s.tb.Fatal(err)
		}
		streams := map[string]bool{}
		for i, sl := range take[:n] {
			for _, x := range sl.Extents {
				streams[x.StreamID] = true
			}
			s.pendingB -= s.sizes[i]
		}
		s.pending, s.sizes = s.pending[n:], s.sizes[n:]
		s.lastPass = s.now
		s.paid = later(s.paid, s.now).Add(time.Duration(passWrites(len(streams))) * time.Duration(float64(time.Second)/densityBudget))
	}
}

// passWrites is star/loglet's charge for a pass: a ref per stream and the
// settle's later delete of it, the marker, its stream shards, the
// checkpoint CAS.
func passWrites(streams int) int {
	ids := streams * (32 + 3)
	shards := 0
	if ids > meta.MarkerInlineBytes {
		shards = (ids + meta.MarkerShardBytes - 1) / meta.MarkerShardBytes
	}
	return 2*streams + 2 + shards
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// tick runs plan and the janitor's reclaim pass when a minute has passed,
// and every job plan found, one after another, counting each phase.
func (s *densitySim) tick(ctx context.Context) {
	if s.now.Sub(s.lastPlan) < densityPlanEvery {
		return
	}
	s.lastPlan = s.now
	var jobs []settle.Job
	s.count(phPlan, func() {
		var err error
		if jobs, err = plan.Plan(ctx, s.st, s.now); err != nil {
			s.tb.Fatal(err)
		}
	})
	for _, j := range jobs {
		switch j.Kind {
		case settle.KindSettle:
			s.count(phSettle, func() {
				rep, ran, err := settle.RunSettle(ctx, s.st, j)
				if err != nil || !ran {
					s.tb.Fatalf("%s: ran %v, %v", j, ran, err)
				}
				if s.counting {
					s.eras++
					s.settled += rep.Settled
					s.objects += rep.Objects
				}
			})
		case settle.KindTrim:
			s.count(phTrim, func() {
				if err := doJob(ctx, s.st, j); err != nil {
					s.tb.Fatal(err)
				}
			})
		}
	}
	s.count(phReclaim, func() {
		if _, err := reclaim.Reclaim(ctx, s.st, s.now); err != nil {
			s.tb.Fatal(err)
		}
	})
}

// count attributes the requests fn makes to phase p (jobs run one at a
// time, so the difference of the counters is theirs).
func (s *densitySim) count(p densityPhase, fn func()) {
	o0, m0 := s.objs.Counters(), s.meta.Counts()
	fn()
	if !s.counting {
		return
	}
	o, m := s.objs.Counters().Sub(o0), s.meta.Counts()
	c := &s.counts[p]
	if c.obj == nil {
		c.obj = faults.Counters{}
	}
	for name, bc := range o {
		acc := c.obj[name]
		for i := range bc {
			acc[i].Requests += bc[i].Requests
			acc[i].Bytes += bc[i].Bytes
			acc[i].Errors += bc[i].Errors
		}
		c.obj[name] = acc
	}
	c.meta.Get += m.Get - m0.Get
	c.meta.Put += m.Put - m0.Put
	c.meta.Delete += m.Delete - m0.Delete
	c.meta.Query += m.Query - m0.Query
	c.meta.Batch += m.Batch - m0.Batch
	c.meta.BatchItems += m.BatchItems - m0.BatchItems
	s.jobs[p]++
}

// write runs the write path for d of simulated time, with plan and the
// janitor on their schedule, then absorbs what is left.
func (s *densitySim) write(ctx context.Context, d time.Duration) {
	end := s.now.Add(d)
	for s.now.Before(end) {
		s.flight(ctx)
		s.absorbDue(ctx, false)
		s.tick(ctx)
		s.now = s.now.Add(s.dc.flush)
	}
	s.absorbDue(ctx, true)
}

// drain lets the clock run with no writes until every marker has ripened
// and resolved and every slot is trimmed past the read grace, and fails
// if that does not happen within the age cap plus the grace plus 10 min.
func (s *densitySim) drain(ctx context.Context) {
	cfg := s.st.Config.WithDefaults()
	limit := s.now.Add(cfg.Timers(s.dc.class).AgeCap + cfg.ReadGrace + 10*time.Minute)
	for ; s.now.Before(limit); s.now = s.now.Add(time.Second) {
		s.tick(ctx)
		if s.now.Equal(s.lastPlan) && s.drained(ctx) {
			return
		}
	}
	s.tb.Fatalf("not drained by %v: %d markers left", limit, s.markers(ctx))
}

func (s *densitySim) markers(ctx context.Context) int {
	pk := meta.ChainPK(s.ch.Star, s.ch.Class)
	pg, err := s.meta.Query(ctx, meta.Query{PK: pk, From: "m#", To: "m#~", Limit: 10})
	if err != nil {
		s.tb.Fatal(err)
	}
	return len(pg.Items)
}

// drained: no marker left, and the epoch trimmed up to its checkpoint.
func (s *densitySim) drained(ctx context.Context) bool {
	if s.markers(ctx) > 0 {
		return false
	}
	k := meta.EpochKey(s.ch.Star, s.ch.Class, s.epoch)
	it, err := s.meta.Get(ctx, k.PK, k.SK)
	if err != nil {
		s.tb.Fatal(err)
	}
	var e meta.Epoch
	if err := meta.Decode(it.Val, &e); err != nil {
		s.tb.Fatal(err)
	}
	return e.Trimmed == e.Checkpoint && e.Checkpoint == s.slot
}

// densityResult is one run's figures per GiB appended.
type densityResult struct {
	class   string
	streams int
	gib     float64
	// ops are the auditor's object requests by billing kind, per phase.
	ops                    [numPhases][numKinds]float64
	meta                   [numPhases]float64 // metastore writes
	usd                    [numPhases]float64 // object requests at list prices
	musd                   [numPhases]float64 // metastore writes at list prices
	eras, settled, objects int
}

// Billing kinds: multipart create, part, copy and complete are billed as
// PUTs; an abort and DeleteObjects as DELETEs (free).
type reqKind int

const (
	kPut reqKind = iota
	kGet
	kHead
	kList
	kDelete
	numKinds
)

var kindNames = [numKinds]string{"PUT", "GET", "HEAD", "LIST", "DELETE"}

func kindOf(op objstore.Op) reqKind {
	switch op {
	case objstore.OpGet:
		return kGet
	case objstore.OpHead:
		return kHead
	case objstore.OpList:
		return kList
	case objstore.OpDelete, objstore.OpDeleteMany, objstore.OpMultipartAbort:
		return kDelete
	}
	return kPut
}

// S3 Express One Zone list prices (us-east-1, the S3 FAQ's worked
// example): PUT $0.00113 and GET $0.00003 per 1,000, DELETE free, plus
// $0.0032 per GB uploaded and $0.0006 per GB retrieved. S3 Standard: PUT,
// COPY, POST, LIST $0.005 and GET, HEAD $0.0004 per 1,000, DELETE free.
func requestUSD(bucket string, class meta.Class, k reqKind, n, bytes float64) float64 {
	express := class == meta.Express && bucket != settledB
	switch {
	case express && (k == kPut || k == kList):
		return n*expPut + bytes/gb*expUpGB
	case express && (k == kGet || k == kHead):
		return n*expGet + bytes/gb*expDownGB
	case k == kPut || k == kList:
		return n * stdPut
	case k == kGet || k == kHead:
		return n * stdGet
	}
	return 0
}

func (s *densitySim) result() densityResult {
	r := densityResult{class: string(s.dc.class), streams: len(s.ids), gib: float64(s.appended) / gb,
		eras: s.eras, settled: s.settled, objects: s.objects}
	for p := range numPhases {
		for name, bc := range s.counts[p].obj {
			for op := range objstore.NumOps {
				k := kindOf(op)
				r.ops[p][k] += float64(bc[op].Requests) / r.gib
				r.usd[p] += requestUSD(name, s.dc.class, k, float64(bc[op].Requests), float64(bc[op].Bytes)) / r.gib
			}
		}
		r.meta[p] = float64(s.counts[p].meta.Writes()) / r.gib
		r.musd[p] = float64(s.counts[p].meta.Writes()) * dynWrite / r.gib
	}
	return r
}

// runDensity is one measured run: a warm-up (so every stream has a
// settled tail, as in steady state), drained; then d of writes at 4 MiB/s
// over streams, drained, with the auditor's requests counted from the
// second phase's first write to its last trim.
func runDensity(tb testing.TB, dc densityClass, streams int, d time.Duration) densityResult {
	ctx := context.Background()
	s := newDensitySim(tb, dc, streams)
	warm := 30 * time.Second
	if dc.class == meta.Express {
		warm = 10 * time.Second
	}
	s.write(ctx, warm)
	s.drain(ctx)
	s.counting = true
	s.write(ctx, d)
	s.drain(ctx)
	return s.result()
}

func envList(name, def string) []string {
	v := os.Getenv(name)
	if v == "" {
		v = def
	}
	return strings.Split(v, ",")
}

// BenchmarkSettleDensity measures the auditor's requests per GiB (settle,
// trim, and the janitor's reclaim of superseded revisions) at 4 MiB/s of
// 1 KiB records spread evenly over N streams of one star, for each class
// at the star's default flush and flight, against the counting wrappers
// over the mem object store and SQLite. `make bench-settle-density`;
// DENSITY_CLASSES, DENSITY_STREAMS and DENSITY_SETTLE_SECONDS (the
// measured phase; default Standard 300 s, Express 120 s, and at N = 10,000
// 60 s and 15 s) narrow it. The ratio to N = 1 needs N = 1 in the run.
func BenchmarkSettleDensity(b *testing.B) {
	if os.Getenv("SETTLE_DENSITY") == "" && os.Getenv("DENSITY_CLASSES") == "" {
		b.Skip("SETTLE_DENSITY=1 (make bench-settle-density): an hour of simulated writes and settles")
	}
	var sec time.Duration
	if v := os.Getenv("DENSITY_SETTLE_SECONDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			b.Fatalf("DENSITY_SETTLE_SECONDS=%q: %v", v, err)
		}
		sec = time.Duration(n) * time.Second
	}
	base := map[string]densityResult{}
	for _, cn := range envList("DENSITY_CLASSES", "standard,express") {
		dc, ok := densityClasses[cn]
		if !ok {
			b.Fatalf("unknown class %q", cn)
		}
		for _, ns := range envList("DENSITY_STREAMS", "1,100,1000,10000") {
			n, err := strconv.Atoi(ns)
			if err != nil {
				b.Fatal(err)
			}
			d := dc.run
			if n >= 10_000 {
				d = dc.runDense
			}
			if sec > 0 {
				d = sec
			}
			b.Run(fmt.Sprintf("%s/streams=%d", cn, n), func(b *testing.B) {
				var r densityResult
				for range b.N {
					t0 := time.Now()
					r = runDensity(b, dc, n, d)
					b.Logf("%s N=%d: %.2f GiB in %v simulated, %v wall", cn, n, r.gib, d, time.Since(t0).Round(time.Second))
				}
				if _, ok := base[cn]; !ok && n == 1 {
					base[cn] = r
				}
				reportDensity(b, r, base[cn])
			})
		}
	}
}

func reportDensity(b *testing.B, r, base densityResult) {
	var tot, totBase, usd, musd float64
	line := fmt.Sprintf("%s N=%d (%d eras, %d stream windows settled, %d objects):", r.class, r.streams, r.eras, r.settled, r.objects)
	for _, p := range []densityPhase{phSettle, phTrim, phReclaim} {
		line += " " + phaseNames[p] + "["
		for k := range numKinds {
			v := r.ops[p][k]
			tot += v
			totBase += base.ops[p][k]
			line += fmt.Sprintf(" %s %.0f", kindNames[k], v)
			b.ReportMetric(v, fmt.Sprintf("%s-%s/GiB", phaseNames[p], strings.ToLower(kindNames[k])))
		}
		line += fmt.Sprintf(" | meta writes %.0f ]", r.meta[p])
		b.ReportMetric(r.meta[p], phaseNames[p]+"-metawrites/GiB")
		usd += r.usd[p]
		musd += r.musd[p]
	}
	b.ReportMetric(tot, "objreq/GiB")
	b.ReportMetric(r.meta[phSettle]+r.meta[phTrim]+r.meta[phReclaim], "metawrites/GiB")
	b.ReportMetric(usd, "usd-obj/GiB")
	b.ReportMetric(musd, "usd-meta/GiB")
	if totBase > 0 {
		b.ReportMetric(tot/totBase, "x-N1")
	}
	ratio := "no N=1 in this run"
	if totBase > 0 {
		ratio = fmt.Sprintf("x%.2f of N=1", tot/totBase)
	}
	b.Logf("%s total objreq/GiB %.0f (%s), $%.5f/GiB objects, $%.5f/GiB metastore writes", line, tot, ratio, usd, musd)
}
