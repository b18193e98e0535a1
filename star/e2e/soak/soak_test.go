package soak

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/sqlite"
	"github.com/starlog/starlog/shared/objstore/fs"
	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auditor"
	"github.com/starlog/starlog/star/e2e/verify"
)

// The short run is the default (make test); make soak passes longer
// figures.
var (
	flagDuration  = flag.Duration("soak.duration", 40*time.Second, "how long the writers write (a drain follows)")
	flagSample    = flag.Duration("soak.sample", 3*time.Second, "measure the stores and read every stream back this often")
	flagStars     = flag.Int("soak.stars", 3, "star serve processes sharing one SQLite metastore and one object directory")
	flagKills     = flag.Int("soak.kills", 1, "kill -9 + restart of a random star, spread over the run")
	flagDeletes   = flag.Int("soak.deletes", 1, "delete + re-create (same name) of stream phoenix, spread over the run")
	flagTrimEvery = flag.Duration("soak.trim-every", 10*time.Second, "stream trim appends a trim command record this often")
	flagRetention = flag.Duration("soak.retention", 20*time.Second, "retention age of the hot streams and phoenix (slow: half, idle: a quarter)")
	flagHotKiB    = flag.Int("soak.hot-kib", 32, "KiB per second written to hot-std (hot-exp: half)")
	flagDrain     = flag.Duration("soak.drain", 45*time.Second, "after the writers stop, wait at most this long for deleted streams to be reclaimed")
	flagOut       = flag.String("soak.out", "", "folder for soak.csv, soak-totals.csv and soak.png (default: the work folder)")
	flagSeed      = flag.Uint64("soak.seed", 0, "random seed (0: from the clock)")
	flagKeep      = flag.Bool("soak.keep", false, "keep the stars' data and logs even when the run passes")
)

// The compressed timers: the stars' and the auditor's.
const (
	basin        = "starlog-soak"
	outputCapMiB = 1
	outputCap    = outputCapMiB << 20
	readGrace    = 2 * time.Second
	auditEvery   = time.Second
	deadAfter    = 2 * time.Second
	delPending   = 2 * time.Second
	// retainMargin: a record whose batch was stamped this much less than
	// its age ago must still be read (the janitor's clock is this
	// process's; the margin covers millisecond rounding and a pass that
	// read its clock just before the read).
	retainMargin = time.Second
)

var (
	standardBuckets = []string{"standard"}
	expressBuckets  = []string{"express-a", "express-b", "express-c"}
)

// spec is one stream of the workload.
type spec struct {
	name  string
	class api.StorageClass
	age   time.Duration // 0: infinite
	// every period the writer appends records records of size bytes;
	// burst > 0: only the first burst batches (then the stream idles).
	records, size int
	period        time.Duration
	burst         int
	trimEvery     time.Duration
	deletes       int
}

func workload() []spec {
	r := *flagRetention
	hot := max(1, *flagHotKiB/8) // 1 KiB records every 125 ms
	return []spec{
		{name: "hot-std", class: api.StorageStandard, age: r, records: hot, size: 1024, period: 125 * time.Millisecond},
		{name: "hot-exp", class: api.StorageExpress, age: r, records: max(1, hot/2), size: 1024, period: 125 * time.Millisecond},
		{name: "slow", class: api.StorageStandard, age: r / 2, records: 1, size: 512, period: 500 * time.Millisecond},
		{name: "keep", class: api.StorageStandard, records: 2, size: 1024, period: 500 * time.Millisecond},
		{name: "idle", class: api.StorageStandard, age: r / 4, records: 10, size: 1024, period: 100 * time.Millisecond, burst: 5},
		{name: "trim", class: api.StorageStandard, records: 1, size: 1024, period: 250 * time.Millisecond, trimEvery: *flagTrimEvery},
		{name: "phoenix", class: api.StorageExpress, age: r, records: 2, size: 1024, period: 250 * time.Millisecond, deletes: *flagDeletes},
	}
}

