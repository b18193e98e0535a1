package settle_test

import (
	"context"
	"fmt"
	"slices"
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
	"github.com/starlog/starlog/star/loglet"
)

// synth is one era of genuine state built fast: bundles rendered and
// committed by the chain writer, refs and markers written by the absorber,
// without the loglet's timers.
type synth struct {
	meta  *mfaults.Store
	objs  *faults.Store
	st    *settle.Stores
	job   settle.Job
	bytes int64 // block bytes in the era
}

// buildSynth writes streams × perStream bytes in batches of batch bytes,
// round-robin over the streams, into flights of flight bytes on an express
// chain (K=3, W=2), absorbed passSlots slots per pass.
func buildSynth(tb testing.TB, streams, perStream, batch, flight, passSlots int) *synth {
	tb.Helper()
	ctx := context.Background()
	m, err := mem.New(append(slices.Clone(zones), settledB)...)
	if err != nil {
		tb.Fatal(err)
	}
	s := &synth{meta: mfaults.New(testsvc.SQLite(tb), 1), objs: faults.Wrap(m, faults.WithSeed(1))}
	cfg := settle.Config{Workers: 8, ScratchDir: tb.TempDir()}
	s.st = &settle.Stores{Meta: s.meta, Objects: s.objs, SettledBucket: settledB, Streams: settle.MetaStreams{Meta: s.meta}, Config: cfg, Logger: quietLog()}
	c := chain.New("star1", meta.Express, "star1:1", s.meta, s.objs)
	rec, err := c.Mint(ctx, meta.EpochParams{Buckets: zones, W: 2, Window: 8})
	if err != nil {
		tb.Fatal(err)
	}
	w, err := c.Writer(rec, chain.WriterOptions{})
	if err != nil {
		tb.Fatal(err)
	}
	defer w.Close()
	abs := &absorb.Absorber{Star: "star1", Class: meta.Express, Meta: s.meta, Rip: cfg.WithDefaults().Ripening(meta.Express), UpdateEpoch: c.UpdateEpoch, Concurrency: 32}
	ids := make([]string, streams)
	var rows []meta.Item
	for i := range ids {
		ids[i] = fmt.Sprintf("s%05d", i)
		k := meta.StreamMetaKey(ids[i])
		rows = append(rows, meta.Item{PK: k.PK, SK: k.SK, Val: meta.Encode(meta.StreamMeta{Basin: basin, Name: ids[i], Class: meta.Express})})
	}
	for i := 0; i < len(rows); i += 500 {
		if err := s.meta.BatchPut(ctx, rows[i:min(i+500, len(rows))]); err != nil {
			tb.Fatal(err)
		}
	}
	seqs := make([]uint64, streams)
	left := make([]int, streams)
	for i := range left {
		left[i] = perStream
	}
	payload := make([]byte, batch)
	for i := range payload {
		payload[i] = byte(i * 31)
	}
	var slot uint64
	var pending []absorb.Slot
	var batches []format.Batch
	var inFlight int
	ts := uint64(time.Now().UnixMilli())
	flush := func(force bool) {
		if len(batches) > 0 && (force || inFlight >= flight) {
			body, err := w.Render(slot, batches)
			if err != nil {
				tb.Fatal(err)
			}
			if err := w.Commit(ctx, slot, body); err != nil {
				tb.Fatal(err)
			}
			_, f, err := format.DecodeBundle(body)
			if err != nil {
				tb.Fatal(err)
			}
			pending = append(pending, absorb.Slot{Slot: slot, Extents: f.Extents})
			slot++
			batches, inFlight = nil, 0
		}
		for len(pending) > 0 && (force || len(pending) >= passSlots) {
			n, err := abs.Pass(ctx, rec.Epoch, pending[:min(passSlots, len(pending))])
			if err != nil {
				tb.Fatal(err)
			}
			pending = pending[n:]
		}
	}
	for more := true; more; {
		more = false
		for i, id := range ids {
			if left[i] <= 0 {
				continue
			}
			more = true
			n := min(batch, left[i])
			recs := []format.Record{{SeqNum: seqs[i], Timestamp: ts, Body: payload[:n-8]}}
			seqs[i]++
			left[i] -= n
			batches = append(batches, format.Batch{StreamID: id, Records: recs})
			inFlight += n
			s.bytes += int64(n)
			flush(false)
		}
	}
	flush(true)
	jobs, err := plan.Plan(ctx, s.st, time.Now().Add(time.Hour))
	if err != nil {
		tb.Fatal(err)
	}
	if len(jobs) != 1 || jobs[0].Kind != settle.KindSettle {
		tb.Fatalf("want one era, planned %v", jobs)
	}
	s.job = jobs[0]
	s.st.Now = func() time.Time { return time.Now().Add(time.Hour) }
	return s
}

