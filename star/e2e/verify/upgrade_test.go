package verify

import (
	"flag"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
)

var (
	flagUpgradeFrom  = flag.String("verify.upgrade-from", "", "folder holding the previous build's star and auditorproc binaries (make upgrade builds them); empty: TestRollingUpgrade is skipped")
	flagUpgradeKills = flag.Int("verify.upgrade-kills", 1, "kill -9 + restart faults while the fleet is mixed (TestRollingUpgrade)")
)

// TestRollingUpgrade runs the linearizability workload on a three-star
// cluster that starts on the previous build (stars and auditor) and is
// upgraded under load the way the stack rolls (docs/deploy.md,
// "Upgrades"): one star per round is drained with its own build's CLI,
// stopped and replaced by this build under a new id; in the round after
// the last star, the auditor is replaced. While the fleet is mixed, a star
// is killed and restarted (-verify.upgrade-kills), so old and new stars
// take each other's streams over, forward to each other and settle each
// other's chains. Every round's history must be linearizable and every
// acknowledged record read back (issue 32 item 5). `make upgrade`.
func TestRollingUpgrade(t *testing.T) {
	if *flagUpgradeFrom == "" {
		t.Skip("needs -verify.upgrade-from DIR with the previous build's star and auditorproc (make upgrade)")
	}
	seed := *flagSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (rerun with -args -verify.seed=%d)", seed, seed)
	ctx := t.Context()
	oldStar := filepath.Join(*flagUpgradeFrom, "star")
	oldAuditor := filepath.Join(*flagUpgradeFrom, "auditorproc")
	newStar := buildStar(t)
	newAuditor := buildAuditorProc(t)

	withFaults := HasFaultControl(ctx, oldStar) && HasFaultControl(ctx, newStar)
	dir := workDir(t)
	cluster := startCluster(t, oldStar, dir, 3, withFaults)
	aud := startAuditorProcess(t, oldAuditor, dir)
	nem := &Nemesis{Cluster: cluster, Rand: rand.New(rand.NewPCG(seed, 1)), SuperviseGrace: superviseGrace}
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

	up := &Upgrade{Binary: newStar, Auditor: aud, AuditorBinary: newAuditor}
	kill := &KillRestart{MaxDown: *flagMaxDown, Rand: rand.New(rand.NewPCG(seed, 2))}
	rounds := len(cluster.Stars) + 1
	fig := runFigures{stars: len(cluster.Stars), storeFaults: map[string]int{}, checks: map[string][]string{}}
	for r := range rounds {
		plan := []Fault{up}
		// Rounds 1 .. stars-1 begin with a mixed fleet.
		if r >= 1 && r < len(cluster.Stars) && r <= *flagUpgradeKills {
			plan = append(plan, kill)
		}
		t.Logf("round %d: faults %v", r, faultNamesOf(plan))
		if !runRound(t, ctx, r, *flagRound, plan, seed, cluster, cat, nem, admins, &fig) {
			break
		}
	}
	reportFigures(t, &fig, rounds)
	if !up.Done(cluster) {
		t.Errorf("the upgrade did not reach every star and the auditor")
	}
	if fig.verified == 0 {
		t.Fatal("no acknowledged record was verified: the run tested nothing")
	}
}

func faultNamesOf(plan []Fault) []string {
	var names []string
	for _, f := range plan {
		names = append(names, f.Name())
	}
	return names
}

// buildAuditorProc builds this tree's auditor process (verify/auditorproc).
func buildAuditorProc(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "auditorproc")
	out, err := exec.Command("go", "build", "-C", filepath.Join(testsvc.RepoRoot(t), "star", "e2e"), "-o", bin, "./verify/auditorproc").CombinedOutput()
	if err != nil {
		t.Fatalf("go build auditorproc: %v\n%s", err, out)
	}
	return bin
}

// startAuditorProcess runs bin (an auditorproc build) on the cluster's
// stores with the timers TestLinearizable's in-process auditor uses.
func startAuditorProcess(t *testing.T, bin, dir string) *Star {
	t.Helper()
	addr := testsvc.Addr(testsvc.FreePort(t))
	a := NewStar(StarSpec{Binary: bin, Endpoint: "http://" + addr, Health: true, LogFile: filepath.Join(dir, "auditor.log"),
		Args: []string{"--sqlite", filepath.Join(dir, "meta.db"), "--fs-root", filepath.Join(dir, "objects"),
			"--settled-bucket", standardBuckets[0], "--scratch", filepath.Join(dir, "scratch"), "--listen", addr,
			"--interval", flagAuditor.String(), "--dead-after", flagDeadAfter.String()}})
	if err := a.Start(t.Context()); err != nil {
		t.Fatalf("start the auditor: %v", err)
	}
	t.Cleanup(func() {
		if err := a.Kill(); err != nil {
			t.Error(err)
		}
		a.Close()
	})
	return a
}