// TestSoak is the compressed-time lifecycle soak (issue 14): real `star
// serve` processes on one SQLite metastore and one object directory, the
// auditor in this process, retention of seconds and settle timers of
// seconds, hot, slow and idle streams, trims, a stream deleted and
// re-created under its name, and stars killed with kill -9. Every
// sample it measures every stream from the stores themselves and
// asserts stored ≤ 1.1 × retained + one output cap, reads every stream
// back and checks every retained acknowledged record.
func TestSoak(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -args -soak.seed=%d)", seed, seed)
	ctx := t.Context()
	bin := buildStar(t)
	dir := workDir(t)
	cluster := startCluster(t, bin, dir, max(1, *flagStars))
	startAuditor(t, dir)
	ms, err := sqlite.Open(ctx, filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	db, err := OpenRowCounter(filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	meter := &Meter{Meta: ms, DB: db, Root: filepath.Join(dir, "objects"), SettledBucket: standardBuckets[0], Basin: basin}

	clog, err := os.Create(filepath.Join(dir, "clients.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clog.Close() })
	cs, err := verify.NewClients(cluster.Endpoints(), 10*time.Second, slog.New(slog.NewTextHandler(clog, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := retry(ctx, time.Minute, func() error {
		_, err := cs[0].CreateBasin(ctx, basin, &api.BasinConfig{})
		if isStatus(err, 409) {
			return nil
		}
		return err
	}); err != nil {
		t.Fatalf("create basin: %v", err)
	}
	s := &soak{t: t, cs: cs, ms: ms, meter: meter, start: time.Now(), rng: rand.New(rand.NewPCG(seed, 1))}
	for i, sp := range workload() {
		st := &stream{spec: sp, rng: rand.New(rand.NewPCG(seed, uint64(10+i)))}
		if err := s.create(ctx, st); err != nil {
			t.Fatalf("create %s: %v", sp.name, err)
		}
		s.streams = append(s.streams, st)
	}

	wctx, stopWriters := context.WithTimeout(ctx, *flagDuration)
	defer stopWriters()
	var wg sync.WaitGroup
	for _, st := range s.streams {
		wg.Go(func() { s.write(wctx, st) })
	}
	wg.Go(func() { s.kill(wctx, cluster, seed) })
	s.sampleUntil(ctx, wctx.Done())
	wg.Wait()
	// Drain: the writers stopped; sample until every deleted id is
	// reclaimed (bounded), then once more.
	dctx, cancel := context.WithTimeout(ctx, *flagDrain)
	s.sampleUntil(dctx, s.allReclaimed(dctx))
	cancel()
	s.sampleOnce(ctx)
	s.report(dir)
}

// soak is one run's state.
type soak struct {
	t       *testing.T
	cs      []*sdk.Client
	ms      meta.Store
	meter   *Meter
	start   time.Time
	streams []*stream

	mu         sync.Mutex
	rng        *rand.Rand
	samples    []Sample
	violations []string
	deleted    []*deletedID
	kills      int
	stale      int // 404s for existing streams (noteStale)
	staleBy    map[string]int
	verified   int // acknowledged records read back and matched
	unacked    int // records read that only failed appends sent
	worstOver  map[string]int64
}

// deletedID is a stream id deleted during the run.
type deletedID struct {
	name, id             string
	at                   time.Duration
	reclaimed            time.Duration // 0: not yet
	peakStored, lastRows int
}

// stream is one name of the workload and its generations (a delete and
// re-create starts a new one: a new id, nothing of the old).
type stream struct {
	spec
	rng *rand.Rand

	mu        sync.Mutex
	gens      []*gen
	switching bool // between delete and re-create: not read back
	trims     []trimEvent
}

// gen is one stream id's model: every acknowledged batch, in seq order
// (one writer per stream), and the records of failed appends.
type gen struct {
	id      string
	n       int
	acked   []batch
	maybe   map[uint64]bool // records of appends not acknowledged (yet)
	maxEnd  uint64
	trimmed uint64 // the highest trim point appended (acknowledged or not)
}

type batch struct {
	start  uint64
	ts     uint64 // the batch's first record's timestamp (ms)
	hashes []uint64
}

type trimEvent struct {
	at     time.Duration
	point  uint64
	passed time.Duration // when reads first started at or past point (0: not yet)
}

func (s *soak) now() time.Duration { return time.Since(s.start) }

func (s *soak) violate(format string, args ...any) {
	msg := fmt.Sprintf("%6.1fs ", s.now().Seconds()) + fmt.Sprintf(format, args...)
	s.mu.Lock()
	s.violations = append(s.violations, msg)
	s.mu.Unlock()
	s.t.Log("VIOLATION " + msg)
}

func (s *soak) client() *sdk.Client {
	_, c := s.pick()
	return c
}

// pick is a random star's client and its index.
func (s *soak) pick() (int, *sdk.Client) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := s.rng.IntN(len(s.cs))
	return i, s.cs[i]
}

// noteStale counts a 404 stream_not_found that star i answered for a
// stream that exists (its name row names a live id): a star's cached
// name row outliving a delete and re-create (see docs/soak.md).
func (s *soak) noteStale(st *stream, i int, op string, err error) {
	if isStatus(err, 404) && !st.isSwitching() {
		s.countStale(st, i, op, err)
	}
}

func (s *soak) countStale(st *stream, i int, op string, err error) {
	s.mu.Lock()
	s.stale++
	if s.staleBy == nil {
		s.staleBy = map[string]int{}
	}
	s.staleBy[fmt.Sprintf("star-%d", i+1)]++
	first := s.stale <= 5
	s.mu.Unlock()
	if first {
		s.t.Logf("%6.1fs STALE-NAME 404: star-%d answered %s of %s (id %s exists): %v", s.now().Seconds(), i+1, op, st.name, st.cur().id, err)
	}
}

func (st *stream) cur() *gen {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.gens[len(st.gens)-1]
}

// create creates the stream's next generation and reads its id.
func (s *soak) create(ctx context.Context, st *stream) error {
	cls := st.class
	cfg := &api.StreamConfig{StorageClass: &cls, RetentionPolicy: &api.RetentionPolicy{Infinite: true}}
	if st.age > 0 {
		cfg.RetentionPolicy = &api.RetentionPolicy{AgeSecs: uint64(st.age / time.Second)}
	}
	err := retry(ctx, 30*time.Second, func() error {
		_, err := s.client().Basin(basin).CreateStream(ctx, st.name, cfg)
		return err
	})
	if err != nil {
		return err
	}
	var id string
	if err := retry(ctx, 10*time.Second, func() (err error) {
		id, _, err = s.nameRow(ctx, st.name)
		return err
	}); err != nil {
		return fmt.Errorf("stream id: %w", err)
	}
	st.mu.Lock()
	st.gens = append(st.gens, &gen{id: id, n: len(st.gens), maybe: map[uint64]bool{}})
	st.mu.Unlock()
	return nil
}

// nameRow reads a stream's name row from the metastore: the id it names
// and whether it is marked deleted.
func (s *soak) nameRow(ctx context.Context, name string) (id string, deleted bool, err error) {
	k := meta.StreamNameKey(basin, name)
	it, err := s.ms.Get(ctx, k.PK, k.SK)
	if err != nil {
		return "", false, err
	}
	var row struct {
		ID        string     `json:"id"`
		DeletedAt *time.Time `json:"deleted_at"`
	}
	if err := json.Unmarshal(it.Val, &row); err != nil {
		return "", false, err
	}
	if row.ID == "" {
		return "", false, errors.New("name row without id")
	}
	return row.ID, row.DeletedAt != nil, nil
}

// write is a stream's writer: one batch every period, a trim command
// every trimEvery, and the deletes and re-creates spread over the run.
func (s *soak) write(ctx context.Context, st *stream) {
	tick := time.NewTicker(st.period)
	defer tick.Stop()
	var nextTrim, nextDelete time.Time
	if st.trimEvery > 0 {
		nextTrim = time.Now().Add(st.trimEvery)
	}
	deletes := 0
	deleteAt := func() time.Time {
		return s.start.Add(*flagDuration * time.Duration(deletes+1) / time.Duration(st.deletes+1))
	}
	if st.deletes > 0 {
		nextDelete = deleteAt()
	}
	count := 0
	for batches := 0; ; {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if st.burst > 0 && batches >= st.burst {
			continue
		}
		batches++
		g := st.cur()
		in := &api.AppendInput{}
		for range st.records {
			body := fmt.Appendf(nil, "%s/g%d/%08d/", st.name, g.n, count)
			count++
			for len(body) < st.size {
				body = append(body, byte('a'+st.rng.IntN(26)))
			}
			in.Records = append(in.Records, api.Record{Body: body})
		}
		s.append(ctx, st, g, in)
		if !nextTrim.IsZero() && time.Now().After(nextTrim) {
			nextTrim = time.Now().Add(st.trimEvery)
			st.mu.Lock()
			point := g.maxEnd
			st.mu.Unlock()
			if point > 20 {
				point -= 20 // keep the last 20 records
				s.append(ctx, st, g, &api.AppendInput{Records: []api.Record{api.TrimRecord(point)}})
				st.mu.Lock()
				st.trims = append(st.trims, trimEvent{at: s.now(), point: point})
				st.mu.Unlock()
			}
		}
		if !nextDelete.IsZero() && time.Now().After(nextDelete) {
			deletes++
			nextDelete = time.Time{}
			if deletes < st.deletes {
				nextDelete = deleteAt()
			}
			s.recreate(ctx, st)
		}
	}
}

// append sends one batch through a random star, exactly once, and
// records the outcome in the model.
func (s *soak) append(ctx context.Context, st *stream, g *gen, in *api.AppendInput) {
	hashes := make([]uint64, len(in.Records))
	for i := range in.Records {
		hashes[i] = verify.RecordHash(&in.Records[i])
	}
	// Before the call: a read-back may read the batch (durable, its ack
	// on the way) before this writer has the ack.
	st.mu.Lock()
	for _, h := range hashes {
		g.maybe[h] = true
	}
	st.mu.Unlock()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	i, c := s.pick()
	ack, err := c.Basin(basin).Stream(st.name).Append(cctx, in)
	cancel()
	s.noteStale(st, i, "an append", err)
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, r := range in.Records {
		if cmd, e := api.ParseCommand(&r); e == nil && cmd.Kind == api.Trim {
			g.trimmed = max(g.trimmed, cmd.TrimPoint) // applied or maybe: records below may go
		}
	}
	if err != nil {
		return // its records stay in maybe: the outcome is unknown
	}
	if ack.End.SeqNum-ack.Start.SeqNum != uint64(len(hashes)) {
		s.violate("%s: ack [%d, %d) for a batch of %d records", st.name, ack.Start.SeqNum, ack.End.SeqNum, len(hashes))
		return
	}
	if n := len(g.acked); n > 0 && g.acked[n-1].start >= ack.Start.SeqNum {
		s.violate("%s: ack at %d after one at %d", st.name, ack.Start.SeqNum, g.acked[n-1].start)
		return
	}
	g.acked = append(g.acked, batch{start: ack.Start.SeqNum, ts: ack.Start.Timestamp, hashes: hashes})
	g.maxEnd = max(g.maxEnd, ack.End.SeqNum)
}

// recreate deletes the stream and creates it again under its name once
// its deletion is no longer pending and the janitor has registered the
// old id for reclamation (docs/settle.md, "Known gaps": a name deleted
// and re-created between two janitor runs would hide the old id).
func (s *soak) recreate(ctx context.Context, st *stream) {
	st.mu.Lock()
	st.switching = true
	old := st.gens[len(st.gens)-1]
	st.mu.Unlock()
	defer func() {
		st.mu.Lock()
		st.switching = false
		st.mu.Unlock()
	}()
	// Done once the name row marks the old id deleted: a 404 from a star
	// whose cached row is stale is not a delete.
	err := retry(ctx, 30*time.Second, func() error {
		i, c := s.pick()
		err := c.Basin(basin).DeleteStream(ctx, st.name)
		if err != nil && !isStatus(err, 404) {
			return err
		}
		id, deleted, rerr := s.nameRow(ctx, st.name)
		if rerr != nil {
			return rerr
		}
		if id == old.id && !deleted {
			if isStatus(err, 404) {
				s.countStale(st, i, "a delete", err)
			}
			return errors.New("the delete did not take: the name row still names a live stream")
		}
		return nil
	})
	if err != nil {
		if ctx.Err() == nil {
			s.violate("%s: delete: %v", st.name, err)
		}
		return
	}
	d := &deletedID{name: st.name, id: old.id, at: s.now()}
	s.mu.Lock()
	s.deleted = append(s.deleted, d)
	s.mu.Unlock()
	s.t.Logf("%6.1fs deleted %s (id %s, %d acknowledged batches)", s.now().Seconds(), st.name, old.id, len(old.acked))
	k := meta.ReclaimStreamKey(old.id)
	reg := retry(ctx, 30*time.Second, func() error {
		_, err := s.ms.Get(ctx, k.PK, k.SK)
		return err
	})
	if reg != nil {
		s.t.Logf("%s: the janitor had not registered id %s after 30 s: re-creating anyway", st.name, old.id)
	}
	if err := s.create(ctx, st); err != nil {
		if ctx.Err() == nil {
			s.violate("%s: re-create: %v", st.name, err)
		}
		return
	}
	s.t.Logf("%6.1fs re-created %s (id %s)", s.now().Seconds(), st.name, st.cur().id)
}

// kill kills a random star every duration/(kills+1) and restarts it
// (verify.KillRestart), then plays the supervisor.
func (s *soak) kill(ctx context.Context, c *verify.Cluster, seed uint64) {
	k := &verify.KillRestart{MaxDown: 2 * deadAfter, Rand: rand.New(rand.NewPCG(seed, 2))}
	for i := range *flagKills {
		at := s.start.Add(*flagDuration * time.Duration(i+1) / time.Duration(*flagKills+1))
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(at)):
		}
		ev, err := k.Inject(ctx, c)
		if err != nil {
			s.violate("kill: %v", err)
			continue
		}
		s.mu.Lock()
		s.kills++
		s.mu.Unlock()
		s.t.Logf("%6.1fs kill -9: %s, serving again after %v", s.now().Seconds(), ev.Detail, ev.Recovered.Round(time.Millisecond))
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		evs, err := c.Supervise(sctx, 3*time.Second)
		cancel()
		for _, e := range evs {
			s.t.Logf("supervisor: %s", e.Detail)
		}
		if err != nil {
			s.violate("supervise: %v", err)
		}
	}
}

// allReclaimed closes its channel once every deleted id was reclaimed.
func (s *soak) allReclaimed(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			s.mu.Lock()
			left := 0
			for _, d := range s.deleted {
				if d.reclaimed == 0 {
					left++
				}
			}
			s.mu.Unlock()
			if left == 0 {
				return
			}
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
	}()
	return done
}

// sampleUntil samples every flagSample until stop closes or ctx ends.
func (s *soak) sampleUntil(ctx context.Context, stop <-chan struct{}) {
	tick := time.NewTicker(*flagSample)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.sampleOnce(ctx)
	}
}

// sampleOnce measures every live id and every deleted id not reclaimed
// yet, checks the bound, reads the live streams back, and logs a line.
func (s *soak) sampleOnce(ctx context.Context) {
	if ctx.Err() != nil {
		ctx = context.WithoutCancel(ctx)
	}
	mctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var refs []StreamRef
	for _, st := range s.streams {
		st.mu.Lock()
		g := st.gens[len(st.gens)-1]
		refs = append(refs, StreamRef{Name: st.name, ID: g.id, Live: !st.switching})
		st.mu.Unlock()
	}
	seen := map[string]bool{}
	for _, r := range refs {
		seen[r.ID] = true
	}
	s.mu.Lock()
	for _, d := range s.deleted {
		if d.reclaimed == 0 && !seen[d.id] {
			refs = append(refs, StreamRef{Name: d.name + "(deleted)", ID: d.id})
		}
	}
	s.mu.Unlock()
	at := s.now()
	smp, err := s.meter.Measure(mctx, at, refs)
	if err != nil {
		s.violate("measure: %v", err)
		return
	}
	for i := range smp.Streams {
		ss := &smp.Streams[i]
		if ss.Live {
			if over := ss.Over(outputCap); over > 0 {
				s.violate("%s (%s): stored %d B in %d objects > 1.1 × retained %d B + cap %d B by %d B (superseded %d, trimmed waiting %d, unnamed %d)",
					ss.Name, ss.ID, ss.Stored, ss.Objects, ss.Retained, outputCap, over, ss.Superseded, ss.Trimmed, ss.Unnamed)
			}
			s.mu.Lock()
			if s.worstOver == nil {
				s.worstOver = map[string]int64{}
			}
			if w, ok := s.worstOver[ss.Name]; !ok || ss.Over(outputCap) > w {
				s.worstOver[ss.Name] = ss.Over(outputCap)
			}
			s.mu.Unlock()
			continue
		}
		s.mu.Lock()
		for _, d := range s.deleted {
			if d.id == ss.ID && d.reclaimed == 0 {
				d.peakStored = max(d.peakStored, int(ss.Stored))
				d.lastRows = ss.CatalogRows + ss.SpanRefs
				if ss.Stored == 0 && ss.CatalogRows+ss.SpanRefs == 0 && ss.Entries == 0 {
					d.reclaimed = at
					s.t.Logf("%6.1fs deleted %s id %s reclaimed %.1f s after its delete (peak %d B stored)", at.Seconds(), d.name, d.id, (at - d.at).Seconds(), d.peakStored)
				}
			}
		}
		s.mu.Unlock()
	}
	for i := range smp.Streams {
		ss := &smp.Streams[i]
		if !ss.Live {
			continue
		}
		for _, st := range s.streams {
			if st.name == ss.Name {
				ss.Readable, ss.OldestAge = s.readBack(mctx, st)
			}
		}
	}
	s.mu.Lock()
	s.samples = append(s.samples, smp)
	nv := len(s.violations)
	s.mu.Unlock()
	tot := Total(smp, outputCap)
	rows := 0
	for _, n := range smp.MetaRows {
		rows += n
	}
	s.t.Logf("%6.1fs stored %8d B retained %8d B bound %8d B | transit %8d B in %4d slots | %5d metastore rows | %d ids | %d verified | %d violations",
		at.Seconds(), tot.Stored, tot.Retained, tot.Bound, smp.TransitBytes, smp.TransitObjects, rows, len(smp.Streams), s.verified, nv)
}

// readBack reads the stream from seq 0 to the tail it checks first and
// checks every record read: an acknowledged record is the one appended
// at its seq; any other is one a failed append sent; records a read
// skipped (trimmed) are all below the trim point or older than the
// stream's age. It returns the metered bytes read and the age of the
// first record.
func (s *soak) readBack(ctx context.Context, st *stream) (readable uint64, oldest time.Duration) {
	st.mu.Lock()
	if st.switching {
		st.mu.Unlock()
		return 0, 0
	}
	g := st.gens[len(st.gens)-1]
	minTail := g.maxEnd
	st.mu.Unlock()
	var last int
	h := func() *sdk.Stream {
		i, c := s.pick()
		last = i
		return c.Basin(basin).Stream(st.name)
	}
	var tail api.StreamPosition
	if err := retry(ctx, 20*time.Second, func() (err error) {
		tail, err = h().CheckTail(ctx)
		s.noteStale(st, last, "a check-tail", err)
		return err
	}); err != nil {
		// A 404 is counted as a stale-name 404 (noteStale), not here.
		if !st.isSwitching() && !isStatus(err, 404) {
			s.violate("%s: check-tail: %v", st.name, err)
		}
		return 0, 0
	}
	if tail.SeqNum < minTail {
		s.violate("%s: check-tail %d below the acknowledged end %d", st.name, tail.SeqNum, minTail)
	}
	first := true
	for at := uint64(0); at < tail.SeqNum; {
		call := time.Now()
		var b *api.ReadBatch
		count := uint64(1000)
		err := retry(ctx, 20*time.Second, func() (err error) {
			b, err = h().Read(ctx, api.ReadRequest{From: api.FromSeqNum, Value: at, Count: &count})
			s.noteStale(st, last, "a read", err)
			if isStatus(err, 416) {
				return nil
			}
			return err
		})
		if err != nil {
			if !st.isSwitching() && !isStatus(err, 404) {
				s.violate("%s: read at %d: %v", st.name, at, err)
			}
			return readable, oldest
		}
		if b == nil || len(b.Records) == 0 { // 416: everything from at is trimmed
			s.checkSkipped(st, g, at, tail.SeqNum, call)
			return readable, oldest
		}
		if r0 := b.Records[0].SeqNum; r0 < at {
			s.violate("%s: a read at %d started at %d", st.name, at, r0)
			return readable, oldest
		} else if r0 > at {
			s.checkSkipped(st, g, at, r0, call)
		}
		if first {
			first = false
			oldest = time.Since(time.UnixMilli(int64(tsOf(&b.Records[0]))))
			s.notePassed(st, b.Records[0].SeqNum)
		}
		next := b.Records[0].SeqNum
		for i := range b.Records {
			r := &b.Records[i]
			if r.SeqNum != next {
				s.violate("%s: seq %d after %d in one read", st.name, r.SeqNum, next-1)
				return readable, oldest
			}
			next++
			readable += r.MeteredSize()
			s.checkRecord(st, g, r)
		}
		at = next
	}
	return readable, oldest
}

func (st *stream) isSwitching() bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	return st.switching
}

