package verify

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta/sqlite"
	"github.com/starlog/starlog/shared/objstore/fs"
	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/auditor"
)

// The short run is the default (make test); make verify passes longer
// figures.
var (
	flagDuration    = flag.Duration("verify.duration", 12*time.Second, "total client time of TestLinearizable")
	flagRound       = flag.Duration("verify.round", 6*time.Second, "length of one checked history (fresh streams each)")
	flagStars       = flag.Int("verify.stars", 3, "star serve processes sharing one SQLite metastore and one object directory")
	flagKills       = flag.Int("verify.kills", 2, "kill -9 + restart faults over the whole run")
	flagHandoffs    = flag.Int("verify.handoffs", 2, "stream handoffs under load over the whole run")
	flagStoreFaults = flag.Int("verify.store-faults", 2, "bucket and metastore faults (slow or down) over the whole run, kinds in turn")
	flagStreams     = flag.Int("verify.streams", 2, "streams per history (alternately standard and express)")
	flagClients     = flag.Int("verify.clients", 4, "client goroutines per stream")
	flagAppenders   = flag.Int("verify.appenders", 1, "more client goroutines per stream that only append (producers: they never wait on a read)")
	flagDurable     = flag.Int("verify.durable", 1, "more client goroutines per even-numbered stream that append through the Durable Streams face (idempotent producers), beside its S2 clients")
	// Off in make test's short run: with them, one clean-clone run's
	// round stayed undecided after the checker's 3 minutes (their retried
	// attempts across a kill -9 make long operations); make verify runs
	// them.
	flagProducers = flag.Int("verify.producers", 0, "more client goroutines per stream that append as idempotent producers of the S2 face (starlog-producer headers), retrying each batch with its mark (make verify: 1)")
	flagKafka     = flag.Int("verify.kafka", 1, "more client goroutines per even-numbered stream that produce through the Kafka face as idempotent kgo producers, the round's streams being one topic's partitions (make test and make verify: 1; 0 turns them off)")
	flagSeed      = flag.Uint64("verify.seed", 0, "random seed (0: from the clock)")
	// Two clean-clone make test runs left a round undecided at 3 minutes:
	// the indefinite appends into a deleted incarnation (no read-back)
	// stayed open. History.Operations now prunes those the run's reads
	// and acks leave no room for (extent.canPlace); both recorded
	// histories then decide in under half a second.
	flagCheckTimeout = flag.Duration("verify.check-timeout", 3*time.Minute, "porcupine's budget per history")
	flagMaxDown      = flag.Duration("verify.max-down", 3*time.Second, "a killed star stays down up to this long (past --dead-after: the others take its streams over)")
	flagDeadAfter    = flag.Duration("verify.dead-after", 2*time.Second, "the stars' --dead-after (heartbeat every tenth of it)")
	flagAuditor      = flag.Duration("verify.auditor", time.Second, "run the auditor (plan, janitor, settle, trim) in the test process this often (0: none)")
	flagMaxHold      = flag.Duration("verify.max-hold", 2500*time.Millisecond, "a bucket or metastore fault holds up to this long (a partition: dead-after + 300ms + up to half of it)")
	flagStoreKinds   = flag.String("verify.store-kinds", "", "comma-separated bucket and metastore fault kinds to inject (empty: all), e.g. down-meta,partition-meta")
	flagKeep         = flag.Bool("verify.keep", false, "keep the stars' data and logs even when the run passes")
	flagZoneHalts    = flag.Int("verify.zone-halts", 1, "halts of the Express epochs with one Express zone black-holed (a deadline halt, then a foreign occupant) over the whole run")
	flagZoneTail     = flag.Duration("verify.zone-tail", time.Second, "a zone-halt keeps its zone down this long after the foreign occupant's recovery window")
	flagExpDeadline  = flag.Duration("verify.express-deadline", 3*time.Second, "the stars' --s3-express-flight-deadline (also their recovery deadline: it must leave room for a fence that waits 1 s for the black-holed zone and for a mint on a loaded metastore; production's is 5 s)")
	flagMetaOutages  = flag.Int("verify.meta-outages", 1, "whole-cluster metastore outages of -verify.meta-outage over the whole run")
	flagMetaOutage   = flag.Duration("verify.meta-outage", 3*time.Second, "how long a metastore outage holds (make verify: 120s)")
	flagAckWindow    = flag.Duration("verify.ack-window", time.Second, "during a metastore outage every stream must have an ack in every window this long, unless its leader's backlog budget filled (make verify: 10s)")
	flagReadTimeout  = flag.Duration("verify.read-timeout", 3*time.Second, "a client gives a read or check-tail up after this long (appends: 10 s); reads that hang on a black-holed bucket must not starve a client's appends")
	flagRecreates    = flag.Int("verify.recreates", 2, "deletes and re-creates of a stream (or, one time in three, the whole basin) of the catalog basin under the same names over the whole run")
	flagCatStreams   = flag.Int("verify.catalog-streams", 2, "streams per history in the catalog basin (alternately standard and express; 0: no catalog basin)")
	flagDelPending   = flag.Duration("verify.deletion-pending", 3*time.Second, "the stars' --deletion-pending: how long a deleted name answers 409 before it may be created again")
	flagBacklog      = flag.Int("verify.backlog-flights", 1024, "the stars' --s3-chain-backlog-flights (a metastore outage fills it)")
)

