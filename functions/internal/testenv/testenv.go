// Package testenv builds genuine auditor state for the functions' tests:
// a star's express loglet (star/loglet + star/streams, the production
// write path) appending to streams on the production adapters — the s3
// backend against versitygw and the dynamo backend against DynamoDB Local
// — so bundles, span refs, batch markers and epochs are what a star
// writes. It also renders the environment a function gets, pointed at
// those servers.
package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/absorb"
	"github.com/starlog/starlog/shared/auditjob/awsenv"
	"github.com/starlog/starlog/shared/chain"
	"github.com/starlog/starlog/shared/format"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/meta/dynamo"
	"github.com/starlog/starlog/shared/objstore/faults"
	s3store "github.com/starlog/starlog/shared/objstore/s3"
	"github.com/starlog/starlog/shared/poll"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/settle/chainsettle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/facade"
	"github.com/starlog/starlog/star/loglet"
	"github.com/starlog/starlog/star/reader"
	"github.com/starlog/starlog/star/streams"
)

// Buckets: the standard bucket settled objects land in, and the express
// bucket set (K=3, W=2) the loglet writes.
const (
	SettledBucket = "std"
	Basin         = "b1"
	Star          = "star1"
)

// Zones are the express buckets.
var Zones = []string{"az1", "az2", "az3"}

// FlightDeadline is the loglet's: far above a loopback PUT on a loaded
// machine, so the only halts are the ones a test makes (Halt); at 300 ms a
// slow PUT halted a clean-clone run's epoch a second time.
const FlightDeadline = 2 * time.Second

// Policy is the settle policy of the tests: markers ripen at their age
// cap within milliseconds, so a plan right after the writes finds them
// due; the grace is short enough to wait out. Trigger and output cap are
// whole MiB because the environment gives them in MiB.
func Policy(scratch string) settle.Config {
	return settle.Config{
		Trigger:   1 << 20,
		Standard:  settle.ClassTimers{Linger: 5 * time.Millisecond, AgeCap: 10 * time.Millisecond},
		Express:   settle.ClassTimers{Linger: 5 * time.Millisecond, AgeCap: 10 * time.Millisecond},
		OutputCap: 1 << 20, ReadGrace: time.Second, Workers: 2, ScratchDir: scratch,
	}
}

// Env is the state under test and the servers holding it.
type Env struct {
	t       testing.TB
	Versity testsvc.VersityServer
	Dynamo  testsvc.DynamoServer
	Table   string
	Meta    meta.Store
	// Objects wraps the s3 backend so a test can take zones down.
	Objects *faults.Store
	// Stores are the auditor's stores over the same servers, for running
	// jobs in process and for checks.
	Stores *settle.Stores
	Loglet *loglet.Loglet
	// metrics is the loglet's registry: Halt waits on its halts.
	metrics *prometheus.Registry
	Chain   settle.ChainRef
	Policy  settle.Config

	mu      sync.Mutex
	streams map[string]*streams.Stream
	acked   map[string][]format.Record
}