func tsOf(r *api.Record) uint64 {
	if r.Timestamp == nil {
		return 0
	}
	return *r.Timestamp
}

// notePassed records when reads first started at or past each trim
// point.
func (s *soak) notePassed(st *stream, first uint64) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for i := range st.trims {
		if tr := &st.trims[i]; tr.passed == 0 && first >= tr.point {
			tr.passed = s.now()
		}
	}
}

// checkRecord checks one record read from generation g.
func (s *soak) checkRecord(st *stream, g *gen, r *api.Record) {
	h := verify.RecordHash(r)
	st.mu.Lock()
	i := sort.Search(len(g.acked), func(i int) bool { return g.acked[i].start > r.SeqNum }) - 1
	var want uint64
	acked := false
	if i >= 0 {
		if b := g.acked[i]; r.SeqNum < b.start+uint64(len(b.hashes)) {
			want, acked = b.hashes[r.SeqNum-b.start], true
		}
	}
	maybe := g.maybe[h]
	older := false
	if !acked || h != want {
		for _, og := range st.gens[:g.n] {
			older = older || og.maybe[h] || ackedHash(og, h)
		}
	}
	st.mu.Unlock()
	switch {
	case acked && h == want:
		s.mu.Lock()
		s.verified++
		s.mu.Unlock()
	case acked:
		s.violate("%s (%s): seq %d reads back %.24q, not the record acknowledged there", st.name, g.id, r.SeqNum, r.Body)
	case older:
		s.violate("%s (%s): seq %d reads back a record of the deleted stream of that name: %.24q", st.name, g.id, r.SeqNum, r.Body)
	case maybe:
		s.mu.Lock()
		s.unacked++
		s.mu.Unlock()
	default:
		s.violate("%s (%s): seq %d reads back a record nobody appended: %.24q", st.name, g.id, r.SeqNum, r.Body)
	}
}