// BenchmarkSettle times one group-settle job over one era of genuine
// bundles, refs and markers (mem object store, SQLite metastore), and
// reports the requests it costs per GiB settled.
func BenchmarkSettle(b *testing.B) {
	for _, c := range []struct {
		name                             string
		streams, perStream, batch, fl, p int
	}{
		{"streams=1/flight=4MiB", 1, 64 << 20, 256 << 10, 4 << 20, 4},
		{"streams=1/flight=16MiB", 1, 64 << 20, 256 << 10, 16 << 20, 1},
		{"streams=100", 100, 640 << 10, 16 << 10, 4 << 20, 4},
		{"streams=10000", 10000, 4 << 10, 4 << 10, 4 << 20, 4},
	} {
		b.Run(c.name, func(b *testing.B) {
			var objReqs, metaWrites, settled, copied float64
			for range b.N {
				b.StopTimer()
				s := buildSynth(b, c.streams, c.perStream, c.batch, c.fl, c.p)
				s.objs.ResetCounters()
				s.meta.ResetCounts()
				b.SetBytes(s.bytes)
				b.StartTimer()
				rep, err := settle.Settle(context.Background(), s.st, s.job)
				if err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				if rep.Settled != c.streams {
					b.Fatalf("settled %d of %d streams: %+v", rep.Settled, c.streams, rep)
				}
				objReqs += float64(s.objs.Counters().Total().Requests)
				metaWrites += float64(s.meta.Counts().Writes())
				settled += float64(s.bytes)
				copied += float64(rep.Copied)
			}
			gib := settled / (1 << 30)
			b.ReportMetric(objReqs/gib, "objreq/GiB")
			b.ReportMetric(metaWrites/gib, "metawrites/GiB")
			b.ReportMetric(copied/settled*100, "%copied")
		})
	}
}

// Prices assumed for the cost model (AWS us-east-1 list prices, 2025;
// check before quoting): S3 Standard PUT/COPY/POST $0.005 and GET $0.0004
// per 1,000 requests, DELETE free; S3 Express One Zone PUT $0.00113 and
// GET $0.00003 per 1,000, plus $0.0032/GB uploaded and $0.0006/GB
// retrieved; DynamoDB on-demand $0.625 per million write request units and
// $0.125 per million read request units (items below 1 KB, reads counted
// as one unit per call).
const (
	stdPut, stdGet     = 0.005 / 1000, 0.0004 / 1000
	expPut, expGet     = 0.00113 / 1000, 0.00003 / 1000
	expUpGB, expDownGB = 0.0032, 0.0006
	dynWrite, dynRead  = 0.625 / 1e6, 0.125 / 1e6
	gb                 = 1 << 30
	express            = "express"
)

// objectCost prices the traffic of one phase: requests by kind per bucket
// (the express buckets are the zones).
func objectCost(c faults.Counters, class string) float64 {
	var usd float64
	for name, bc := range c {
		isExp := class == express && name != settledB
		for op := range objstore.NumOps {
			n := float64(bc[op].Requests)
			by := float64(bc[op].Bytes)
			switch op {
			case objstore.OpPut, objstore.OpMultipartCreate, objstore.OpMultipartPart, objstore.OpMultipartCopy, objstore.OpMultipartComplete, objstore.OpList:
				if isExp {
					usd += n*expPut + by/gb*expUpGB
				} else {
					usd += n * stdPut
				}
			case objstore.OpGet, objstore.OpHead:
				if isExp {
					usd += n*expGet + by/gb*expDownGB
				} else {
					usd += n * stdGet
				}
			}
		}
	}
	return usd
}

