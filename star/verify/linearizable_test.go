package verify

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/shared/testsvc"
)

// The short run is the default (make test); make verify passes longer
// figures.
var (
	flagDuration     = flag.Duration("verify.duration", 10*time.Second, "total client time of TestLinearizable")
	flagRound        = flag.Duration("verify.round", 10*time.Second, "length of one checked history (fresh streams each)")
	flagKills        = flag.Int("verify.kills", 3, "kill -9 + restart faults over the whole run")
	flagStreams      = flag.Int("verify.streams", 2, "streams per history (alternately standard and express)")
	flagClients      = flag.Int("verify.clients", 4, "client goroutines per stream")
	flagSeed         = flag.Uint64("verify.seed", 0, "random seed (0: from the clock)")
	flagCheckTimeout = flag.Duration("verify.check-timeout", 3*time.Minute, "porcupine's budget per history")
	flagMaxDown      = flag.Duration("verify.max-down", 300*time.Millisecond, "a killed star stays down up to this long")
)

const basin = "starlog-dev"

// buildStar builds the star binary, or takes $STARLOG_STAR_BIN (a binary
// built earlier, e.g. to check a given build).
func buildStar(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("STARLOG_STAR_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "star")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/starlog/starlog/star").CombinedOutput()
	if err != nil {
		t.Fatalf("go build star: %v\n%s", err, out)
	}
	return bin
}

// runFigures are what a run reports (issue 6 asks for them).
type runFigures struct {
	kills, histories, ops, acked, verified, indefinite, pruned, definite412 int
	opsPerHistory                                                           []int
	restart                                                                 []time.Duration
}

// TestLinearizable runs clients against a real `star dev` process while
// the nemesis kills it with SIGKILL and restarts it on the same data. Each
// round is one history on fresh streams: it must be linearizable, and a
// final read-back must find every acknowledged record at its seq num.
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

	bin := buildStar(t)
	data := t.TempDir()
	addr := testsvc.Addr(testsvc.FreePort(t))
	star := NewStar(StarSpec{
		Binary: bin,
		Args: []string{"dev", "--data", data, "--listen", addr,
			"--s3-flush-interval", "5ms", "--shutdown-timeout", "5s",
			// Settle and trim during the run, so reads cross span refs,
			// settled objects and trimmed slots, not only the flight index.
			"--auditor-interval", "1s", "--settle-linger", "2s", "--settle-express-linger", "1s",
			"--read-grace", "2s"},
		Env:      []string{"STARLOG_LOG_LEVEL=warn"},
		Endpoint: "http://" + addr,
	})
	ctx := t.Context()
	if err := star.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := star.Kill(); err != nil {
			t.Error(err)
		}
	})
	cluster := &Cluster{Stars: []*Star{star}}
	nem := &Nemesis{Cluster: cluster, Rand: rng,
		Faults: []Fault{&KillRestart{MaxDown: *flagMaxDown, Rand: rand.New(rand.NewPCG(seed, 2))}}}
	admin, err := sdk.New(sdk.Config{AccountEndpoint: star.Endpoint()})
	if err != nil {
		t.Fatal(err)
	}

	round := min(*flagRound, *flagDuration)
	rounds := max(1, int((*flagDuration+round-1)/round))
	var fig runFigures
	for r := range rounds {
		kills := *flagKills*(r+1)/rounds - *flagKills*r/rounds
		if !runRound(t, ctx, r, round, kills, seed, cluster, nem, admin, &fig) {
			break
		}
	}
	t.Logf("figures: %d kill -9s survived; %d histories checked, operations per history %v; "+
		"%d appends acknowledged, %d acknowledged records verified by read-back; "+
		"%d indefinite appends (%d never happened), %d definite 412s; restart to serving %v",
		fig.kills, fig.histories, fig.opsPerHistory, fig.acked, fig.verified, fig.indefinite, fig.pruned, fig.definite412, fig.restart)
	if fig.verified == 0 {
		t.Fatal("no acknowledged record was verified: the run tested nothing")
	}
}