func ackedHash(g *gen, h uint64) bool {
	for _, b := range g.acked {
		for _, x := range b.hashes {
			if x == h {
				return true
			}
		}
	}
	return false
}

// checkSkipped checks that a read called at call that skipped [from, to)
// skipped no record it had to return: every acknowledged record there is
// below the highest trim point appended, or stamped more than the
// stream's age (less the margin) before the call.
func (s *soak) checkSkipped(st *stream, g *gen, from, to uint64, call time.Time) {
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, b := range g.acked {
		end := b.start + uint64(len(b.hashes))
		if end <= from || b.start >= to {
			continue
		}
		lo := max(b.start, from, g.trimmed)
		hi := min(end, to)
		if lo >= hi {
			continue // below the trim point
		}
		if st.age > 0 && time.UnixMilli(int64(b.ts)).Before(call.Add(-st.age+retainMargin)) {
			continue // aged out
		}
		s.mu.Lock()
		msg := fmt.Sprintf("%6.1fs %s (%s): a read from %d skipped acknowledged records [%d, %d) stamped %v before the read (age %v, trim point %d)",
			s.now().Seconds(), st.name, g.id, from, lo, hi, call.Sub(time.UnixMilli(int64(b.ts))).Round(time.Millisecond), st.age, g.trimmed)
		s.violations = append(s.violations, msg)
		s.mu.Unlock()
		s.t.Log("VIOLATION " + msg)
		return
	}
}

