package reader

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/sqlite"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/fs"
)

// The catch-up benchmark (make bench-read) reads whole streams of 1 KiB
// records from seq 0 the way a read session does (Cursor: a plain
// Read, then a read-ahead from the first full batch on), encoding every
// batch as an S2S frame or an SSE event into io.Discard. It measures the
// star's side of a catch-up read minus HTTP: the metastore, the object
// store, decoding, the API conversion and the encoding.
var (
	catchupBytes = flag.Int64("catchup.bytes", 64<<20, "bytes of records per stream of the catch-up benchmark")
	catchupDir   = flag.String("catchup.dir", "", "directory holding the catch-up benchmark's streams (built if missing; default: a temp dir, removed)")
)

const (
	catchupBody      = 1024 - 8 // 1 KiB metered
	catchupFlight    = 1000     // records per transit flight (~1 MiB, TargetFlightBytes)
	catchupBlock     = 256      // records per settled block
	catchupObject    = 256 << 20
	catchupStd       = "standard"
	catchupExp       = "express-a"
	catchupBasin     = "bench"
	catchupSettled   = "settled"
	catchupTransit   = "transit-std"
	catchupTransitEx = "transit-exp"
)

type catchupEnv struct {
	ms   *sqlite.Store
	objs *fs.Store
	end  uint64 // records per stream
}

var (
	catchupOnce sync.Once
	catchup     *catchupEnv
	catchupErr  error
)

// catchupStreams builds (or reopens) three streams of catchup.bytes each:
// one in settled objects of 256 MiB, one in Standard transit bundles, one
// in Express transit bundles, every bundle one ~1 MiB flight with its span
// ref.
func catchupStreams(b *testing.B) *catchupEnv {
	catchupOnce.Do(func() { catchup, catchupErr = buildCatchup() })
	if catchupErr != nil {
		b.Fatal(catchupErr)
	}
	return catchup
}

func buildCatchup() (*catchupEnv, error) {
	ctx := context.Background()
	dir := *catchupDir
	if dir == "" {
		d, err := os.MkdirTemp("", "catchup-bench-")
		if err != nil {
			return nil, err
		}
		dir = d
		catchupCleanup = func() { os.RemoveAll(d) }
	}
	n := uint64(*catchupBytes / 1024)
	n -= n % catchupFlight
	done := filepath.Join(dir, fmt.Sprintf("built-%d", n))
	ms, err := sqlite.Open(ctx, filepath.Join(dir, "meta.db"))
	if err != nil {
		return nil, err
	}
	objs, err := fs.New(filepath.Join(dir, "objects"))
	if err != nil {
		return nil, err
	}
	e := &catchupEnv{ms: ms, objs: objs, end: n}
	if _, err := os.Stat(done); err == nil {
		return e, nil
	}
	for _, bk := range []string{catchupStd, catchupExp} {
		if err := objs.CreateBucket(bk); err != nil {
			return nil, err
		}
	}
	recs := make([]format.Record, catchupFlight)
	// Printable text: what a JSON reader is served as is (a body of
	// control bytes would be escaped six-fold).
	body := make([]byte, catchupBody)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	fill := func(first uint64) []format.Record {
		for i := range recs {
			seq := first + uint64(i)
			recs[i] = format.Record{SeqNum: seq, Timestamp: 1_000_000 + seq/10, Body: body}
		}
		return recs
	}
	put := func(k meta.Key, v any) error {
		_, err := ms.Put(ctx, k.PK, k.SK, meta.Encode(v), meta.Always())
		return err
	}
	// Settled: objects of catchupObject bytes of blocks.
	var obj []byte
	var infos []format.BlockInfo
	objFirst := uint64(0)
	flushObj := func(end uint64) error {
		f, err := format.NewSettledFooter(catchupSettled, infos)
		if err != nil {
			return err
		}
		obj = append(obj, format.EncodeSettledFooter(f)...)
		key := SettledKey(catchupBasin, catchupSettled, 1, objFirst, 0)
		if _, err := objs.Bucket(catchupStd).PutIfAbsent(ctx, key, obj); err != nil {
			return err
		}
		ref := meta.Ref{FirstSeq: objFirst, EndSeq: end, MinTimestamp: 1_000_000 + objFirst/10, MaxTimestamp: 1_000_000 + (end-1)/10,
			Settled: &meta.Settled{Epoch: 1, FirstSeq: objFirst, Revision: 0, Bytes: uint64(len(obj))}}
		obj, infos, objFirst = obj[:0], nil, end
		return put(meta.RefKey(catchupSettled, ref.FirstSeq), ref)
	}
	for seq := uint64(0); seq < n; seq += catchupFlight {
		rs := fill(seq)
		for i := 0; i < len(rs); i += catchupBlock {
			start := len(obj)
			obj = format.AppendBlock(obj, rs[i:min(i+catchupBlock, len(rs))])
			info, err := format.PeekBlock(obj[start:])
			if err != nil {
				return nil, err
			}
			infos = append(infos, info)
		}
		if len(obj) >= catchupObject || seq+catchupFlight == n {
			if err := flushObj(seq + catchupFlight); err != nil {
				return nil, err
			}
		}
	}
	// Transit: one flight per slot, one absorb pass per slot.
	for _, tr := range []struct {
		id     string
		class  meta.Class
		bucket string
	}{{catchupTransit, meta.Standard, catchupStd}, {catchupTransitEx, meta.Express, catchupExp}} {
		ep := meta.Epoch{Epoch: 1, Owner: "bench", Params: meta.EpochParams{Buckets: []string{tr.bucket}, W: 1, Window: 4, Nonce: "00"}}
		if err := put(meta.EpochKey(testStar, tr.class, 1), ep); err != nil {
			return nil, err
		}
		prev := map[string]absorb.StreamTotals{}
		for slot := uint64(0); slot*catchupFlight < n; slot++ {
			o, err := format.EncodeBundle(1, slot, format.Nonce{1}, []format.Batch{{StreamID: tr.id, Records: fill(slot * catchupFlight)}})
			if err != nil {
				return nil, err
			}
			_, footer, err := format.DecodeBundle(o)
			if err != nil {
				return nil, err
			}
			if _, err := objs.Bucket(tr.bucket).PutIfAbsent(ctx, chain.SlotKey(testStar, tr.class, 1, slot), o); err != nil {
				return nil, err
			}
			p, err := absorb.Plan(testStar, tr.class, 1, []absorb.Slot{{Slot: slot, Extents: footer.Extents}}, prev,
				absorb.Ripening{Trigger: 8 << 20, Linger: time.Minute, AgeCap: time.Hour}, time.Unix(1000, 0))
			if err != nil {
				return nil, err
			}
			for _, rw := range p.Refs {
				if err := put(meta.RefKey(rw.StreamID, rw.Ref.FirstSeq), rw.Ref); err != nil {
					return nil, err
				}
			}
			for id, t := range p.Totals {
				prev[id] = t
			}
		}
	}
	if err := os.WriteFile(done, nil, 0o644); err != nil {
		return nil, err
	}
	return e, nil
}

