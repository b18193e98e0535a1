package reader

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/sqlite"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/mem"
)

const (
	testStar    = "star-a"
	testBasin   = "basin-a"
	stdBucket   = "std-bucket"
	settledBkt  = "std-bucket"
	tsBase      = 1_000_000
	tsStepEvery = 3 // every third record advances the clock, so timestamps repeat
)

var expressBuckets = []string{"x-az1", "x-az2", "x-az3"}

// countingStore counts GETs per bucket and lets a test act just before a
// GET is served.
type countingStore struct {
	objstore.Store
	mu    sync.Mutex
	gets  map[string]int
	onGet func(bucket, key string)
	// block, when set, runs before a GET is served; its error fails it.
	block func(ctx context.Context, bucket, key string, off int64) error
}

func (s *countingStore) Bucket(name string) objstore.Bucket {
	return &countingBucket{Bucket: s.Store.Bucket(name), s: s}
}

func (s *countingStore) count(bucket string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gets[bucket]
}

func (s *countingStore) total() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.gets {
		n += v
	}
	return n
}

type countingBucket struct {
	objstore.Bucket
	s *countingStore
}

func (b *countingBucket) Get(ctx context.Context, key string, off, n int64) ([]byte, error) {
	b.s.mu.Lock()
	b.s.gets[b.Name()]++
	hook, block := b.s.onGet, b.s.block
	b.s.mu.Unlock()
	if hook != nil {
		hook(b.Name(), key)
	}
	if block != nil {
		if err := block(ctx, b.Name(), key, off); err != nil {
			return nil, err
		}
	}
	return b.Bucket.Get(ctx, key, off, n)
}

// fixture is a star's durable state for one test: a mem object store, a
// sqlite metastore, and the truth (every record appended) per stream.
type fixture struct {
	t     tb
	ctx   context.Context
	mem   *mem.Store
	objs  *countingStore
	meta  *sqlite.Store
	reg   *prometheus.Registry
	slots map[string]uint64 // next slot per star/class/epoch
	truth map[string][]format.Record
	prev  map[string]absorb.StreamTotals
	body  int // body bytes per record
}