const basin = "starlog-verify"

// catalogBasin is the basin of the delete and re-create nemesis (Recreate):
// its streams and the basin itself are deleted and created again under
// the same names while its clients run.
const catalogBasin = "starlog-verify-catalog"

// The stars' bucket sets (star serve's defaults, passed explicitly so the
// nemesis knows them).
var (
	standardBuckets = []string{"standard"}
	expressBuckets  = []string{"express-a", "express-b", "express-c"}
)

// buildStar builds the star binary, or takes $STARLOG_STAR_BIN (a binary
// built earlier, e.g. to check a given build).
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

// runFigures are what a run reports (issue 6 asks for them).
type runFigures struct {
	stars, kills, handoffs, handoffsFailed, supervised  int
	recreates, recreatedBasins                          int
	storeFaults                                         map[string]int
	histories, ops, acked, verified, definite412        int
	indefinite, pruned, observed, shortReads, anomalies int
	opsPerHistory                                       []int
	restart                                             []time.Duration
	blips                                               []Blip
	ackLatencies                                        []time.Duration
	zombieExits, illegal, undecided                     int
	// checks are the summaries of the faults' own checks, by fault.
	checks map[string][]string
}

// TestLinearizable runs clients against a cluster of `star serve`
// processes sharing one SQLite metastore and one object directory, while
// the nemesis kills stars with SIGKILL and restarts them, hands streams
// off under load, and slows or downs buckets and the metastore through the
// stars' dev fault controls. Each round is one history on fresh streams:
// it must be linearizable, and a final read-back must find every
// acknowledged record at its seq num, with no seq num acknowledged twice.
func TestLinearizable(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -args -verify.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	ctx := t.Context()

	bin := buildStar(t)
	withFaults := HasFaultControl(ctx, bin)
	if !withFaults && *flagStoreFaults > 0 {
		t.Logf("WARNING: this star binary has no --dev-fault-listen: the %d bucket and metastore faults are skipped", *flagStoreFaults)
	}
	dir := workDir(t)
	cluster := startCluster(t, bin, dir, max(1, *flagStars), withFaults)
	if *flagAuditor > 0 {
		startAuditor(t, dir, *flagAuditor)
	}

	nem := &Nemesis{Cluster: cluster, Rand: rng, SuperviseGrace: superviseGrace}
	admins, err := NewClients(cluster.Endpoints(), 30*time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	createBasin(t, ctx, admins, basin)
	var cat *Catalog
	if *flagCatStreams > 0 {
		cat = NewCatalog(catalogBasin)
		createBasin(t, ctx, admins, catalogBasin)
	}
	plan := buildPlan(seed, cluster, withFaults, cat, admins)

	round := min(*flagRound, *flagDuration)
	rounds := max(1, int((*flagDuration+round-1)/round))
	fig := runFigures{stars: len(cluster.Stars), storeFaults: map[string]int{}, checks: map[string][]string{}}
	for r := range rounds {
		part := plan[len(plan)*r/rounds : len(plan)*(r+1)/rounds]
		if !runRound(t, ctx, r, round, part, seed, cluster, cat, nem, admins, &fig) {
			break
		}
	}
	reportFigures(t, &fig, rounds)
	if fig.verified == 0 {
		t.Fatal("no acknowledged record was verified: the run tested nothing")
	}
}

// workDir is the cluster's data folder, kept (and named in the log) when
// the test fails or -verify.keep is set.
func workDir(t *testing.T) string {
	dir, err := os.MkdirTemp("", "starlog-verify-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || *flagKeep {
			t.Logf("stars' data and logs kept in %s (star-N.log, auditor.log)", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// startCluster starts n `star serve` processes on loopback ports sharing
// dir's metastore and object folder (as `star dev --stars N` does), each
// with its dev fault control when withFaults.
func startCluster(t *testing.T, bin, dir string, n int, withFaults bool) *Cluster {
	t.Helper()
	objects := filepath.Join(dir, "objects")
	if err := os.MkdirAll(objects, 0o755); err != nil {
		t.Fatal(err)
	}
	beat := *flagDeadAfter / 10
	c := &Cluster{Basin: basin, Dir: dir}
	for i := range n {
		id := fmt.Sprintf("star-%d", i+1)
		addr := testsvc.Addr(testsvc.FreePort(t))
		args := []string{"serve",
			"--sqlite", filepath.Join(dir, "meta.db"), "--fs-root", objects,
			"--star-id", id, "--listen", addr, "--address", addr,
			"--standard-buckets", strings.Join(standardBuckets, ","), "--express-buckets", strings.Join(expressBuckets, ","),
			"--registry-heartbeat", beat.String(), "--dead-after", flagDeadAfter.String(),
			"--s3-flush-interval", "5ms", "--shutdown-timeout", "5s",
			// The Durable Streams face serves the run's basin, so its
			// appends share streams with the S2 clients'.
			"--durable-basin", basin,
			// Markers ripen within seconds, so the auditor settles and
			// trims during the run and reads cross span refs, settled
			// objects and trimmed slots, not only the flight index.
			"--settle-linger", "1s", "--settle-age-cap", "2s",
			"--settle-express-linger", "1s", "--settle-express-age-cap", "2s",
			"--read-grace", "2s",
			// A zone-halt halts Express epochs by this deadline; their
			// recovery must finish within it too.
			"--s3-express-flight-deadline", flagExpDeadline.String(),
			"--s3-chain-backlog-flights", fmt.Sprint(*flagBacklog),
			"--deletion-pending", flagDelPending.String(),
			"--log-level", "info"}
		if *flagKafka > 0 {
			// The Kafka face serves the run's basin: the round's streams
			// are a topic's partitions (TopicStream).
			ka := testsvc.Addr(testsvc.FreePort(t))
			args = append(args, "--kafka-listen", ka, "--kafka-basin", basin)
			c.Kafka = append(c.Kafka, ka)
		}
		spec := StarSpec{Binary: bin, Args: args, Env: ClusterEnv(), Endpoint: "http://" + addr, Health: true, ID: id,
			LogFile: filepath.Join(dir, id+".log")}
		if withFaults {
			fa := testsvc.Addr(testsvc.FreePort(t))
			spec.Args = append(spec.Args, "--dev-fault-listen", fa)
			spec.FaultControl = "http://" + fa
		}
		s := NewStar(spec)
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
	// The test process's own handles on the stores, past every star's
	// fault control (the zone-halt and meta-outage faults read heads and
	// leases and write foreign occupants through them).
	ms, err := sqlite.Open(t.Context(), filepath.Join(dir, "meta.db"))
	if err != nil {
		t.Fatalf("checker's metastore: %v", err)
	}
	t.Cleanup(func() { ms.Close() })
	objs, err := fs.New(objects)
	if err != nil {
		t.Fatalf("checker's object store: %v", err)
	}
	c.Meta, c.Objects = ms, objs
	if withFaults {
		doc, err := GetFaults(t.Context(), c.Stars[0])
		if err != nil {
			t.Fatalf("dev fault control: %v", err)
		}
		for _, b := range append(slices.Clone(standardBuckets), expressBuckets...) {
			if _, ok := doc.Buckets[b]; !ok {
				t.Fatalf("dev fault control lists buckets %v, not %s", doc.Buckets, b)
			}
		}
	}
	return c
}

// startAuditor runs the auditor (plan and janitor, then settle, trim-check
// and chain-settle jobs) in the test process on the cluster's stores, as
// the Lambda functions run beside the stars in production.
func startAuditor(t *testing.T, dir string, every time.Duration) {
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
		Standard:  settle.ClassTimers{Linger: time.Second, AgeCap: 2 * time.Second},
		Express:   settle.ClassTimers{Linger: time.Second, AgeCap: 2 * time.Second},
		ReadGrace: 2 * time.Second,
		// The janitor presumes stars dead by the stars' own bound.
		DeadAfter:  *flagDeadAfter,
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
	r, err := auditor.New(st, auditor.Options{Interval: every})
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

// buildPlan lists the run's faults in a random order: the kills, the
// handoffs and the store faults (kinds in turn, each turn shuffled).
func buildPlan(seed uint64, c *Cluster, withFaults bool, cat *Catalog, admins []*sdk.Client) []Fault {
	rng := rand.New(rand.NewPCG(seed, 3))
	var plan []Fault
	if cat != nil {
		rc := &Recreate{Catalog: cat, Clients: admins, Rand: rand.New(rand.NewPCG(seed, 6)), Timeout: *flagDelPending + time.Minute}
		for range *flagRecreates {
			plan = append(plan, rc)
		}
	}
	kill := &KillRestart{MaxDown: *flagMaxDown, Rand: rand.New(rand.NewPCG(seed, 2))}
	for range *flagKills {
		plan = append(plan, kill)
	}
	if len(c.Stars) > 1 {
		h := &Handoff{Rand: rand.New(rand.NewPCG(seed, 4)), Timeout: 15 * time.Second}
		for range *flagHandoffs {
			plan = append(plan, h)
		}
	}
	if withFaults {
		da := *flagDeadAfter
		mh := max(*flagMaxHold, time.Second)
		holds := map[StoreFaultKind][2]time.Duration{
			SlowBucket:         {500 * time.Millisecond, mh},
			DownExpressBucket:  {500 * time.Millisecond, mh},
			DownStandardBucket: {500 * time.Millisecond, mh},
			SlowMeta:           {500 * time.Millisecond, mh},
			DownMeta:           {500 * time.Millisecond, mh},
			// Past dead-after: the others take the star's streams over.
			PartitionMeta: {da + 300*time.Millisecond, da + 300*time.Millisecond + mh/2},
		}
		kinds := map[StoreFaultKind]*StoreFault{}
		only := map[string]bool{}
		for _, k := range strings.Split(*flagStoreKinds, ",") {
			if k = strings.TrimSpace(k); k != "" {
				only[k] = true
			}
		}
		for i, k := range StoreFaultKinds {
			if k == PartitionMeta && len(c.Stars) < 2 || len(only) > 0 && !only[k.String()] {
				continue
			}
			kinds[k] = &StoreFault{Kind: k, Standard: standardBuckets, Express: expressBuckets,
				MinHold: holds[k][0], MaxHold: holds[k][1], Rand: rand.New(rand.NewPCG(seed, uint64(10+i)))}
		}
		var turn []StoreFaultKind
		for range *flagStoreFaults {
			if len(kinds) == 0 {
				break
			}
			if len(turn) == 0 {
				for _, k := range StoreFaultKinds {
					if kinds[k] != nil {
						turn = append(turn, k)
					}
				}
				rng.Shuffle(len(turn), func(i, j int) { turn[i], turn[j] = turn[j], turn[i] })
			}
			plan = append(plan, kinds[turn[0]])
			turn = turn[1:]
		}
	}
	if withFaults {
		zh := &ZoneHalt{Express: expressBuckets, Deadline: *flagExpDeadline, Lead: time.Second, Tail: *flagZoneTail, ReadTimeout: *flagReadTimeout, DeadAfter: *flagDeadAfter,
			Rand: rand.New(rand.NewPCG(seed, 5))}
		for range *flagZoneHalts {
			plan = append(plan, zh)
		}
		mo := &MetaOutage{Hold: *flagMetaOutage, Window: *flagAckWindow, DeadAfter: *flagDeadAfter}
		for range *flagMetaOutages {
			plan = append(plan, mo)
		}
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	return plan
}

// createBasin creates a basin of the run through the first star that
// takes the call.
func createBasin(t *testing.T, ctx context.Context, admins []*sdk.Client, basin string) {
	t.Helper()
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	i := 0
	err := retry(cctx, func() error {
		i++
		_, err := admins[i%len(admins)].CreateBasin(cctx, basin, &api.BasinConfig{})
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status == 409 {
			return nil // an earlier attempt created it
		}
		return err
	})
	if err != nil {
		t.Fatalf("create basin %s: %v", basin, err)
	}
}

// runRound runs one history; it reports false when the run must stop.
func runRound(t *testing.T, ctx context.Context, r int, d time.Duration, plan []Fault, seed uint64,
	cluster *Cluster, cat *Catalog, nem *Nemesis, admins []*sdk.Client, fig *runFigures) bool {
	t.Helper()
	streams, classes := createStreams(t, ctx, r, admins, basin, "lin", *flagStreams)
	if *flagKafka > 0 {
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := retry(cctx, func() error { return CreateTopic(cctx, cluster.Kafka, roundTopic(r), len(streams)) })
		cancel()
		if err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
	}
	var express []string
	for i, c := range classes {
		if c == api.StorageExpress {
			express = append(express, streams[i])
		}
	}
	var catStreams []string
	if cat != nil {
		var catClasses []api.StorageClass
		catStreams, catClasses = createStreams(t, ctx, r, admins, cat.Basin, "cat", *flagCatStreams)
		cat.SetStreams(catStreams, catClasses)
	}
	cluster.SetStreams(streams)
	cluster.SetExpress(express)

	h := NewHistory()
	// Client ids past the workload's: the final read-backs', then the
	// delete+recreate fault's read-backs.
	readers := (len(streams) + len(catStreams)) * (*flagClients + *flagAppenders + *flagDurable + *flagProducers + *flagKafka)
	if cat != nil {
		cat.SetHistory(h, readers+2)
	}
	w := &Workload{Endpoints: cluster.Endpoints(), Basin: basin, Streams: streams,
		ClientsPerStream: *flagClients, AppendersPerStream: *flagAppenders, DurablePerStream: *flagDurable,
		ProducersPerStream: *flagProducers, KafkaPerStream: *flagKafka, KafkaBrokers: cluster.Kafka,
		Seed: seed + uint64(r), ReadTimeout: *flagReadTimeout}
	// The clients run for d and at least until the nemesis has injected
	// every planned fault and BlipMargin more (a handoff's blip is
	// measured until then).
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var nr struct {
		evs []FaultEvent
		err error
	}
	nemDone := make(chan struct{})
	go func() {
		defer close(nemDone)
		nr.evs, nr.err = nem.RunPlan(ctx, d, plan, func() time.Duration { return time.Duration(h.Now()) })
	}()
	go func() {
		defer cancel()
		select {
		case <-time.After(d):
		case <-cctx.Done():
			return
		}
		select {
		case <-nemDone:
		case <-cctx.Done():
			return
		}
		select {
		case <-time.After(BlipMargin):
		case <-cctx.Done():
		}
	}()
	catDone := make(chan error, 1)
	if cat != nil {
		// The catalog basin's clients run beside the others, into the
		// same history, under the Recreate faults' gate.
		wc := &Workload{Endpoints: cluster.Endpoints(), Basin: cat.Basin, Streams: catStreams, Catalog: cat,
			ClientsPerStream: *flagClients, AppendersPerStream: *flagAppenders,
			Seed: seed + uint64(r) + 1<<32, ReadTimeout: *flagReadTimeout}
		go func() { catDone <- wc.Run(cctx, h) }()
	} else {
		catDone <- nil
	}
	if err := w.Run(cctx, h); err != nil {
		t.Fatalf("round %d: clients: %v", r, err)
	}
	if err := <-catDone; err != nil {
		t.Fatalf("round %d: catalog clients: %v", r, err)
	}
	<-nemDone
	if nr.err != nil {
		t.Errorf("round %d: nemesis: %v", r, nr.err)
		dumpStars(t, cluster)
		return false
	}
	countSupervised(t, r, nr.evs, fig)
	for _, ev := range nr.evs {
		switch {
		case ev.Fault == "kill-9+restart":
			fig.kills++
			fig.restart = append(fig.restart, (ev.Recovered - ev.At).Round(time.Millisecond))
		case ev.Fault == "handoff" && ev.Failed:
			fig.handoffsFailed++
			t.Logf("round %d: handoff not done: %s", r, ev.Detail)
		case ev.Fault == "handoff":
			fig.handoffs++
		case ev.Fault == "delete+recreate":
			fig.recreates++
			if strings.HasPrefix(ev.Detail, "basin ") {
				fig.recreatedBasins++
			}
			t.Logf("round %d: %s", r, ev.Detail)
		case ev.Fault == "supervisor-restart":
		case ev.Fault == "upgrade": // TestRollingUpgrade's
			t.Logf("round %d: upgrade: %s", r, ev.Detail)
		case ev.Failed:
			t.Logf("round %d: %s not done: %s", r, ev.Fault, ev.Detail)
		default:
			fig.storeFaults[ev.Fault]++
		}
	}

	// Read back through the stars (restarted if the nemesis just killed
	// one, its streams taken over if one was partitioned).
	rb, cancelRB := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelRB()
	sevs, err := cluster.Supervise(rb, superviseGrace)
	nr.evs = append(nr.evs, sevs...)
	countSupervised(t, r, sevs, fig)
	if err != nil {
		t.Errorf("round %d: %v", r, err)
		dumpStars(t, cluster)
		return false
	}
	order := append(slices.Clone(admins[r%len(admins):]), admins[:r%len(admins)]...)
	readBack, err := ReadBack(rb, order, basin, streams, nil, h, readers)
	var retired map[string]bool
	if err == nil && cat != nil {
		var rc map[string][]uint64
		rc, err = ReadBack(rb, order, cat.Basin, catStreams, cat.Key, h, readers+1)
		maps.Copy(readBack, rc)
		retired = cat.Retired()
	}
	if err != nil {
		t.Errorf("round %d: %v", r, err)
		dumpStars(t, cluster)
		return false
	}
	verified, bad := VerifyAcks(h, readBack, retired)
	bad = append(append(append(h.Anomalies(), h.CheckReports()...), DuplicateAcks(h.Acks())...), bad...)
	bad = append(bad, faultChecks(t, r, h, nr.evs, fig)...)

	h.Unread(retired)
	res, err := Check(h, *flagCheckTimeout, filepath.Join(cluster.Dir, fmt.Sprintf("round-%d", r)))
	if err != nil {
		t.Fatalf("round %d: check: %v", r, err)
	}
	if res.Result != porcupine.Ok || len(bad) > 0 {
		d := filepath.Join(cluster.Dir, fmt.Sprintf("round-%d", r))
		p := filepath.Join(d, "history.jsonl")
		_ = os.MkdirAll(d, 0o755)
		if err := WriteHistory(p, h.Operations()); err != nil {
			t.Errorf("round %d: %v", r, err)
		} else {
			t.Logf("round %d: history written to %s", r, p)
		}
	}
	st := h.Stats()
	ops := h.Operations()
	lat := AckLatencies(h)
	blips := HandoffBlips(h, nr.evs)
	t.Logf("round %d: %d faults %v; %d ops checked %v (appends %d: %d acked, %d 412, %d indefinite of which %d pruned (%d into deleted incarnations, ruled out by the reads and acks) and %d observed, %d no effect; reads %d, 416 %d; check-tails %d); %d acked records verified; ack latency p50 %v p99 %v max %v; porcupine %s in %v",
		r, len(nr.evs), faultNames(nr.evs), res.Operations, OpsByStream(ops), st.Appends, st.Acked, st.Definite412, st.Indefinite, st.Pruned, st.Unplaceable, st.Observed,
		st.NoEffect, st.Reads, st.RangeNotSatisfiable, st.CheckTails, verified,
		Quantile(lat, 0.5).Round(time.Millisecond), Quantile(lat, 0.99).Round(time.Millisecond), Quantile(lat, 1).Round(time.Millisecond),
		res.Result, res.Duration.Round(time.Millisecond))
	for _, b := range blips {
		clean := ""
		if !b.Clean {
			clean = " (another fault within " + BlipMargin.String() + ")"
		}
		t.Logf("round %d: handoff of %s at %v (+%v)%s: max acked append latency %v, longest ack gap %v, %d acks within it",
			r, b.Stream, b.At.Round(time.Millisecond), (b.End - b.At).Round(time.Millisecond), clean,
			b.MaxAckLatency.Round(time.Millisecond), b.AckGap.Round(time.Millisecond), b.Acks)
	}
	t.Logf("round %d: Durable Streams appends %d: %d acked, %d duplicates (204), %d refused; %d attempts sent again",
		r, st.DurableAppends, st.DurableAcked, st.DurableDuplicates, st.DurableRefused, st.DurableRetries)
	if *flagDurable > 0 && st.DurableAcked == 0 {
		t.Errorf("round %d: no Durable Streams append was acknowledged: the mixed workload did not run", r)
	}
	t.Logf("round %d: S2 idempotent producer appends %d: %d acked, %d refused; %d attempts sent again",
		r, st.ProducerAppends, st.ProducerAcked, st.ProducerRefused, st.ProducerRetries)
	if *flagProducers > 0 && st.ProducerAcked == 0 {
		t.Errorf("round %d: no idempotent producer append was acknowledged: the producers did not run", r)
	}
	t.Logf("round %d: Kafka produces %d records: %d acked", r, st.KafkaProduces, st.KafkaAcked)
	if *flagKafka > 0 && st.KafkaAcked == 0 {
		t.Errorf("round %d: no Kafka produce was acknowledged: the Kafka producers did not run", r)
	}
	if st.ShortReads > 0 {
		t.Logf("round %d: %d short reads, e.g. %s", r, st.ShortReads, strings.Join(h.ShortReads(), "; "))
	}
	if len(bad) > 0 {
		t.Errorf("round %d: %d violations (read-back, reports, the faults' own checks), first: %s", r, len(bad), strings.Join(bad[:min(len(bad), 10)], "; "))
	}
	switch res.Result {
	case porcupine.Ok:
	case porcupine.Illegal:
		fig.illegal++
		t.Errorf("round %d: history is not linearizable; visualization: %s\n%s", r, res.Visualization, res.Explanation)
	default:
		fig.undecided++
		t.Errorf("round %d: porcupine undecided after %v; visualization: %s", r, *flagCheckTimeout, res.Visualization)
	}
	if res.Result == porcupine.Ok {
		mutationCheck(t, r, ops)
	}
	fig.histories++
	fig.ops += res.Operations
	fig.opsPerHistory = append(fig.opsPerHistory, res.Operations)
	fig.acked += st.Acked
	fig.verified += verified
	fig.indefinite += st.Indefinite
	fig.pruned += st.Pruned
	fig.observed += st.Observed
	fig.definite412 += st.Definite412
	fig.shortReads += st.ShortReads
	fig.anomalies += len(bad)
	fig.blips = append(fig.blips, blips...)
	fig.ackLatencies = append(fig.ackLatencies, lat...)
	if st.Acked == 0 {
		t.Errorf("round %d: no append was acknowledged", r)
	}
	if t.Failed() {
		t.Logf("round %d fault timeline (history clock): %s", r, strings.Join(faultDetails(nr.evs), "; "))
		dumpStars(t, cluster)
		return false
	}
	return true
}

// roundTopic is the Kafka topic whose partitions are round r's streams
// (with -verify.kafka).
func roundTopic(r int) string { return fmt.Sprintf("lin-r%d", r) }

// createStreams creates the round's n streams of basin, named
// <prefix>-r<round>-s<i>, alternately Standard and Express, through
// the stars in turn; it returns their names and classes.
func createStreams(t *testing.T, ctx context.Context, r int, admins []*sdk.Client, basin, prefix string, n int) ([]string, []api.StorageClass) {
	t.Helper()
	streams := make([]string, n)
	classes := make([]api.StorageClass, n)
	for i := range streams {
		streams[i] = fmt.Sprintf("%s-r%d-s%d", prefix, r, i)
		if *flagKafka > 0 && prefix == "lin" {
			streams[i] = TopicStream(roundTopic(r), i)
		}
		class := api.StorageStandard
		if i%2 == 1 {
			class = api.StorageExpress
		}
		classes[i] = class
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		attempt := 0
		err := retry(cctx, func() error {
			attempt++
			_, err := admins[(r+i+attempt)%len(admins)].Basin(basin).CreateStream(cctx, streams[i], &api.StreamConfig{StorageClass: &class})
			var ae *api.Error
			if errors.As(err, &ae) && ae.Status == 409 {
				return nil // an earlier attempt created it
			}
			return err
		})
		cancel()
		if err != nil {
			t.Fatalf("round %d: create stream %s/%s: %v", r, basin, streams[i], err)
		}
	}
	return streams, classes
}

// faultChecks collects what the faults found while they ran, runs their
// checks of the history, and refuses a supervisor restart right after a
// fault that must leave every star serving (zone-halt, meta-outage).
func faultChecks(t *testing.T, r int, h *History, evs []FaultEvent, fig *runFigures) []string {
	t.Helper()
	var bad []string
	last := ""
	for i, ev := range evs {
		if ev.Fault == "supervisor-restart" {
			// A whole-cluster metastore outage must leave every star
			// running; a zone-halt must leave every star healthy (a
			// zombie exit there is the registry's, not the fault's: the
			// zone-halt's own checks judge what it did).
			if last == "meta-outage" || last == "zone-halt" && !strings.Contains(ev.Detail, "exited as a zombie") {
				bad = append(bad, fmt.Sprintf("%s: the supervisor restarted a star after it: %s", last, ev.Detail))
			}
			continue
		}
		last = ev.Fault
		bad = append(bad, ev.Violations...)
		if ev.Check != nil {
			until := time.Duration(math.MaxInt64)
			if i+1 < len(evs) {
				until = evs[i+1].At
			}
			summary, vs := ev.Check(h, until)
			t.Logf("round %d: %s", r, summary)
			fig.checks[ev.Fault] = append(fig.checks[ev.Fault], summary)
			bad = append(bad, vs...)
		}
		if ev.Fault == "zone-halt" || ev.Fault == "meta-outage" {
			t.Logf("round %d: %s: %s", r, ev.Fault, ev.Detail)
		}
	}
	return bad
}

// superviseGrace is how long a star may answer /health with an error
// after a fault before the harness restarts it, as production's health
// check would replace it.
const superviseGrace = 3 * time.Second

// countSupervised counts and logs the supervisor's restarts among evs.
func countSupervised(t *testing.T, r int, evs []FaultEvent, fig *runFigures) {
	t.Helper()
	for _, ev := range evs {
		if ev.Fault == "supervisor-restart" {
			fig.supervised++
			if strings.Contains(ev.Detail, "exited as a zombie") {
				fig.zombieExits++
			}
			t.Logf("round %d: %s", r, ev.Detail)
		}
	}
}

// dumpStars logs the tail of every star's output and where the full logs
// are.
func dumpStars(t *testing.T, c *Cluster) {
	t.Helper()
	for i, s := range c.Stars {
		t.Logf("star %d (%s, log %s) output (tail):\n%s", i, s.ID(), s.LogFile(), s.out.Last(6000))
	}
}

func reportFigures(t *testing.T, fig *runFigures, rounds int) {
	t.Helper()
	ops := slices.Clone(fig.opsPerHistory)
	slices.Sort(ops)
	var kinds []string
	total := 0
	for k, n := range fig.storeFaults {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		total += n
	}
	sort.Strings(kinds)
	slices.Sort(fig.ackLatencies)
	var lats, gaps, cleanLats, cleanGaps []time.Duration
	for _, b := range fig.blips {
		lats, gaps = append(lats, b.MaxAckLatency.Round(time.Millisecond)), append(gaps, b.AckGap.Round(time.Millisecond))
		if b.Clean {
			cleanLats, cleanGaps = append(cleanLats, b.MaxAckLatency.Round(time.Millisecond)), append(cleanGaps, b.AckGap.Round(time.Millisecond))
		}
	}
	for _, l := range [][]time.Duration{lats, gaps, cleanLats, cleanGaps} {
		slices.Sort(l)
	}
	slices.Sort(fig.restart)
	median := func(v []int) int {
		if len(v) == 0 {
			return 0
		}
		return v[len(v)/2]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "figures (%d stars):\n", fig.stars)
	fmt.Fprintf(&b, "  kill -9s survived: %d (restart to serving p50 %v, max %v)\n", fig.kills, Quantile(fig.restart, 0.5), Quantile(fig.restart, 1))
	fmt.Fprintf(&b, "  handoffs under load: %d (%d not done)\n", fig.handoffs, fig.handoffsFailed)
	fmt.Fprintf(&b, "  deletes and re-creates under the same names: %d (%d of the whole basin)\n", fig.recreates, fig.recreatedBasins)
	fmt.Fprintf(&b, "  handoff blip (longest acked append around it / longest time without an ack on its stream from its start):\n"+
		"    %d clean handoffs (no other fault within %v): median %v / %v, max %v / %v\n"+
		"    all handoffs: median %v / %v, max %v / %v\n"+
		"    (every acked append of the run: p50 %v, p99 %v)\n",
		len(cleanLats), BlipMargin, Quantile(cleanLats, 0.5), Quantile(cleanGaps, 0.5), Quantile(cleanLats, 1), Quantile(cleanGaps, 1),
		Quantile(lats, 0.5), Quantile(gaps, 0.5), Quantile(lats, 1), Quantile(gaps, 1),
		Quantile(fig.ackLatencies, 0.5).Round(time.Millisecond), Quantile(fig.ackLatencies, 0.99).Round(time.Millisecond))
	fmt.Fprintf(&b, "  bucket/metastore faults: %d [%s]\n", total, strings.Join(kinds, ", "))
	for _, k := range []string{"zone-halt", "meta-outage"} {
		for _, c := range fig.checks[k] {
			fmt.Fprintf(&b, "    %s\n", c)
		}
	}
	fmt.Fprintf(&b, "  stars restarted by the supervisor: %d (%d exited as zombies: presumed dead or deposed; %d unhealthy for %v)\n",
		fig.supervised, fig.zombieExits, fig.supervised-fig.zombieExits, superviseGrace)
	fmt.Fprintf(&b, "  histories checked: %d of %d; operations per history min %d / median %d / max %d (%d in all)\n",
		fig.histories, rounds, Quantile(ops, 0), median(ops), Quantile(ops, 1), fig.ops)
	fmt.Fprintf(&b, "  appends acknowledged: %d; acknowledged records verified by read-back: %d\n", fig.acked, fig.verified)
	fmt.Fprintf(&b, "  indefinite appends: %d (%d never happened, %d observed); definite 412s: %d; short reads: %d\n",
		fig.indefinite, fig.pruned, fig.observed, fig.definite412, fig.shortReads)
	fmt.Fprintf(&b, "  anomalies: %d violations (read-back, reports, the faults' checks), %d non-linearizable histories, %d undecided", fig.anomalies, fig.illegal, fig.undecided)
	t.Log(b.String())
}

func faultNames(evs []FaultEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%s@%v(+%v)", ev.Fault, ev.At.Round(time.Millisecond), (ev.Recovered-ev.At).Round(time.Millisecond)))
	}
	return out
}

func faultDetails(evs []FaultEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%s@%v..%v: %s", ev.Fault, ev.At.Round(time.Millisecond), ev.Recovered.Round(time.Millisecond), ev.Detail))
	}
	return out
}

// mutationCheck shifts one acknowledged append of the real history by one
// seq and expects the checker to reject it: a guard against a model that
// accepts everything.
func mutationCheck(t *testing.T, r int, ops []porcupine.Operation) {
	t.Helper()
	var acked []int
	for i, op := range ops {
		if op.Input.(*Input).Kind == KindAppend && op.Output.(*Output).Outcome == OutOK {
			acked = append(acked, i)
		}
	}
	if len(acked) == 0 {
		return
	}
	i := acked[len(acked)/2]
	mut := append([]porcupine.Operation(nil), ops...)
	out := *mut[i].Output.(*Output)
	out.Start++
	out.End++
	mut[i].Output = &out
	switch res := porcupine.CheckOperationsTimeout(Model(), mut, time.Minute); res {
	case porcupine.Illegal:
	case porcupine.Unknown:
		t.Logf("round %d: mutation check undecided within a minute", r)
	default:
		t.Errorf("round %d: the history with ack %s moved by one seq still checks %v", r, describeOperation(mut[i].Input, mut[i].Output), res)
	}
}