// report writes the series and logs the run's figures; it fails the
// test on any violation.
func (s *soak) report(dir string) {
	t := s.t
	out := *flagOut
	if out == "" {
		out = dir
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := WriteStreamsCSV(filepath.Join(out, "soak.csv"), s.samples, outputCap); err != nil {
		t.Error(err)
	}
	if err := WriteTotalsCSV(filepath.Join(out, "soak-totals.csv"), s.samples, outputCap); err != nil {
		t.Error(err)
	}
	title := fmt.Sprintf("starlog soak: %v, %d stars, %d kills, %d deletes", flagDuration.String(), *flagStars, s.kills, len(s.deleted))
	if err := WritePlot(filepath.Join(out, "soak.png"), title, s.samples, outputCap); err != nil {
		t.Error(err)
	}
	t.Logf("series: %s, %s, %s", filepath.Join(out, "soak.csv"), filepath.Join(out, "soak-totals.csv"), filepath.Join(out, "soak.png"))

	// Per stream: peaks over the run.
	type peak struct {
		stored, retained, superseded, trimmed, unnamed uint64
		objects, rows, entries                         int
		oldest                                         time.Duration
		ratio                                          float64
	}
	peaks := map[string]*peak{}
	var names []string
	for _, smp := range s.samples {
		for _, ss := range smp.Streams {
			if !ss.Live {
				continue
			}
			p := peaks[ss.Name]
			if p == nil {
				p = &peak{}
				peaks[ss.Name] = p
				names = append(names, ss.Name)
			}
			p.stored, p.retained = max(p.stored, ss.Stored), max(p.retained, ss.Retained)
			p.superseded, p.trimmed, p.unnamed = max(p.superseded, ss.Superseded), max(p.trimmed, ss.Trimmed), max(p.unnamed, ss.Unnamed)
			p.objects, p.rows, p.entries = max(p.objects, ss.Objects), max(p.rows, ss.CatalogRows+ss.SpanRefs), max(p.entries, ss.Entries)
			p.oldest = max(p.oldest, ss.OldestAge)
			if ss.Retained > 256<<10 {
				p.ratio = max(p.ratio, float64(ss.Stored)/float64(ss.Retained))
			}
		}
	}
	ages := map[string]time.Duration{}
	for _, st := range s.streams {
		ages[st.name] = st.age
	}
	for _, n := range names {
		p := peaks[n]
		t.Logf("%-8s age %-5v peaks: stored %8d B, retained %8d B, stored/retained %.2f (retained > 256 KiB), superseded %7d, trimmed waiting %7d, unnamed %7d B; %3d objects, %3d ref rows, %3d reclaim entries; oldest readable record %5.1f s; closest to the bound %d B",
			n, ages[n], p.stored, p.retained, p.ratio, p.superseded, p.trimmed, p.unnamed, p.objects, p.rows, p.entries, p.oldest.Seconds(), s.worstOver[n])
	}
	for _, st := range s.streams {
		for _, tr := range st.trims {
			if tr.passed > 0 {
				t.Logf("trim of %s to %d at %.1f s: reads start at or past it from %.1f s (%.1f s later)", st.name, tr.point, tr.at.Seconds(), tr.passed.Seconds(), (tr.passed - tr.at).Seconds())
			} else {
				t.Logf("trim of %s to %d at %.1f s: reads still start below it at the end (the trim reclaimed nothing)", st.name, tr.point, tr.at.Seconds())
			}
		}
	}
	for _, d := range s.deleted {
		if d.reclaimed > 0 {
			t.Logf("deleted %s id %s at %.1f s: rows and objects gone %.1f s later (peak %d B stored)", d.name, d.id, d.at.Seconds(), (d.reclaimed - d.at).Seconds(), d.peakStored)
		} else {
			s.violations = append(s.violations, fmt.Sprintf("deleted %s id %s at %.1f s: not reclaimed by the end (%d ref rows, peak %d B stored)", d.name, d.id, d.at.Seconds(), d.lastRows, d.peakStored))
		}
	}
	if s.stale > 0 {
		t.Errorf("STALE-NAME 404s: %d requests for an existing stream answered 404 stream_not_found (by star: %v): a star answered from a cached row of a deleted stream (star/node, TestDeletedRowCacheSeesRecreatedStream)", s.stale, s.staleBy)
	}
	t.Logf("%d samples, %d kills, %d deletes; %d acknowledged records read back and matched, %d records of failed appends read", len(s.samples), s.kills, len(s.deleted), s.verified, s.unacked)
	if s.verified == 0 {
		t.Error("no acknowledged record was read back: the run checked nothing")
	}
	if len(s.violations) > 0 {
		t.Errorf("%d violations (first 20):\n%s", len(s.violations), strings.Join(s.violations[:min(20, len(s.violations))], "\n"))
	}
}

// retry runs f until it succeeds, fails with a definite client error
// (4xx other than 408, 409 and 429), or d passes.
func retry(ctx context.Context, d time.Duration, f func() error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	for {
		err := f()
		var ae *api.Error
		if err == nil || errors.As(err, &ae) && ae.Status >= 400 && ae.Status < 500 && ae.Status != 408 && ae.Status != 409 && ae.Status != 429 && ae.Status != 404 {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last: %w)", ctx.Err(), err)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func isStatus(err error, status int) bool {
	var ae *api.Error
	return errors.As(err, &ae) && ae.Status == status
}

// buildStar builds the star binary, or takes $STARLOG_STAR_BIN.
func buildStar(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("STARLOG_STAR_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "star")
	out, err := exec.Command("go", "build", "-C", testsvc.RepoRoot(t), "-o", bin, "./star").CombinedOutput()
	if err != nil {
		t.Fatalf("go build star: %v\n%s", err, out)
	}
	return bin
}

// workDir is the cluster's data folder, kept when the test fails or
// -soak.keep is set.
func workDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "starlog-soak-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || *flagKeep {
			t.Logf("stars' data and logs kept in %s (star-N.log, auditor.log, clients.log)", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// startCluster starts n `star serve` processes sharing dir's metastore
// and object folder, with the compressed timers.
func startCluster(t *testing.T, bin, dir string, n int) *verify.Cluster {
	t.Helper()
	objects := filepath.Join(dir, "objects")
	if err := os.MkdirAll(objects, 0o755); err != nil {
		t.Fatal(err)
	}
	c := &verify.Cluster{Basin: basin, Dir: dir}
	for i := range n {
		id := fmt.Sprintf("star-%d", i+1)
		addr := testsvc.Addr(testsvc.FreePort(t))
		args := []string{"serve",
			"--sqlite", filepath.Join(dir, "meta.db"), "--fs-root", objects,
			"--star-id", id, "--listen", addr, "--address", addr,
			"--standard-buckets", strings.Join(standardBuckets, ","), "--express-buckets", strings.Join(expressBuckets, ","),
			"--registry-heartbeat", (deadAfter / 10).String(), "--dead-after", deadAfter.String(),
			"--s3-flush-interval", "5ms", "--shutdown-timeout", "5s",
			"--settle-linger", "1s", "--settle-age-cap", "2s",
			"--settle-express-linger", "1s", "--settle-express-age-cap", "2s",
			"--settle-trigger-mib", "1", "--settle-output-cap-mib", fmt.Sprint(outputCapMiB),
			"--read-grace", readGrace.String(), "--deletion-pending", delPending.String(),
			"--log-level", "info"}
		s := verify.NewStar(verify.StarSpec{Binary: bin, Args: args, Env: verify.ClusterEnv(), Endpoint: "http://" + addr,
			Health: true, ID: id, LogFile: filepath.Join(dir, id+".log")})
		// One at a time: the first creates the metastore's schema.
		if err := s.Start(t.Context()); err != nil {
			t.Fatalf("start %s: %v", id, err)
		}
		c.Stars = append(c.Stars, s)
	}
	t.Cleanup(func() {
		for _, s := range c.Stars {
			if err := s.Kill(); err != nil {
				t.Error(err)
			}
			s.Close()
		}
	})
	return c
}

// startAuditor runs the auditor (plan, janitor with its retention,
// reclaim and deleted-stream passes, settle, trim-check, chain-settle) in
// this process on the cluster's stores, as the Lambda functions run
// beside the stars in production.
func startAuditor(t *testing.T, dir string) {
	t.Helper()
	ms, err := sqlite.Open(t.Context(), filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatalf("auditor metastore: %v", err)
	}
	objs, err := fs.New(filepath.Join(dir, "objects"))
	if err != nil {
		t.Fatalf("auditor object store: %v", err)
	}
	logf, err := os.Create(filepath.Join(dir, "auditor.log"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := settle.Config{
		Trigger:    1 << 20,
		Standard:   settle.ClassTimers{Linger: time.Second, AgeCap: 2 * time.Second},
		Express:    settle.ClassTimers{Linger: time.Second, AgeCap: 2 * time.Second},
		OutputCap:  outputCap,
		ReadGrace:  readGrace,
		DeadAfter:  deadAfter,
		ScratchDir: filepath.Join(dir, "scratch"),
	}.WithDefaults()
	if err := os.MkdirAll(cfg.ScratchDir, 0o755); err != nil {
		t.Fatal(err)
	}
	st := &settle.Stores{
		Meta: ms, Objects: objs, SettledBucket: standardBuckets[0],
		Streams: settle.MetaStreams{Meta: ms}, Config: cfg,
		Metrics: settle.NewMetrics(prometheus.NewRegistry()),
		Logger:  slog.New(slog.NewTextHandler(logf, &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	r, err := auditor.New(st, auditor.Options{Interval: auditEvery})
	if err != nil {
		t.Fatal(err)
	}
	actx, cancel := context.WithCancel(context.WithoutCancel(t.Context()))
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = r.Run(actx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		ms.Close()
		logf.Close()
	})
}