// runRound runs one history; it reports false when the run must stop.
func runRound(t *testing.T, ctx context.Context, r int, d time.Duration, kills int, seed uint64,
	cluster *Cluster, nem *Nemesis, admin *sdk.Client, fig *runFigures) bool {
	t.Helper()
	streams := make([]string, *flagStreams)
	for i := range streams {
		streams[i] = fmt.Sprintf("lin-r%d-s%d", r, i)
		class := api.StorageStandard
		if i%2 == 1 {
			class = api.StorageExpress
		}
		cctx, cancel := context.WithTimeout(ctx, time.Minute)
		err := retry(cctx, func() error {
			_, err := admin.Basin(basin).CreateStream(cctx, streams[i], &api.StreamConfig{StorageClass: &class})
			var ae *api.Error
			if errors.As(err, &ae) && ae.Status == 409 {
				return nil // an earlier attempt created it
			}
			return err
		})
		cancel()
		if err != nil {
			t.Fatalf("round %d: create stream %s: %v", r, streams[i], err)
		}
	}

	h := NewHistory()
	w := &Workload{Endpoints: cluster.Endpoints(), Basin: basin, Streams: streams,
		ClientsPerStream: *flagClients, Seed: seed + uint64(r)}
	rctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	type nemResult struct {
		evs []FaultEvent
		err error
	}
	nemDone := make(chan nemResult, 1)
	go func() {
		evs, err := nem.Run(rctx, d, kills, func() time.Duration { return time.Duration(h.Now()) })
		nemDone <- nemResult{evs, err}
	}()
	if err := w.Run(rctx, h); err != nil {
		t.Fatalf("round %d: clients: %v", r, err)
	}
	nr := <-nemDone
	if nr.err != nil {
		t.Fatalf("round %d: nemesis: %v\nstar output:\n%s", r, nr.err, cluster.Stars[0].Output())
	}
	for _, ev := range nr.evs {
		fig.restart = append(fig.restart, (ev.Recovered - ev.At).Round(time.Millisecond))
	}

	// Read back through the star (restarted if the nemesis just killed it).
	rb, cancelRB := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelRB()
	readBack, err := ReadBack(rb, admin, basin, streams, h, len(streams)**flagClients)
	if err != nil {
		t.Fatalf("round %d: %v\nstar output:\n%s", r, err, cluster.Stars[0].Output())
	}
	verified, bad := VerifyAcks(h, readBack)
	bad = append(append(h.Anomalies(), h.CheckReports()...), bad...)

	res, err := Check(h, *flagCheckTimeout, "")
	if err != nil {
		t.Fatalf("round %d: check: %v", r, err)
	}
	st := h.Stats()
	ops := h.Operations()
	t.Logf("round %d: %d faults %v; %d ops checked %v (appends %d: %d acked, %d 412, %d indefinite of which %d pruned, %d no effect; reads %d, 416 %d; check-tails %d); %d acked records verified; porcupine %s in %v",
		r, len(nr.evs), faultNames(nr.evs), res.Operations, OpsByStream(ops), st.Appends, st.Acked, st.Definite412, st.Indefinite, st.Pruned,
		st.NoEffect, st.Reads, st.RangeNotSatisfiable, st.CheckTails, verified, res.Result, res.Duration.Round(time.Millisecond))
	if st.ShortReads > 0 {
		t.Logf("round %d: %d short reads, e.g. %s", r, st.ShortReads, strings.Join(h.ShortReads(), "; "))
	}
	if len(bad) > 0 {
		t.Errorf("round %d: %d read-back violations, first: %s", r, len(bad), strings.Join(bad[:min(len(bad), 10)], "; "))
	}
	switch res.Result {
	case porcupine.Ok:
	case porcupine.Illegal:
		t.Errorf("round %d: history is not linearizable; visualization: %s\n%s", r, res.Visualization, res.Explanation)
	default:
		t.Errorf("round %d: porcupine undecided after %v; visualization: %s", r, *flagCheckTimeout, res.Visualization)
	}
	if res.Result == porcupine.Ok {
		mutationCheck(t, r, ops)
	}
	fig.kills += len(nr.evs)
	fig.histories++
	fig.ops += res.Operations
	fig.opsPerHistory = append(fig.opsPerHistory, res.Operations)
	fig.acked += st.Acked
	fig.verified += verified
	fig.indefinite += st.Indefinite
	fig.pruned += st.Pruned
	fig.definite412 += st.Definite412
	if st.Acked == 0 {
		t.Errorf("round %d: no append was acknowledged", r)
	}
	if t.Failed() {
		t.Logf("star output (tail):\n%s", cluster.Stars[0].out.Last(8000))
		return false
	}
	return true
}

func faultNames(evs []FaultEvent) []string {
	var out []string
	for _, ev := range evs {
		out = append(out, fmt.Sprintf("%s@%v(+%v)", ev.Fault, ev.At.Round(time.Millisecond), (ev.Recovered-ev.At).Round(time.Millisecond)))
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