// New starts versitygw, takes a fresh table on the shared DynamoDB Local
// and opens the express loglet of Star on them.
func New(t testing.TB, dyn *testsvc.SharedDynamo) *Env {
	t.Helper()
	ctx := context.Background()
	v := testsvc.StartVersity(t, append(slices.Clone(Zones), SettledBucket)...)
	sc, err := s3store.NewClient(ctx, s3store.Config{Endpoint: v.Endpoint, Region: v.Region, AccessKey: v.AccessKey, SecretKey: v.SecretKey, PathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	srv := dyn.Get(t)
	table := srv.TableName(t)
	dc := testsvc.DynamoClient(srv.Endpoint)
	if err := dynamo.CreateTable(ctx, dc, table); err != nil {
		t.Fatal(err)
	}
	e := &Env{t: t, Versity: v, Dynamo: srv, Table: table, Meta: dynamo.New(dc, table),
		Objects: faults.Wrap(s3store.New(sc), faults.WithSeed(1)),
		Chain:   settle.ChainRef{Star: Star, Class: meta.Express},
		Policy:  Policy(t.TempDir()),
		metrics: prometheus.NewRegistry(),
		streams: map[string]*streams.Stream{}, acked: map[string][]format.Record{}}
	e.Stores = &settle.Stores{Meta: e.Meta, Objects: e.Objects, SettledBucket: SettledBucket,
		Streams: settle.MetaStreams{Meta: e.Meta}, Config: e.Policy, Logger: Log()}
	cfg := loglet.Config{
		Star: Star, Incarnation: chain.Incarnation(Star, 1), Class: meta.Express,
		Buckets: Zones, W: 2, Window: 4,
		FlushInterval: 2 * time.Millisecond, TargetFlight: 64 << 10, PoolBudget: 32 << 20,
		FlightDeadline: FlightDeadline, RecoveryDeadline: time.Minute, AbsorbInterval: 10 * time.Millisecond,
		Ripening: e.Policy.WithDefaults().Ripening(meta.Express),
	}
	c := chain.New(cfg.Star, cfg.Class, cfg.Incarnation, e.Meta, e.Objects)
	abs := &absorb.Absorber{Star: cfg.Star, Class: cfg.Class, Meta: e.Meta, Rip: cfg.Ripening, UpdateEpoch: c.UpdateEpoch}
	l, err := loglet.Open(ctx, cfg, c, func(ctx context.Context) error { return chainsettle.Chain(ctx, c, abs) }, loglet.NewMetrics(e.metrics), Log())
	if err != nil {
		t.Fatal(err)
	}
	e.Loglet = l
	t.Cleanup(l.Close)
	return e
}

// Log is quiet unless STARLOG_TEST_LOG is set.
func Log() *slog.Logger {
	if os.Getenv("STARLOG_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// FunctionEnv is the environment of a function pointed at this state:
// the variables the CDK stack sets, the endpoint overrides, the test
// policy, and extra (queue URLs, …). Nothing else of the test process
// leaks in, so no developer AWS profile is ever used.
func (e *Env) FunctionEnv(extra map[string]string) []string {
	p := e.Policy
	vars := map[string]string{
		awsenv.EnvTable:               e.Table,
		awsenv.EnvStandardBuckets:     SettledBucket,
		awsenv.EnvExpressBuckets:      strings.Join(Zones, ","),
		awsenv.EnvScratchDir:          p.ScratchDir,
		awsenv.EnvScratchMiB:          "512",
		awsenv.EnvDynamoEndpoint:      e.Dynamo.Endpoint,
		awsenv.EnvS3Endpoint:          e.Versity.Endpoint,
		awsenv.EnvS3PathStyle:         "true",
		awsenv.EnvAccessKey:           e.Versity.AccessKey,
		awsenv.EnvSecretKey:           e.Versity.SecretKey,
		awsenv.EnvRegion:              e.Versity.Region,
		awsenv.EnvSettleTriggerMiB:    fmt.Sprint(p.Trigger >> 20),
		awsenv.EnvSettleOutputCapMiB:  fmt.Sprint(p.OutputCap >> 20),
		awsenv.EnvSettleLinger:        p.Standard.Linger.String(),
		awsenv.EnvSettleAgeCap:        p.Standard.AgeCap.String(),
		awsenv.EnvSettleExpressLinger: p.Express.Linger.String(),
		awsenv.EnvSettleExpressAgeCap: p.Express.AgeCap.String(),
		awsenv.EnvReadGrace:           p.ReadGrace.String(),
		awsenv.EnvSettleWorkers:       fmt.Sprint(p.Workers),
		awsenv.EnvLogLevel:            "debug",
		"PATH":                        os.Getenv("PATH"),
		"HOME":                        e.t.TempDir(),
	}
	for k, v := range extra {
		vars[k] = v
	}
	out := make([]string, 0, len(vars))
	for k, v := range vars {
		out = append(out, k+"="+v)
	}
	slices.Sort(out)
	return out
}

// stream opens (once) a stream: its identity row, then the leader's open.
func (e *Env) stream(id string) *streams.Stream {
	e.t.Helper()
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.streams[id]; ok {
		return s
	}
	ctx := context.Background()
	k := meta.StreamMetaKey(id)
	if _, err := e.Meta.Put(ctx, k.PK, k.SK, meta.Encode(meta.StreamMeta{Basin: Basin, Name: id, Class: meta.Express}), meta.IfAbsent()); err != nil {
		e.t.Fatal(err)
	}
	s, err := streams.Open(ctx, e.Meta, e.Loglet, id, meta.Express, facade.Config{})
	if err != nil {
		e.t.Fatal(err)
	}
	e.streams[id] = s
	return s
}

// Body is a deterministic record body of about size bytes.
func Body(id string, seq, size int) []byte {
	b := fmt.Appendf(nil, "%s#%d:", id, seq)
	for len(b) < size {
		b = append(b, byte('a'+(len(b)*7+seq)%26))
	}
	return b
}

// Submit sends batches of n records of about size bytes to stream id,
// pipelined, and returns a wait for their acks.
func (e *Env) Submit(id string, batches, n, size int) (wait func()) {
	e.t.Helper()
	s := e.stream(id)
	ctx := context.Background()
	e.mu.Lock()
	base := len(e.acked[id])
	e.mu.Unlock()
	var tickets []*streams.Ticket
	for b := range batches {
		req := facade.Request{}
		for j := range n {
			req.Records = append(req.Records, facade.Input{Body: Body(id, base+b*n+j, size)})
		}
		tk, err := s.Submit(ctx, req)
		if err != nil {
			e.t.Fatal(err)
		}
		tickets = append(tickets, tk)
	}
	return func() {
		e.t.Helper()
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		for _, tk := range tickets {
			if _, err := tk.Wait(wctx); err != nil {
				e.t.Fatalf("append to %s: %v", id, err)
			}
			e.mu.Lock()
			e.acked[id] = append(e.acked[id], tk.Sequenced().Records...)
			e.mu.Unlock()
		}
	}
}

// Write appends and waits for the acks.
func (e *Env) Write(id string, batches, n, size int) { e.Submit(id, batches, n, size)() }

// IDs lists the streams written.
func (e *Env) IDs() []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []string
	for id := range e.acked {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

// Acked is the number of records acknowledged on id.
func (e *Env) Acked(id string) uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return uint64(len(e.acked[id]))
}

// WaitAbsorbed waits until every acknowledged record is ref-covered and
// every epoch below the head is absorbed up to its cut.
func (e *Env) WaitAbsorbed() {
	e.t.Helper()
	if poll.Wait(30*time.Second, func() error {
		for _, id := range e.IDs() {
			rows := e.Rows(id)
			if len(rows) == 0 || rows[len(rows)-1].EndSeq != e.Acked(id) {
				return errNotYet
			}
		}
		for _, ep := range e.Epochs() {
			if ep.Cut != nil && ep.Checkpoint < *ep.Cut {
				return errNotYet
			}
		}
		return nil
	}) != nil {
		e.t.Fatalf("not absorbed after 30 s: epochs %+v", e.Epochs())
	}
}

var errNotYet = errors.New("not yet")

// WaitRipe waits until every live marker has passed its ripening time, so
// that a plan from now on finds each one's era ripe.
func (e *Env) WaitRipe() {
	e.t.Helper()
	poll.Until(e.t, 10*time.Second, "every marker ripe", func() bool {
		now := time.Now().UnixMilli()
		for _, m := range e.Markers() {
			if m.Ripen >= now {
				return false
			}
		}
		return true
	})
}

// Halt halts the loglet's epoch: two zones go dark while appends are
// pending, until the flight deadline halts the epoch; when they return the
// loglet fences its own epoch, acks late, mints the next and republishes.
// The halted epoch is left below the head with its cut recorded.
func (e *Env) Halt(id string) {
	e.t.Helper()
	before, halts := e.Loglet.Epoch(), e.halts()
	e.Objects.SetDown(Zones[1], faults.Down{Hang: true})
	e.Objects.SetDown(Zones[2], faults.Down{Hang: true})
	wait := e.Submit(id, 4, 2, 200)
	err := poll.Wait(FlightDeadline+30*time.Second, func() error {
		if e.halts() == halts {
			return errNotYet
		}
		return nil
	})
	e.Objects.SetUp(Zones[1])
	e.Objects.SetUp(Zones[2])
	if err != nil {
		e.t.Fatalf("epoch %d did not halt with two zones dark", before)
	}
	wait()
	if got := e.Loglet.Epoch(); got <= before {
		e.t.Fatalf("epoch %d did not halt (still %d)", before, got)
	}
}

// halts is how many epochs the loglet has halted.
func (e *Env) halts() float64 {
	e.t.Helper()
	mfs, err := e.metrics.Gather()
	if err != nil {
		e.t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "starlog_epoch_halts_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}

// Rows are a stream's rows (span refs and catalog rows), ascending.
func (e *Env) Rows(id string) []meta.Ref {
	e.t.Helper()
	var out []meta.Ref
	q := meta.Query{PK: meta.RefKey(id, 0).PK, From: meta.RefPrefix, To: meta.RefPrefix + "~"}
	for {
		pg, err := e.Meta.Query(context.Background(), q)
		if err != nil {
			e.t.Fatal(err)
		}
		for _, it := range pg.Items {
			var r meta.Ref
			if err := meta.Decode(it.Val, &r); err != nil {
				e.t.Fatal(err)
			}
			out = append(out, r)
		}
		if pg.Next == "" {
			return out
		}
		q.PageToken = pg.Next
	}
}

// Epochs are the chain's epoch records, ascending.
func (e *Env) Epochs() []meta.Epoch {
	e.t.Helper()
	pg, err := e.Meta.Query(context.Background(), meta.Query{PK: meta.ChainPK(e.Chain.Star, e.Chain.Class), From: "e#", To: "e#~"})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []meta.Epoch
	for _, it := range pg.Items {
		var ep meta.Epoch
		if err := meta.Decode(it.Val, &ep); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, ep)
	}
	return out
}

// Markers are the chain's live batch markers.
func (e *Env) Markers() []meta.Marker {
	e.t.Helper()
	pg, err := e.Meta.Query(context.Background(), meta.Query{PK: meta.ChainPK(e.Chain.Star, e.Chain.Class), From: meta.MarkerPrefix, To: meta.MarkerPrefix + "~"})
	if err != nil {
		e.t.Fatal(err)
	}
	var out []meta.Marker
	for _, it := range pg.Items {
		var m meta.Marker
		if err := meta.Decode(it.Val, &m); err != nil {
			e.t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// Slots lists the slot keys of epoch in the first zone bucket (every
// committed slot has a copy in at least W of them; trim deletes all).
func (e *Env) Slots(epoch uint64) []string {
	e.t.Helper()
	prefix := fmt.Sprintf("chains/%s/%s/", e.Chain.Star, e.Chain.Class)
	epochKey := chain.SlotKey(e.Chain.Star, e.Chain.Class, epoch, 0)
	epochPrefix := epochKey[:strings.LastIndexByte(epochKey, '/')+1]
	var out []string
	for _, z := range Zones {
		for info, err := range e.Objects.Bucket(z).List(context.Background(), prefix) {
			if err != nil {
				e.t.Fatal(err)
			}
			if strings.HasPrefix(info.Key, epochPrefix) {
				out = append(out, z+"/"+info.Key)
			}
		}
	}
	return out
}

// CheckSettled checks every stream's rows: they tile [0, acked); every
// catalog row's settled object exists in the standard bucket and
// verifies; it returns how many catalog rows there are.
func (e *Env) CheckSettled() (catalog int) {
	e.t.Helper()
	ctx := context.Background()
	for _, id := range e.IDs() {
		var next uint64
		for _, r := range e.Rows(id) {
			if r.FirstSeq != next {
				e.t.Fatalf("stream %s: row at %d after end %d", id, r.FirstSeq, next)
			}
			next = r.EndSeq
			if r.Settled == nil {
				continue
			}
			catalog++
			key := format.SettledKey(Basin, id, r.Settled.Epoch, r.Settled.FirstSeq, r.Settled.Revision)
			obj, err := e.Objects.Bucket(SettledBucket).Get(ctx, key, 0, -1)
			if err != nil {
				e.t.Fatalf("stream %s: settled object %s: %v", id, key, err)
			}
			f, err := format.VerifySettledObject(obj)
			if err != nil || f.FirstSeq != r.FirstSeq || f.EndSeq != r.EndSeq {
				e.t.Fatalf("stream %s: settled object %s [%d,%d) for row [%d,%d): %v", id, key, f.FirstSeq, f.EndSeq, r.FirstSeq, r.EndSeq, err)
			}
		}
		if want := e.Acked(id); next != want {
			e.t.Fatalf("stream %s: rows end at %d, acknowledged %d", id, next, want)
		}
	}
	return catalog
}

// CheckReads reads every stream back through a fresh reader (cold cache)
// and compares it with what was acknowledged.
func (e *Env) CheckReads() {
	e.t.Helper()
	ctx := context.Background()
	rd, err := reader.New(reader.Config{Meta: e.Meta, Objects: e.Objects, SettledBucket: SettledBucket, Logger: Log()})
	if err != nil {
		e.t.Fatal(err)
	}
	for _, id := range e.IDs() {
		e.mu.Lock()
		want := slices.Clone(e.acked[id])
		e.mu.Unlock()
		var got []format.Record
		for next := uint64(0); next < uint64(len(want)); {
			res, err := rd.Read(ctx, reader.Stream{ID: id, Basin: Basin}, reader.AtSeq(next), reader.Limits{Count: len(want) - int(next)}, nil)
			if err != nil {
				e.t.Fatalf("read %s from %d: %v", id, next, err)
			}
			if len(res.Records) == 0 {
				e.t.Fatalf("read %s from %d: nothing (stop %v)", id, next, res.Stop)
			}
			got = append(got, res.Records...)
			next = res.Next
		}
		for i, w := range want {
			g := got[i]
			if g.SeqNum != w.SeqNum || g.Timestamp != w.Timestamp || !bytes.Equal(g.Body, w.Body) {
				e.t.Fatalf("stream %s record %d: got seq %d %q, want seq %d %q", id, i, g.SeqNum, g.Body, w.SeqNum, w.Body)
			}
		}
	}
}
