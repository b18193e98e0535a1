package settle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	mfaults "github.com/starlog/starlog/shared/meta/faults"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/reclaim"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/chainsettle"
	"github.com/starlog/starlog/shared/settle/plan"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/stores"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/reader"
	"github.com/starlog/starlog/star/streams"
)

var (
	zones       = []string{"az1", "az2", "az3"}
	settledB    = "std"
	basin       = "b1"
	sharedDyn   testsvc.SharedDynamo
	errMismatch = errors.New("records differ")
)

func TestMain(m *testing.M) {
	code := m.Run()
	sharedDyn.Stop()
	os.Exit(code)
}

func quietLog() *slog.Logger {
	if testing.Verbose() && os.Getenv("SETTLE_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

// env is a star's express loglet writing genuine bundles, refs and
// markers, plus the auditor's stores over the same metastore and object
// store.
type env struct {
	t      testing.TB
	meta   *mfaults.Store
	objs   *faults.Store
	cfg    loglet.Config
	loglet *loglet.Loglet
	st     *settle.Stores
	rd     *reader.Reader

	mu      sync.Mutex
	streams map[string]*streams.Stream
	acked   map[string][]format.Record // acknowledged records, in seq order
}

type envOpts struct {
	aws      bool
	class    meta.Class
	settle   settle.Config
	tweak    func(*loglet.Config)
	registry prometheus.Registerer
}

func defaultSettleConfig(t testing.TB) settle.Config {
	return settle.Config{Trigger: 16 << 10, OutputCap: 48 << 10, ReadGrace: 5 * time.Minute, Workers: 4, ScratchDir: t.TempDir()}
}

func newEnv(t testing.TB, o envOpts) *env {
	t.Helper()
	var inner objstore.Store
	var ms meta.Store
	buckets := append(slices.Clone(zones), settledB)
	if o.aws {
		inner, ms = stores.S3(t, buckets...), stores.Dynamo(t, &sharedDyn)
	} else {
		m, err := mem.New(buckets...)
		if err != nil {
			t.Fatal(err)
		}
		inner, ms = m, testsvc.SQLite(t)
	}
	if o.class == "" {
		o.class = meta.Express
	}
	e := &env{t: t, meta: mfaults.New(ms, 1), objs: faults.Wrap(inner, faults.WithSeed(1)),
		streams: map[string]*streams.Stream{}, acked: map[string][]format.Record{}}
	sc := o.settle
	if sc == (settle.Config{}) {
		sc = defaultSettleConfig(t)
	}
	e.cfg = loglet.Config{
		Star: "star1", Incarnation: chain.Incarnation("star1", 1), Class: o.class,
		Buckets: zones, W: 2, Window: 8,
		FlushInterval: time.Millisecond, TargetFlight: 16 << 10, PoolBudget: 32 << 20,
		FlightDeadline: 5 * time.Second, AbsorbInterval: 20 * time.Millisecond,
		Ripening: sc.WithDefaults().Ripening(o.class),
	}
	if o.class == meta.Standard {
		e.cfg.Buckets, e.cfg.W = []string{settledB}, 1
	}
	if o.tweak != nil {
		o.tweak(&e.cfg)
	}
	e.st = &settle.Stores{Meta: e.meta, Objects: e.objs, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: e.meta},
		Config: sc, Metrics: settle.NewMetrics(o.registry), Logger: quietLog()}
	c := chain.New(e.cfg.Star, e.cfg.Class, e.cfg.Incarnation, e.meta, e.objs)
	abs := &absorb.Absorber{Star: e.cfg.Star, Class: e.cfg.Class, Meta: e.meta, Rip: e.cfg.Ripening, UpdateEpoch: c.UpdateEpoch}
	l, err := loglet.Open(context.Background(), e.cfg, c, func(ctx context.Context) error { return chainsettle.Chain(ctx, c, abs) },
		loglet.NewMetrics(nil), quietLog())
	if err != nil {
		t.Fatal(err)
	}
	e.loglet = l
	t.Cleanup(l.Close)
	rd, err := reader.New(reader.Config{Meta: e.meta, Objects: e.objs, SettledBucket: settledB, CacheBytes: 4 << 20, Logger: quietLog()})
	if err != nil {
		t.Fatal(err)
	}
	e.rd = rd
	return e
}

// stream creates (once) a stream: its identity row, then the leader's open.
func (e *env) stream(id string) *streams.Stream {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.streams[id]; ok {
		return s
	}
	ctx := context.Background()
	k := meta.StreamMetaKey(id)
	if _, err := e.meta.Put(ctx, k.PK, k.SK, meta.Encode(meta.StreamMeta{Basin: basin, Name: id, Class: e.cfg.Class}), meta.IfAbsent()); err != nil {
		e.t.Fatal(err)
	}
	s, err := streams.Open(ctx, e.meta, e.loglet, id, e.cfg.Class, facade.Config{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.streams[id] = s
	return s
}

// body is a deterministic record body of about size bytes.
func body(id string, seq, size int) []byte {
	b := fmt.Appendf(nil, "%s#%d:", id, seq)
	for len(b) < size {
		b = append(b, byte('a'+(len(b)*7+seq)%26))
	}
	return b
}

// write appends batches of n records of about size bytes to stream id,
// pipelined, and remembers what was acknowledged.
func (e *env) write(id string, batches, n, size int) {
	e.t.Helper()
	s := e.stream(id)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var tickets []*streams.Ticket
	for b := range batches {
		req := facade.Request{}
		for j := range n {
			in := facade.Input{Body: body(id, b*n+j, size)}
			if j%3 == 0 {
				in.Headers = []format.Header{{Name: []byte("h"), Value: fmt.Appendf(nil, "%d", j)}}
			}
			req.Records = append(req.Records, in)
		}
		tk, err := s.Submit(ctx, req)
		if err != nil {
			e.t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	for _, tk := range tickets {
		if _, err := tk.Wait(ctx); err != nil {
			e.t.Fatalf("append to %s: %v", id, err)
		}
		e.mu.Lock()
		e.acked[id] = append(e.acked[id], tk.Sequenced().Records...)
		e.mu.Unlock()
	}
}

// ids lists the streams written.
func (e *env) ids() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for id := range e.acked {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// waitAbsorbed waits until every acknowledged record of every stream is
// ref-covered.
func (e *env) waitAbsorbed() {
	e.t.Helper()
	poll.UntilErr(e.t, 20*time.Second, "absorbed", func() error {
		for _, id := range e.ids() {
			e.mu.Lock()
			want := uint64(len(e.acked[id]))
			e.mu.Unlock()
			if end := frontier(e.t, e.meta, id); end != want {
				return fmt.Errorf("stream %s: rows end at %d, acknowledged %d", id, end, want)
			}
		}
		// The refs land before the pass's checkpoint CAS: wait for the
		// flight index to drain too, which happens only after it.
		if n := e.loglet.Index().Len(); n > 0 {
			return fmt.Errorf("flight index still holds %d flights", n)
		}
		return nil
	})
}

func frontier(t testing.TB, ms meta.Store, id string) uint64 {
	end, err := frontierOf(context.Background(), ms, id)
	if err != nil {
		t.Fatal(err)
	}
	return end
}

// frontierOf is the end of a stream's greatest row.
func frontierOf(ctx context.Context, ms meta.Store, id string) (uint64, error) {
	pg, err := ms.Query(ctx, meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~", Backward: true, Limit: 1})
	if err != nil || len(pg.Items) == 0 {
		return 0, err
	}
	var r meta.Ref
	if err := meta.Decode(pg.Items[0].Val, &r); err != nil {
		return 0, err
	}
	return r.EndSeq, nil
}

// readAll reads seqs [0, end) of a stream through the rows, as a star that
// does not lead it. end is at or below the ref-covered frontier: a read
// that reaches the frontier while the absorb adds rows can meet the
// reader's floor-then-forward race (see the report), which is not what
// these tests are about.
func readAll(ctx context.Context, rd *reader.Reader, id string, end uint64) ([]format.Record, error) {
	var out []format.Record
	next := uint64(0)
	for next < end {
		res, err := rd.Read(ctx, reader.Stream{ID: id, Basin: basin}, reader.AtSeq(next), reader.Limits{Count: int(end - next)}, nil)
		if err != nil {
			return out, err
		}
		if len(res.Records) == 0 {
			return out, fmt.Errorf("read %s from %d: no records (stop %s) below %d", id, next, res.Stop, end)
		}
		out = append(out, res.Records...)
		next = res.Next
	}
	return out, nil
}

// sameRecords compares got with the first len(want) records... exactly:
// seq, timestamp, headers and body; got may run on past want.
func sameRecords(got, want []format.Record) error {
	if len(got) < len(want) {
		return fmt.Errorf("%w: read %d records, want at least %d", errMismatch, len(got), len(want))
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.SeqNum != w.SeqNum || g.Timestamp != w.Timestamp || !bytes.Equal(g.Body, w.Body) || len(g.Headers) != len(w.Headers) {
			return fmt.Errorf("%w: record %d: got seq %d ts %d body %q, want seq %d ts %d body %q",
				errMismatch, i, g.SeqNum, g.Timestamp, g.Body, w.SeqNum, w.Timestamp, w.Body)
		}
		for j := range w.Headers {
			if !bytes.Equal(g.Headers[j].Name, w.Headers[j].Name) || !bytes.Equal(g.Headers[j].Value, w.Headers[j].Value) {
				return fmt.Errorf("%w: record %d header %d", errMismatch, i, j)
			}
		}
	}
	return nil
}

// checkReads reads every stream and compares with what was acknowledged.
func (e *env) checkReads(rd *reader.Reader) {
	e.t.Helper()
	for _, id := range e.ids() {
		e.mu.Lock()
		want := e.acked[id]
		e.mu.Unlock()
		got, err := readAll(context.Background(), rd, id, uint64(len(want)))
		if err != nil {
			e.t.Fatalf("read %s: %v", id, err)
		}
		if err := sameRecords(got, want); err != nil {
			e.t.Fatalf("stream %s: %v", id, err)
		}
	}
}

// readers reads every stream over and over from concurrent goroutines,
// with fresh readers (cold caches) now and then, until stop is called; it
// returns the first mismatch or read error.
func (e *env) readers(n int) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var mu sync.Mutex
	var first error
	var reads int
	for g := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			rd := e.rd
			for ctx.Err() == nil {
				if rng.IntN(4) == 0 {
					var err error
					if rd, err = reader.New(reader.Config{Meta: e.meta, Objects: e.objs, SettledBucket: settledB, Logger: quietLog()}); err != nil {
						panic(err)
					}
				}
				ids := e.ids()
				id := ids[rng.IntN(len(ids))]
				e.mu.Lock()
				want := slices.Clone(e.acked[id])
				e.mu.Unlock()
				end, err := frontierOf(ctx, e.meta, id)
				if err != nil {
					return
				}
				want = want[:min(uint64(len(want)), end)]
				got, err := readAll(ctx, rd, id, uint64(len(want)))
				if ctx.Err() != nil {
					return
				}
				if err == nil {
					err = sameRecords(got, want)
				}
				mu.Lock()
				reads++
				if err != nil && first == nil {
					first = fmt.Errorf("concurrent read of %s: %w", id, err)
				}
				mu.Unlock()
			}
		})
	}
	e.t.Cleanup(func() { cancel(); wg.Wait() }) // before the stores close
	return func() error {
		cancel()
		wg.Wait()
		if first == nil && reads == 0 {
			return errors.New("no concurrent read completed")
		}
		return first
	}
}

// settleAll plans at now and runs every settle job it plans, then (with
// trim) every trim-check: one auditor tick.
func settleAll(ctx context.Context, st *settle.Stores, now time.Time, trim bool) ([]settle.Report, error) {
	st.Now = func() time.Time { return now }
	jobs, err := plan.Plan(ctx, st, now)
	if err != nil {
		return nil, err
	}
	var reps []settle.Report
	for _, j := range jobs {
		if j.Kind != settle.KindSettle {
			continue
		}
		rep, err := settle.Settle(ctx, st, j)
		reps = append(reps, rep)
		if err != nil {
			return reps, err
		}
	}
	for _, j := range jobs {
		if trim && j.Kind == settle.KindTrim {
			if _, err := reclaim.TrimCheck(ctx, st, j.Chain, now); err != nil {
				return reps, err
			}
		}
	}
	return reps, nil
}

// doJob runs a planned job of either kind, as auditjob.Do does: a settle
// job under its era's claim, a trim job's trim-check at the stores' clock.
func doJob(ctx context.Context, st *settle.Stores, j settle.Job) error {
	if j.Kind == settle.KindTrim {
		_, err := reclaim.TrimCheck(ctx, st, j.Chain, st.Clock())
		return err
	}
	return settle.Do(ctx, st, j)
}

// row is one stored ref row.
type row struct {
	ver int64
	ref meta.Ref
}

func rowsOf(t testing.TB, ms meta.Store, id string) []row {
	t.Helper()
	var out []row
	q := meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~"}
	for {
		pg, err := ms.Query(context.Background(), q)
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range pg.Items {
			var r meta.Ref
			if err := meta.Decode(it.Val, &r); err != nil {
				t.Fatal(err)
			}
			out = append(out, row{it.Ver, r})
		}
		if pg.Next == "" {
			return out
		}
		q.PageToken = pg.Next
	}
}

// transit maps each block's first seq to its bytes, read from the
// stream's span refs' extents: what a settle must copy byte for byte.
type transit map[uint64][]byte

func captureTransit(t testing.TB, e *env) map[string]transit {
	t.Helper()
	ctx := context.Background()
	out := map[string]transit{}
	for _, id := range e.ids() {
		tr := transit{}
		for _, r := range rowsOf(t, e.meta, id) {
			if r.ref.Span == nil {
				continue
			}
			for _, sl := range r.ref.Span.Slots {
				key := chain.SlotKey(r.ref.Span.Star, r.ref.Span.Class, r.ref.Span.Epoch, sl.Slot)
				var b []byte
				var err error
				for _, z := range append(slices.Clone(e.cfg.Buckets), "") {
					if z == "" {
						t.Fatalf("extent of %s slot %d unreadable: %v", id, sl.Slot, err)
					}
					if b, err = e.objs.Bucket(z).Get(ctx, key, int64(sl.Offset), int64(sl.Length)); err == nil {
						break
					}
				}
				for len(b) > 0 {
					info, err := format.PeekBlock(b)
					if err != nil {
						t.Fatal(err)
					}
					tr[info.FirstSeq] = b[:info.Length]
					b = b[info.Length:]
				}
			}
		}
		out[id] = tr
	}
	return out
}

// checkSettled checks every stream's rows and objects at rest: rows tile
// [first, end) without overlap; each catalog row's object exists with the
// footer the row describes and blocks equal, byte for byte, to the transit
// blocks of the same seqs; every catalog row but the greatest names an
// object at or above the output cap.
func checkSettled(t testing.TB, e *env, tr map[string]transit) (objects, revised int) {
	t.Helper()
	ctx := context.Background()
	outputCap := e.st.Config.WithDefaults().OutputCap
	sb := e.objs.Bucket(settledB)
	for _, id := range e.ids() {
		rows := rowsOf(t, e.meta, id)
		var next uint64
		lastCat := -1
		for i, r := range rows {
			if i > 0 && r.ref.FirstSeq != next {
				t.Fatalf("stream %s: row at %d after end %d (gap or overlap)", id, r.ref.FirstSeq, next)
			}
			next = r.ref.EndSeq
			s := r.ref.Settled
			if s == nil {
				continue
			}
			if lastCat >= 0 && rows[lastCat].ref.Settled.Bytes < outputCap {
				t.Fatalf("stream %s: catalog row at %d names a sub-cap object (%d bytes) that is not the last", id, rows[lastCat].ref.FirstSeq, rows[lastCat].ref.Settled.Bytes)
			}
			if lastCat != i-1 && lastCat >= 0 {
				t.Fatalf("stream %s: span ref between catalog rows", id)
			}
			lastCat = i
			objects++
			if s.Revision > 0 {
				revised++
			}
			key := format.SettledKey(basin, id, s.Epoch, s.FirstSeq, s.Revision)
			obj, err := sb.Get(ctx, key, 0, -1)
			if err != nil {
				t.Fatalf("stream %s: object %s: %v", id, key, err)
			}
			f, err := format.VerifySettledObject(obj)
			if err != nil {
				t.Fatalf("stream %s: object %s: %v", id, key, err)
			}
			if uint64(len(obj)) != s.Bytes || f.StreamID != id || f.FirstSeq != r.ref.FirstSeq || f.EndSeq != r.ref.EndSeq || s.FirstSeq != r.ref.FirstSeq {
				t.Fatalf("stream %s: object %s (%d bytes, [%d,%d)) does not match its row %+v", id, key, len(obj), f.FirstSeq, f.EndSeq, r.ref)
			}
			for _, en := range f.Entries {
				want, ok := tr[id][en.FirstSeq]
				if !ok {
					continue // settled before the transit capture
				}
				if !bytes.Equal(obj[en.Offset:en.Offset+uint64(en.Length)], want) {
					t.Fatalf("stream %s: object %s block at seq %d differs from its transit block", id, key, en.FirstSeq)
				}
			}
		}
		if want := uint64(len(e.acked[id])); next != want {
			t.Fatalf("stream %s: rows end at %d, acknowledged %d", id, next, want)
		}
	}
	return objects, revised
}

// slotsLeft counts slot objects left in the chain's buckets.
func slotsLeft(t testing.TB, e *env) int {
	t.Helper()
	n := 0
	for _, b := range e.cfg.Buckets {
		for info, err := range e.objs.Bucket(b).List(context.Background(), "chains/") {
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(info.Key, "chains/") {
				n++
			}
		}
	}
	return n
}

// liveMarkers lists the chain's markers.
func liveMarkers(t testing.TB, e *env) []meta.Marker {
	t.Helper()
	pg, err := e.meta.Query(context.Background(), meta.Query{PK: meta.ChainPK(e.cfg.Star, e.cfg.Class), From: meta.MarkerPrefix, To: meta.MarkerPrefix + "~"})
	if err != nil {
		t.Fatal(err)
	}
	var out []meta.Marker
	for _, it := range pg.Items {
		var m meta.Marker
		if err := meta.Decode(it.Val, &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}