// tb is what the fixture needs of a *testing.T or a *rapid.T.
type tb interface {
	Helper()
	Error(args ...any)
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

func newFixture(t testing.TB) *fixture {
	t.Helper()
	return newFixtureIn(t, t.TempDir())
}

// newFixtureIn keeps the metastore file in dir.
func newFixtureIn(t tb, dir string) *fixture {
	t.Helper()
	ctx := context.Background()
	ms, err := sqlite.Open(ctx, filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	m, err := mem.New(append([]string{stdBucket}, expressBuckets...)...)
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, ctx: ctx, mem: m, meta: ms, reg: prometheus.NewRegistry(),
		objs:  &countingStore{Store: m, gets: map[string]int{}},
		slots: map[string]uint64{}, truth: map[string][]format.Record{},
		prev: map[string]absorb.StreamTotals{}, body: 40}
	return f
}

// reader returns a Reader over the fixture with cfg's tunables.
func (f *fixture) reader(cfg Config) *Reader {
	f.t.Helper()
	cfg.Meta, cfg.Objects, cfg.SettledBucket = f.meta, f.objs, settledBkt
	if cfg.Registerer == nil {
		cfg.Registerer = f.reg
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	r, err := New(cfg)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// epoch writes an epoch record with the bucket set.
func (f *fixture) epoch(class meta.Class, epoch uint64, buckets ...string) {
	f.t.Helper()
	k := meta.EpochKey(testStar, class, epoch)
	e := meta.Epoch{Epoch: epoch, Owner: "inc-1", Params: meta.EpochParams{Buckets: buckets, W: max(1, len(buckets)-1), Window: 4, Nonce: "00"}}
	if _, err := f.meta.Put(f.ctx, k.PK, k.SK, meta.Encode(e), meta.IfAbsent()); err != nil {
		f.t.Fatal(err)
	}
}

// recs appends n records to the truth of stream and returns them.
func (f *fixture) recs(stream string, n int) []format.Record {
	have := f.truth[stream]
	out := make([]format.Record, n)
	for i := range out {
		seq := uint64(len(have) + i)
		body := bytes.Repeat([]byte{byte('a' + seq%26)}, f.body)
		copy(body, fmt.Sprintf("%s/%d", stream, seq))
		r := format.Record{SeqNum: seq, Timestamp: tsBase + seq/tsStepEvery*10, Body: body}
		if seq%5 == 0 {
			r.Headers = []format.Header{{Name: []byte("h"), Value: []byte(fmt.Sprint(seq))}}
		}
		out[i] = r
	}
	f.truth[stream] = append(have, out...)
	return out
}

// batch is a batch of the next n records of stream.
func (f *fixture) batch(stream string, n int) format.Batch {
	return format.Batch{StreamID: stream, Records: f.recs(stream, n)}
}

// flight writes one flight as the next slot of the epoch into buckets (the
// whole set when none are named) and returns it as the absorb sees it.
func (f *fixture) flight(class meta.Class, epoch uint64, buckets []string, batches ...format.Batch) absorb.Slot {
	f.t.Helper()
	ck := fmt.Sprintf("%s/%d", class, epoch)
	slot := f.slots[ck]
	f.slots[ck]++
	obj, err := format.EncodeBundle(epoch, slot, format.Nonce{1}, batches)
	if err != nil {
		f.t.Fatal(err)
	}
	_, footer, err := format.DecodeBundle(obj)
	if err != nil {
		f.t.Fatal(err)
	}
	key := chain.SlotKey(testStar, class, epoch, slot)
	for _, b := range buckets {
		if _, err := f.mem.Bucket(b).PutIfAbsent(f.ctx, key, obj); err != nil {
			f.t.Fatal(err)
		}
	}
	return absorb.Slot{Slot: slot, Extents: footer.Extents}
}

// absorb writes the span refs of one absorb pass over slots, as the live
// absorb would (absorb.Plan computes them).
func (f *fixture) absorb(class meta.Class, epoch uint64, slots ...absorb.Slot) []absorb.RefWrite {
	f.t.Helper()
	p, err := absorb.Plan(testStar, class, epoch, slots, f.prev, absorb.Ripening{Trigger: 8 << 20, Linger: time.Minute, AgeCap: time.Hour}, time.Unix(1000, 0))
	if err != nil {
		f.t.Fatal(err)
	}
	for _, rw := range p.Refs {
		f.putRef(rw.StreamID, rw.Ref)
	}
	for id, tot := range p.Totals {
		f.prev[id] = tot
	}
	return p.Refs
}

func (f *fixture) putRef(stream string, ref meta.Ref) {
	f.t.Helper()
	k := meta.RefKey(stream, ref.FirstSeq)
	if _, err := f.meta.Put(f.ctx, k.PK, k.SK, meta.Encode(ref), meta.Always()); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) deleteRef(stream string, firstSeq uint64) {
	f.t.Helper()
	k := meta.RefKey(stream, firstSeq)
	if err := f.meta.Delete(f.ctx, k.PK, k.SK, meta.Always()); err != nil {
		f.t.Fatal(err)
	}
}

// settled writes a settled object holding the truth's records [first, end)
// of stream in blocks of per records, and returns the catalog row for it
// (not written).
func (f *fixture) settled(stream string, epoch, first, end uint64, per int, rev uint64) meta.Ref {
	f.t.Helper()
	all := f.truth[stream][first:end]
	var obj []byte
	var infos []format.BlockInfo
	for i := 0; i < len(all); i += per {
		blk := format.AppendBlock(nil, all[i:min(i+per, len(all))])
		info, err := format.PeekBlock(blk)
		if err != nil {
			f.t.Fatal(err)
		}
		infos = append(infos, info)
		obj = append(obj, blk...)
	}
	sf, err := format.NewSettledFooter(stream, infos)
	if err != nil {
		f.t.Fatal(err)
	}
	obj = append(obj, format.EncodeSettledFooter(sf)...)
	if _, err := format.VerifySettledObject(obj); err != nil {
		f.t.Fatal(err)
	}
	key := SettledKey(testBasin, stream, epoch, first, rev)
	if _, err := f.mem.Bucket(settledBkt).PutIfAbsent(f.ctx, key, obj); err != nil {
		f.t.Fatal(err)
	}
	return meta.Ref{FirstSeq: first, EndSeq: end, MinTimestamp: all[0].Timestamp, MaxTimestamp: all[len(all)-1].Timestamp,
		Settled: &meta.Settled{Epoch: epoch, FirstSeq: first, Revision: rev, Bytes: uint64(len(obj))}}
}

// memTail is a tail window over the truth's records [first, end) of one
// stream, behaving like the flight index: records in seq order, first is
// the lowest it holds.
type memTail struct {
	mu     sync.Mutex
	stream string
	recs   []format.Record
}

func (m *memTail) Read(streamID string, from uint64, max int) ([]TailExtent, uint64, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if streamID != m.stream || len(m.recs) == 0 {
		return nil, 0, false
	}
	first := m.recs[0].SeqNum
	var out []format.Record
	for _, r := range m.recs {
		if r.SeqNum >= from && len(out) < max {
			out = append(out, r)
		}
	}
	if len(out) == 0 {
		return nil, first, true
	}
	return []TailExtent{{Records: out}}, first, true
}

// drop removes the records below seq (the absorb covered them).
func (m *memTail) drop(seq uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	i := 0
	for i < len(m.recs) && m.recs[i].SeqNum < seq {
		i++
	}
	m.recs = m.recs[i:]
}

func (f *fixture) tail(stream string, first uint64) *Tail {
	recs := f.truth[stream][first:]
	return &Tail{Window: &memTail{stream: stream, recs: recs}, End: uint64(len(f.truth[stream]))}
}

func (f *fixture) read(r *Reader, stream string, start Start, lim Limits, tail *Tail) Result {
	f.t.Helper()
	res, err := r.Read(f.ctx, Stream{ID: stream, Basin: testBasin}, start, lim, tail)
	if err != nil {
		f.t.Fatalf("read %s from %s: %v", stream, start, err)
	}
	return res
}

// want checks that got is exactly the truth's records [first, end).
func (f *fixture) want(stream string, got []format.Record, first, end uint64) {
	f.t.Helper()
	if uint64(len(got)) != end-first {
		f.t.Fatalf("%s: got %d records (%s), want [%d,%d)", stream, len(got), seqRange(got), first, end)
	}
	for i, g := range got {
		w := f.truth[stream][first+uint64(i)]
		if g.SeqNum != w.SeqNum || g.Timestamp != w.Timestamp || !bytes.Equal(g.Body, w.Body) || len(g.Headers) != len(w.Headers) {
			f.t.Fatalf("%s: record %d: got seq %d ts %d body %q, want seq %d ts %d body %q",
				stream, i, g.SeqNum, g.Timestamp, g.Body, w.SeqNum, w.Timestamp, w.Body)
		}
		for j := range g.Headers {
			if !bytes.Equal(g.Headers[j].Name, w.Headers[j].Name) || !bytes.Equal(g.Headers[j].Value, w.Headers[j].Value) {
				f.t.Fatalf("%s: record %d header %d differs", stream, g.SeqNum, j)
			}
		}
	}
}

func seqRange(recs []format.Record) string {
	if len(recs) == 0 {
		return "none"
	}
	return fmt.Sprintf("%d..%d", recs[0].SeqNum, recs[len(recs)-1].SeqNum)
}

// counter reads a counter of the fixture's registry (labels as k=v pairs).
func (f *fixture) counter(name string, labels ...string) float64 {
	f.t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		f.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				ok := false
				for _, lp := range m.GetLabel() {
					if lp.GetName() == labels[i] && lp.GetValue() == labels[i+1] {
						ok = true
					}
				}
				if !ok {
					continue next
				}
			}
			return m.GetCounter().GetValue()
		}
	}
	f.t.Fatalf("no metric %s%v", name, labels)
	return 0
}

// noReg is a throwaway registry for a second Reader in one test.
func noReg() *prometheus.Registry { return prometheus.NewRegistry() }
