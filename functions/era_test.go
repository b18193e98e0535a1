package functions_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/starlog/starlog/functions/internal/testenv"
	"github.com/starlog/starlog/infra/config"
	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/auditjob/awsenv"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/dynamo"
	s3store "github.com/starlog/starlog/shared/objstore/s3"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/plan"
	"github.com/starlog/starlog/shared/testsvc"
)

// reqCounter counts the requests a front passes upstream, by kind.
type reqCounter struct {
	mu sync.Mutex
	n  map[string]int64
}

func (c *reqCounter) add(kind string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == nil {
		c.n = map[string]int64{}
	}
	c.n[kind] += n
}

func (c *reqCounter) snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return clone(c.n)
}

func clone(m map[string]int64) map[string]int64 {
	out := make(map[string]int64, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// s3Kind is a path-style S3 request's billing kind: multipart create,
// part, copy part and complete are PUTs; DeleteObjects and an abort are
// DELETEs; a bucket-level GET is a LIST.
func s3Kind(r *http.Request) string {
	q := r.URL.Query()
	object := strings.Count(strings.Trim(r.URL.Path, "/"), "/") >= 1
	switch r.Method {
	case http.MethodHead:
		return "HEAD"
	case http.MethodGet:
		if !object {
			return "LIST"
		}
		return "GET"
	case http.MethodDelete:
		return "DELETE"
	case http.MethodPost:
		if q.Has("delete") {
			return "DELETE"
		}
		return "PUT"
	}
	return "PUT"
}

// countingFront starts a reverse proxy on loopback before upstream that
// counts every request by kind(r) (and, for DynamoDB's BatchWriteItem, its
// items), and returns its URL.
func countingFront(t *testing.T, upstream string, c *reqCounter, dynamoDB bool) string {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(u)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !dynamoDB {
			c.add(s3Kind(r), 1)
			rp.ServeHTTP(w, r)
			return
		}
		op := strings.TrimPrefix(r.Header.Get("X-Amz-Target"), "DynamoDB_20120810.")
		c.add(op, 1)
		if op == "BatchWriteItem" {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			var req struct {
				RequestItems map[string][]json.RawMessage
			}
			if json.Unmarshal(body, &req) == nil {
				for _, items := range req.RequestItems {
					c.add("BatchWriteItem.items", int64(len(items)))
				}
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// eraStreams is the stream count of the era the settle function is sized
// for (issue 15).
const eraStreams = 10_000

// TestSettleEraOf10000StreamsFitsTheLambda runs the settle function, as
// built for the stack, under the Lambda Runtime Interface Emulator on one
// era of 10,000 streams on a Standard chain, with the memory, /tmp and
// timeout the stack gives the settle function (infra/config
// DefaultFunctions), and fails unless its peak RSS (VmHWM of the function
// process), its peak /tmp use and its duration fit them. The era is the
// largest the planner cuts at that density: 10,240 slots, the settle
// policy's EraMaxBytes (2 GiB) of flights as the star's Standard defaults
// cut them at 4 MiB/s (one per 50 ms flush: 205 KiB of 1 KiB records), an
// era gathered over about 8.5 minutes, some 200 KiB per stream; every
// stream has a settled tail from an earlier era (settled in process), so
// the job extends 10,000 tails, the steady state. ERA_FLIGHT_KIB and
// ERA_SLOTS change it. Behind STARLOG_ERA_TEST=1 (make settle-era):
// it writes some 200,000 rows to DynamoDB Local.
func TestSettleEraOf10000StreamsFitsTheLambda(t *testing.T) {
	if os.Getenv("STARLOG_ERA_TEST") == "" {
		t.Skip("STARLOG_ERA_TEST=1 (make settle-era): a 10,000-stream era on versitygw and DynamoDB Local, several minutes")
	}
	fn := config.DefaultFunctions()[config.JobSettle]
	flightKiB, slots := envInt(t, "ERA_FLIGHT_KIB", 205), envInt(t, "ERA_SLOTS", 10240)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()

	const std = "std"
	v := testsvc.StartVersity(t, std)
	var s3c, dync reqCounter
	s3URL := countingFront(t, v.Endpoint, &s3c, false)
	sc, err := s3store.NewClient(ctx, s3store.Config{Endpoint: v.Endpoint, Region: v.Region, AccessKey: v.AccessKey, SecretKey: v.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	objs := s3store.New(sc)
	srv := dyn.Get(t)
	table := srv.TableName(t)
	dc := testsvc.DynamoClient(srv.Endpoint)
	if err := dynamo.CreateTable(ctx, dc, table); err != nil {
		t.Fatal(err)
	}
	ms := dynamo.New(dc, table)
	dynURL := countingFront(t, srv.Endpoint, &dync, true)

	// Identity rows, then the chain and its writer.
	ids := make([]string, eraStreams)
	var rows []meta.Item
	for i := range ids {
		ids[i] = fmt.Sprintf("%032x", i)
		k := meta.StreamMetaKey(ids[i])
		rows = append(rows, meta.Item{PK: k.PK, SK: k.SK, Val: meta.Encode(meta.StreamMeta{Basin: "b1", Name: ids[i], Class: meta.Standard})})
	}
	for i := 0; i < len(rows); i += 25 {
		if err := ms.BatchPut(ctx, rows[i:min(i+25, len(rows))]); err != nil {
			t.Fatal(err)
		}
	}
	c := chain.New("star1", meta.Standard, chain.Incarnation("star1", 1), ms, objs)
	rec, err := c.Mint(ctx, meta.EpochParams{Buckets: []string{std}, W: 1, Window: 16})
	if err != nil {
		t.Fatal(err)
	}
	w, err := c.Writer(rec, chain.WriterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	policy := settle.DefaultConfig()
	// Markers born an hour ago are cap-ripe under the default policy.
	born := time.Now().Add(-time.Hour)
	abs := &absorb.Absorber{Star: "star1", Class: meta.Standard, Meta: ms, Rip: policy.Ripening(meta.Standard),
		UpdateEpoch: c.UpdateEpoch, Concurrency: 32, Now: func() time.Time { return born }}
	seqs := make([]uint64, eraStreams)
	body := bytes.Repeat([]byte{'r'}, 1<<10)
	next := 0
	var slot uint64
	var appended int64
	// pass writes n flights of flightKiB of 1 KiB records round-robin over
	// the streams and absorbs them as one pass.
	pass := func(n int) {
		t.Helper()
		var pending []absorb.Slot
		for range n {
			var batches []format.Batch
			at := map[int]int{}
			for range flightKiB {
				i := next
				next = (next + 1) % eraStreams
				b, ok := at[i]
				if !ok {
					b = len(batches)
					at[i] = b
					batches = append(batches, format.Batch{StreamID: ids[i]})
				}
				batches[b].Records = append(batches[b].Records, format.Record{SeqNum: seqs[i], Timestamp: uint64(born.UnixMilli()), Body: body})
				seqs[i]++
				appended += int64(len(body))
			}
			bundle, err := w.Render(slot, batches)
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Commit(ctx, slot, bundle); err != nil {
				t.Fatal(err)
			}
			_, f, err := format.DecodeBundle(bundle)
			if err != nil {
				t.Fatal(err)
			}
			pending = append(pending, absorb.Slot{Slot: slot, Extents: f.Extents})
			slot++
		}
		if got, err := abs.Pass(ctx, rec.Epoch, pending); err != nil || got != len(pending) {
			t.Fatalf("pass of %d slots: %d, %v", len(pending), got, err)
		}
	}
	st := &settle.Stores{Meta: ms, Objects: objs, SettledBucket: std, Streams: settle.MetaStreams{Meta: ms},
		Config: settle.Config{ScratchDir: t.TempDir()}, Logger: testenv.Log()}
	planOne := func() settle.Job {
		t.Helper()
		jobs, err := plan.Plan(ctx, st, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		var out []settle.Job
		for _, j := range jobs {
			if j.Kind == settle.KindSettle {
				out = append(out, j)
			}
		}
		if len(out) != 1 {
			t.Fatalf("planned %v, want one settle job", jobs)
		}
		return out[0]
	}

	// An earlier era gives every stream its settled tail.
	t0 := time.Now()
	pass(eraStreams/flightKiB + 1)
	warm := planOne()
	rep, ran, err := settle.RunSettle(ctx, st, warm)
	if err != nil || !ran || rep.Settled != eraStreams {
		t.Fatalf("warm-up era %s: ran %v, %+v, %v", warm, ran, rep, err)
	}
	t.Logf("warm-up era %s: %d streams settled in process in %v", warm, rep.Settled, time.Since(t0).Round(time.Second))

	// The era under test.
	t0 = time.Now()
	before := appended
	pass(slots)
	job := planOne()
	if job.From != warm.End || job.End != warm.End+uint64(slots) {
		t.Fatalf("planned %s, want the era [%d,%d)", job, warm.End, warm.End+uint64(slots))
	}
	eraBytes := appended - before
	t.Logf("era %s: %d slots of %d KiB flights, %.1f MiB of records over %d streams, written in %v",
		job, slots, flightKiB, float64(eraBytes)/(1<<20), eraStreams, time.Since(t0).Round(time.Second))

	scratch := t.TempDir()
	env := []string{
		awsenv.EnvTable + "=" + table,
		awsenv.EnvStandardBuckets + "=" + std,
		awsenv.EnvScratchDir + "=" + scratch,
		awsenv.EnvScratchMiB + "=" + strconv.Itoa(fn.EphemeralMiB),
		awsenv.EnvMemoryMiB + "=" + strconv.Itoa(fn.MemoryMiB),
		awsenv.EnvDynamoEndpoint + "=" + dynURL,
		awsenv.EnvS3Endpoint + "=" + s3URL,
		awsenv.EnvS3PathStyle + "=true",
		awsenv.EnvAccessKey + "=" + v.AccessKey,
		awsenv.EnvSecretKey + "=" + v.SecretKey,
		awsenv.EnvRegion + "=" + v.Region,
		awsenv.EnvLogLevel + "=info",
		"PATH=" + os.Getenv("PATH"),
		"HOME=" + t.TempDir(),
	}
	r := startRIETimeout(t, "settle", env, fn.TimeoutSeconds)
	s3c0, dyn0 := s3c.snapshot(), dync.snapshot()

	// Sample /tmp while the job runs: the fetch cache lives and dies in it.
	var peakTmp atomic.Int64
	done := make(chan struct{})
	var sampled sync.WaitGroup
	sampled.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			peakTmp.Store(max(peakTmp.Load(), dirBytes(scratch)))
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	})
	ev := events.SQSEvent{Records: []events.SQSMessage{{MessageId: "era", ReceiptHandle: "handle-era",
		Body: string(auditjob.FromSettle(job).Marshal()), EventSource: "aws:sqs", AWSRegion: v.Region,
		Attributes: map[string]string{"ApproximateReceiveCount": "1"}}}}
	start := time.Now()
	out := invokeWithin(t, r, ev, time.Duration(fn.TimeoutSeconds+60)*time.Second)
	took := time.Since(start)
	close(done)
	sampled.Wait()
	hwm, pid := functionHWM(t, bootstrap(t, "settle"))
	r.stop()

	var resp events.SQSEventResponse
	if err := json.Unmarshal(out, &resp); err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("settle function answered %s (%v)", out, err)
	}
	s3d, dynd := diff(s3c.snapshot(), s3c0), diff(dync.snapshot(), dyn0)
	var s3total, dynWrites int64
	for _, n := range s3d {
		s3total += n
	}
	dynWrites = dynd["PutItem"] + dynd["DeleteItem"] + dynd["UpdateItem"] + dynd["BatchWriteItem.items"]
	t.Logf("settle function (pid %d) on the era: %v; peak RSS (VmHWM) %.0f MiB of %d MiB; peak /tmp %.1f MiB of %d MiB; timeout %d s",
		pid, took.Round(time.Millisecond), float64(hwm)/(1<<20), fn.MemoryMiB, float64(peakTmp.Load())/(1<<20), fn.EphemeralMiB, fn.TimeoutSeconds)
	t.Logf("requests: S3 %d %v; DynamoDB %v (%d item writes)", s3total, s3d, dynd, dynWrites)

	// Everything settled: no marker of the era is left and every stream's
	// rows end in a catalog row at its last seq.
	mk := meta.ChainPK("star1", meta.Standard)
	pg, err := ms.Query(ctx, meta.Query{PK: mk, From: "m#", To: "m#~", Limit: 10})
	if err != nil || len(pg.Items) != 0 {
		t.Fatalf("markers left after the era: %d (%v)", len(pg.Items), err)
	}
	for _, i := range []int{0, 1, eraStreams / 2, eraStreams - 1} {
		k := meta.RefKey(ids[i], 0)
		pg, err := ms.Query(ctx, meta.Query{PK: k.PK, From: meta.RefPrefix, To: meta.RefPrefix + "~"})
		if err != nil {
			t.Fatal(err)
		}
		var last meta.Ref
		for _, it := range pg.Items {
			if err := meta.Decode(it.Val, &last); err != nil {
				t.Fatal(err)
			}
			if last.Settled == nil {
				t.Fatalf("stream %s: a span ref [%d,%d) is left", ids[i], last.FirstSeq, last.EndSeq)
			}
		}
		if last.EndSeq != seqs[i] {
			t.Fatalf("stream %s settled to %d, appended %d", ids[i], last.EndSeq, seqs[i])
		}
	}

	// The limits the stack gives the function.
	if hwm > int64(fn.MemoryMiB)<<20 {
		t.Errorf("peak RSS %d B passes the function's %d MiB", hwm, fn.MemoryMiB)
	}
	if p := peakTmp.Load(); p > int64(fn.EphemeralMiB)<<20 {
		t.Errorf("peak /tmp %d B passes the function's %d MiB", p, fn.EphemeralMiB)
	}
	if took > time.Duration(fn.TimeoutSeconds)*time.Second {
		t.Errorf("the era took %v, past the function's %d s timeout", took, fn.TimeoutSeconds)
	}
}

func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive integer", name, v)
	}
	return n
}

func diff(a, b map[string]int64) map[string]int64 {
	out := map[string]int64{}
	for k, v := range a {
		if d := v - b[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

// dirBytes is the bytes of the regular files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// functionHWM finds the process running the bootstrap at path (the
// emulator's child) and reads its peak resident set (VmHWM).
func functionHWM(t *testing.T, path string) (int64, int) {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe")); err != nil || exe != path {
			continue
		}
		f, err := os.Open(filepath.Join("/proc", e.Name(), "status"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				return kb << 10, pid
			}
		}
	}
	t.Fatalf("no process runs %s", path)
	return 0, 0
}

// invokeWithin posts an event to the emulator and waits up to d.
func invokeWithin(t *testing.T, r *rie, event any, d time.Duration) []byte {
	t.Helper()
	b, err := json.Marshal(event)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("invoke: %v\n%s", err, r.proc.Output())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("invoke: HTTP %d %s\n%s", resp.StatusCode, body, r.proc.Output())
	}
	if le, bad := hasError(body); bad {
		t.Fatalf("function failed: %s (%s)\n%s", le.Message, le.Type, r.proc.Output())
	}
	return body
}
