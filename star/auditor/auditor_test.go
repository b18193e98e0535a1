package auditor_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/objstore"
	"github.com/starlog/starlog/shared/objstore/faults"
	"github.com/starlog/starlog/shared/objstore/mem"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auditor"
	"github.com/starlog/starlog/star/node"
)

func testLog() *slog.Logger {
	if testing.Verbose() && os.Getenv("STARLOG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// A star as `star dev` runs it (embedded metastore, one store for every
// bucket) with the in-process auditor beside it on a tiny policy: records
// appended to a standard and an express stream are settled into catalog
// rows by the runner alone, their slots are trimmed once the read grace has
// passed, a settle that fails at first is retried, and every record reads
// back throughout and at the end.
func TestDevStarSettlesAndTrimsByItself(t *testing.T) {
	ctx := context.Background()
	ms := testsvc.SQLite(t)
	inner, err := mem.New("standard", "express-a", "express-b", "express-c")
	if err != nil {
		t.Fatal(err)
	}
	policy := settle.Config{
		Trigger:   32 << 10,
		Standard:  settle.ClassTimers{Linger: 20 * time.Millisecond, AgeCap: 60 * time.Millisecond},
		Express:   settle.ClassTimers{Linger: 20 * time.Millisecond, AgeCap: 60 * time.Millisecond},
		OutputCap: 128 << 10, ReadGrace: 300 * time.Millisecond, Workers: 2, ScratchDir: t.TempDir(),
	}
	cfg := node.Defaults()
	cfg.StarID = "dev-star"
	cfg.Standard.FlushInterval, cfg.Express.FlushInterval = 2*time.Millisecond, 2*time.Millisecond
	cfg.Standard.TargetFlightBytes, cfg.Express.TargetFlightBytes = 16<<10, 16<<10
	cfg.Settle = policy
	n, err := node.Open(ctx, cfg, node.Deps{Meta: ms, Objects: inner, Logger: testLog()})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close(context.Background())

	// The auditor's view of the objects fails its first two publishes of
	// a settled object (a PUT below the part size, else a multipart
	// complete): those settles fail and are retried.
	objs := faults.Wrap(inner)
	objs.FailNext("standard", 2, faults.Definite, objstore.OpPut, objstore.OpMultipartComplete)
	reg := prometheus.NewRegistry()
	st := &settle.Stores{Meta: ms, Objects: objs, SettledBucket: "standard", Streams: settle.MetaStreams{Meta: ms},
		Config: policy, Metrics: settle.NewMetrics(reg), Logger: testLog()}
	r, err := auditor.New(st, auditor.Options{Interval: 50 * time.Millisecond, RetryBase: 20 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	rctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { r.Run(rctx) })
	defer func() { stop(); wg.Wait() }()

	const basin = "dev-basin"
	if _, err := n.CreateBasin(ctx, api.CreateBasinRequest{Basin: basin}, ""); err != nil {
		t.Fatal(err)
	}
	express := api.StorageExpress
	names := map[string]*api.StreamConfig{"std": nil, "exp": {StorageClass: &express}}
	for name, sc := range names {
		if _, err := n.CreateStream(ctx, basin, api.CreateStreamRequest{Stream: name, Config: sc}, ""); err != nil {
			t.Fatal(err)
		}
	}

	// Append in rounds while the auditor works, reading everything back
	// after each round.
	want := map[string][][]byte{}
	for round := range 8 {
		for name := range names {
			in := &api.AppendInput{}
			for i := range 20 {
				in.Records = append(in.Records, api.Record{Body: []byte(fmt.Sprintf("%s-%d-%d-%s", name, round, i, strings.Repeat("x", 400)))})
			}
			if _, err := n.Append(ctx, basin, name, in, nil); err != nil {
				t.Fatal(err)
			}
			for _, rec := range in.Records {
				want[name] = append(want[name], rec.Body)
			}
		}
		for name := range names {
			checkReads(t, n, basin, name, want[name])
		}
		nextPass(t, reg)
	}

	// Every row becomes a catalog row, and every slot below the
	// checkpoint is deleted, by the runner alone.
	ids := map[string]string{}
	for name := range names {
		ids[name] = streamID(t, ms, basin, name)
	}
	if err := poll.Wait(30*time.Second, func() error {
		if settled, trimmed := allSettled(t, ms, ids, want), allTrimmed(t, ms, inner, cfg.StarID); !settled || !trimmed {
			return fmt.Errorf("settled %v, trimmed %v", settled, trimmed)
		}
		return nil
	}); err != nil {
		t.Fatalf("after 30 s: %v; runner metrics:\n%s", err, dump(t, reg))
	}
	for name := range names {
		checkReads(t, n, basin, name, want[name])
	}
	t.Logf("auditor jobs: settle done %v retried %v, trim done %v; settled objects published %v",
		counter(t, reg, "starlog_auditor_jobs_total", "settle", "done"), counter(t, reg, "starlog_auditor_jobs_total", "settle", "retried"),
		counter(t, reg, "starlog_auditor_jobs_total", "trim", "done"),
		counter(t, reg, "starlog_settle_objects_total", "standard", "published")+counter(t, reg, "starlog_settle_objects_total", "express", "published"))
	if v := counter(t, reg, "starlog_auditor_jobs_total", "settle", "retried"); v < 1 {
		t.Fatalf("no settle was retried after the injected failures:\n%s", dump(t, reg))
	}
	if v := counter(t, reg, "starlog_auditor_jobs_total", "trim", "done"); v < 1 {
		t.Fatalf("no trim job ran:\n%s", dump(t, reg))
	}
}

func checkReads(t *testing.T, n *node.Node, basin, name string, want [][]byte) {
	t.Helper()
	var got []api.Record
	for len(got) < len(want) {
		b, err := n.Read(context.Background(), basin, name, api.ReadRequest{From: api.FromSeqNum, Value: uint64(len(got)), Count: api.Uint64(1000), Bytes: api.Uint64(1 << 20)}, nil)
		if err != nil {
			t.Fatalf("read %s from %d: %v", name, len(got), err)
		}
		if len(b.Records) == 0 {
			t.Fatalf("read %s from %d: no records", name, len(got))
		}
		got = append(got, b.Records...)
	}
	for i, w := range want {
		if got[i].SeqNum != uint64(i) || !bytes.Equal(got[i].Body, w) {
			t.Fatalf("%s record %d: seq %d body %.20q, want %.20q", name, i, got[i].SeqNum, got[i].Body, w)
		}
	}
}

func streamID(t *testing.T, ms meta.Store, basin, name string) string {
	t.Helper()
	k := meta.StreamNameKey(basin, name)
	it, err := ms.Get(context.Background(), k.PK, k.SK)
	if err != nil {
		t.Fatal(err)
	}
	var row node.StreamRow
	if err := meta.Decode(it.Val, &row); err != nil {
		t.Fatal(err)
	}
	return row.ID
}

// allSettled: every stream's rows are catalog rows tiling [0, appended).
func allSettled(t *testing.T, ms meta.Store, ids map[string]string, want map[string][][]byte) bool {
	t.Helper()
	for name, id := range ids {
		pg, err := ms.Query(context.Background(), meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~"})
		if err != nil {
			t.Fatal(err)
		}
		var next uint64
		for _, it := range pg.Items {
			var r meta.Ref
			if err := meta.Decode(it.Val, &r); err != nil {
				t.Fatal(err)
			}
			if r.FirstSeq < next && r.Settled == nil {
				// A span ref a settle has just covered: commitObject puts
				// the catalog row first and deletes what it covers after,
				// so a query between the steps meets both. Not done yet.
				return false
			}
			if r.FirstSeq != next {
				t.Fatalf("%s: row at %d after end %d", name, r.FirstSeq, next)
			}
			if r.Settled == nil {
				return false
			}
			next = r.EndSeq
		}
		if next != uint64(len(want[name])) {
			return false
		}
	}
	return true
}

// allTrimmed: every epoch of the star's chains is trimmed to its
// checkpoint, and no slot object below that is left.
func allTrimmed(t *testing.T, ms meta.Store, objs objstore.Store, star string) bool {
	t.Helper()
	for _, class := range []meta.Class{meta.Standard, meta.Express} {
		pg, err := ms.Query(context.Background(), meta.Query{PK: meta.ChainPK(star, class), From: "e#", To: "e#~"})
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range pg.Items {
			var e meta.Epoch
			if err := meta.Decode(it.Val, &e); err != nil {
				t.Fatal(err)
			}
			if e.Checkpoint == 0 || e.Trimmed != e.Checkpoint {
				return false
			}
			for _, b := range e.Params.Buckets {
				for info, err := range objs.Bucket(b).List(context.Background(), fmt.Sprintf("chains/%s/%s/", star, class)) {
					if err != nil {
						t.Fatal(err)
					}
					var epoch, slot uint64
					if _, err := fmt.Sscanf(info.Key[strings.LastIndexByte(info.Key[:strings.LastIndexByte(info.Key, '/')], '/'):], "/%d/%d", &epoch, &slot); err != nil {
						t.Fatalf("slot key %s: %v", info.Key, err)
					}
					if epoch == e.Epoch && slot < e.Trimmed {
						t.Fatalf("slot %s survived the trim to %d", info.Key, e.Trimmed)
					}
				}
			}
		}
	}
	return true
}

// nextPass waits until the auditor has planned again (a tick, ok or not),
// so that rounds of appends interleave with its passes.
func nextPass(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	ticks := func() float64 {
		return counter(t, reg, "starlog_auditor_ticks_total", "ok") + counter(t, reg, "starlog_auditor_ticks_total", "error")
	}
	before := ticks()
	poll.Until(t, 10*time.Second, "the auditor's next pass", func() bool { return ticks() > before })
}

// counter reads one series of a counter vector from reg (0 if absent).
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var vals []string
			for _, lp := range m.GetLabel() {
				vals = append(vals, lp.GetValue())
			}
			if strings.Join(vals, ",") == strings.Join(labels, ",") {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func dump(t *testing.T, reg *prometheus.Registry) string {
	mfs, _ := reg.Gather()
	var b strings.Builder
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "starlog_auditor_jobs_total") || strings.HasPrefix(mf.GetName(), "starlog_settle_job_errors") {
			fmt.Fprintf(&b, "%v\n", mf)
		}
	}
	return b.String()
}