var catchupCleanup = func() {}

func TestMain(m *testing.M) {
	flag.Parse()
	code := m.Run()
	catchupCleanup()
	os.Exit(code)
}

// cpuTime is the process's user and system CPU so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkCatchUp reads each stream whole from seq 0, per store (the
// directory store; the same behind S3-like GET latency: log-normal p50 30
// / p99 100 ms on the Standard bucket, 5 / 20 ms on the Express one), with
// and without read-ahead, encoded as S2S (and SSE, raw JSON, for settled
// objects on the directory store, raw and base64). Metrics: MiB/s of metered bytes,
// CPU-s/GiB and cores (the process's CPU over the read), first-batch ms.
func BenchmarkCatchUp(b *testing.B) {
	env := catchupStreams(b)
	type store struct {
		name string
		objs objstore.Store
	}
	lat := faults.Wrap(env.objs, faults.WithSeed(1))
	lat.SetLatency(catchupStd, faults.LogNormal(30*time.Millisecond, 100*time.Millisecond))
	lat.SetLatency(catchupExp, faults.LogNormal(5*time.Millisecond, 20*time.Millisecond))
	stores := []store{{"dir", env.objs}, {"s3lat", lat}}
	for _, st := range stores {
		for _, id := range []string{catchupSettled, catchupTransit, catchupTransitEx} {
			encs := []string{"s2s"}
			if st.name == "dir" && id == catchupSettled {
				encs = append(encs, "sse", "sse-b64")
			}
			for _, enc := range encs {
				for _, pf := range []bool{true, false} {
					name := fmt.Sprintf("store=%s/from=%s/enc=%s/prefetch=%v", st.name, id, enc, pf)
					b.Run(name, func(b *testing.B) {
						budget := int64(0)
						if !pf {
							budget = -1
						}
						for b.Loop() {
							catchupRead(b, env, st.objs, id, enc, budget)
						}
					})
				}
			}
		}
	}
}

func catchupRead(b *testing.B, env *catchupEnv, objs objstore.Store, id, enc string, budget int64) {
	ctx := context.Background()
	r, err := New(Config{Meta: env.ms, Objects: objs, SettledBucket: catchupStd, PrefetchBudget: budget,
		Registerer: noReg(), Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	stream := Stream{ID: id, Basin: catchupBasin}
	fw := api.NewFrameWriter(io.Discard, api.CompressionNone)
	sw := api.NewSSEWriter(io.Discard, api.FormatRaw)
	if enc == "sse-b64" {
		sw = api.NewSSEWriter(io.Discard, api.FormatBase64)
	}
	var sid api.LastEventID
	var buf []byte
	var pf *Prefetch
	defer func() { pf.Close() }()
	t0, c0 := time.Now(), cpuTime()
	var first time.Duration
	var bytes int64
	for next := uint64(0); next < env.end; {
		var res Result
		if pf != nil {
			res, err = pf.Read(ctx, AtSeq(next), Limits{}, nil)
		} else {
			res, err = r.Read(ctx, stream, AtSeq(next), Limits{}, nil)
		}
		if err != nil {
			b.Fatal(err)
		}
		if first == 0 {
			first = time.Since(t0)
		}
		if res.Stop == StopBatch && pf == nil {
			pf = r.NewPrefetch(stream)
		}
		if len(res.Records) == 0 {
			b.Fatalf("no records at %d (stop %s)", next, res.Stop)
		}
		batch := api.ReadBatch{Records: apiRecords(res.Records)}
		switch enc {
		case "s2s":
			buf = api.AppendReadBatchProto(buf[:0], &batch)
			err = fw.WriteMessage(buf)
		case "sse", "sse-b64":
			sid = sid.Next(&batch)
			err = sw.Batch(&batch, sid)
		}
		if err != nil {
			b.Fatal(err)
		}
		bytes += int64(res.Bytes)
		next = res.Next
	}
	wall, cpu := time.Since(t0), cpuTime()-c0
	b.SetBytes(bytes)
	b.ReportMetric(float64(bytes)/(1<<20)/wall.Seconds(), "MiB/s")
	b.ReportMetric(cpu.Seconds()/(float64(bytes)/(1<<30)), "CPU-s/GiB")
	b.ReportMetric(cpu.Seconds()/wall.Seconds(), "cores")
	b.ReportMetric(float64(first.Microseconds())/1000, "first-ms")
}