func metaCost(c mfaults.Counts) float64 {
	return float64(c.Writes())*dynWrite + float64(c.Get+c.Query)*dynRead
}

// BenchmarkCostModel runs the real write path (loglet, 16 streams, default
// 4 MiB flights) for each class, then one settle tick and the trim, and
// reports the request cost in dollars per GiB of appended records for each
// phase, from the counting wrappers.
func BenchmarkCostModel(b *testing.B) {
	for _, class := range []meta.Class{meta.Express, meta.Standard} {
		b.Run(string(class), func(b *testing.B) {
			for range b.N {
				costRun(b, class)
			}
		})
	}
}

func costRun(b *testing.B, class meta.Class) {
	cfg := settle.Config{Workers: 8, ScratchDir: b.TempDir()}
	e := newEnv(b, envOpts{class: class, settle: cfg, tweak: func(c *loglet.Config) {
		c.TargetFlight, c.FlushInterval, c.AbsorbInterval, c.PoolBudget = 4<<20, 100*time.Millisecond, 100*time.Millisecond, 64<<20
	}})
	ctx := context.Background()
	const streams, perStream = 16, 4 << 20
	e.objs.ResetCounters()
	e.meta.ResetCounts()
	done := make(chan struct{})
	for i := range streams {
		id := fmt.Sprintf("s%02d", i)
		go func() {
			defer func() { done <- struct{}{} }()
			e.write(id, perStream/(64<<10), 16, 4<<10) // 64 KiB batches
		}()
	}
	for range streams {
		<-done
	}
	e.waitAbsorbed()
	var appended int64
	for _, id := range e.ids() {
		for _, r := range e.acked[id] {
			appended += int64(r.MeteredSize())
		}
	}
	e.loglet.Close()
	ingest := e.objs.Counters()
	ingestMeta := e.meta.Counts()
	e.objs.ResetCounters()
	e.meta.ResetCounts()
	now := time.Now().Add(time.Hour)
	if _, err := settleAll(ctx, e.st, now, false); err != nil {
		b.Fatal(err)
	}
	settleObj, settleMeta := e.objs.Counters(), e.meta.Counts()
	e.objs.ResetCounters()
	e.meta.ResetCounts()
	ch := settle.ChainRef{Star: e.cfg.Star, Class: class}
	for _, at := range []time.Time{now, now.Add(6 * time.Minute)} {
		if _, err := reclaim.TrimCheck(ctx, e.st, ch, at); err != nil {
			b.Fatal(err)
		}
	}
	trimObj, trimMeta := e.objs.Counters(), e.meta.Counts()
	g := float64(appended) / gb
	phases := []struct {
		name string
		obj  faults.Counters
		m    mfaults.Counts
	}{{"ingest", ingest, ingestMeta}, {"settle", settleObj, settleMeta}, {"trim", trimObj, trimMeta}}
	var total float64
	for _, p := range phases {
		o, m := objectCost(p.obj, string(class))/g, metaCost(p.m)/g
		total += o + m
		b.ReportMetric(o, "usd-obj-"+p.name+"/GiB")
		b.ReportMetric(m, "usd-meta-"+p.name+"/GiB")
		b.Logf("%s %s: %d object requests (%d bytes), %d meta writes, %d meta reads per %.3f GiB: $%.5f/GiB objects, $%.5f/GiB metastore",
			class, p.name, p.obj.Total().Requests, p.obj.Total().Bytes, p.m.Writes(), p.m.Get+p.m.Query, g, o, m)
	}
	b.ReportMetric(total, "usd-total/GiB")
}
