package failover_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/star/e2e/failover"
)

var (
	flagKills       = flag.Int("failover.kills", 0, "kills per backlog level (0: skip the benchmark)")
	flagBacklogs    = flag.String("failover.backlogs", "0,100,1000", "backlog levels in flights, comma-separated")
	flagDeadAfter   = flag.Duration("failover.dead-after", 2*time.Second, "both stars' --dead-after")
	flagHeartbeat   = flag.Duration("failover.heartbeat", 100*time.Millisecond, "both stars' --registry-heartbeat")
	flagMetaLatency = flag.Duration("failover.meta-latency", 300*time.Millisecond, "the leader's added metastore latency while its backlog builds")
	flagBucketLat   = flag.Duration("failover.bucket-latency", 0, "added to every request of both stars on the Standard bucket")
	flagProducers   = flag.Int("failover.producers", 32, "concurrent producers through the leader while its backlog builds")
)

// TestFailoverBench is the failover benchmark of issue 6 (make
// failover-bench): kill -9 of a stream's leader → first acknowledged
// append through the other star, at several backlog sizes. It runs only
// with -failover.kills N.
func TestFailoverBench(t *testing.T) {
	if *flagKills <= 0 {
		t.Skip("the failover benchmark runs with -failover.kills N (make failover-bench)")
	}
	var levels []int
	for _, f := range strings.Split(*flagBacklogs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 0 {
			t.Fatalf("-failover.backlogs %q: %q is not a flight count", *flagBacklogs, f)
		}
		levels = append(levels, n)
	}
	bin := os.Getenv("STARLOG_STAR_BIN")
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "star")
		if out, err := exec.Command("go", "build", "-C", testsvc.RepoRoot(t), "-o", bin, "./star").CombinedOutput(); err != nil {
			t.Fatalf("go build: %v\n%s", err, out)
		}
	}
	start := time.Now()
	samples, err := failover.Run(context.Background(), failover.Options{
		Binary: bin, Dir: t.TempDir(), Kills: *flagKills, Backlogs: levels,
		DeadAfter: *flagDeadAfter, Heartbeat: *flagHeartbeat, MetaLatency: *flagMetaLatency,
		BucketLatency: *flagBucketLat, Producers: *flagProducers, Logf: t.Logf,
	})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\nfailover: kill -9 of the leader → first ack through the successor (%d kills per level; --dead-after %v, --registry-heartbeat %v, leader metastore +%v while a backlog builds, Standard bucket +%v; %v in all)\n\n",
		*flagKills, *flagDeadAfter, *flagHeartbeat, *flagMetaLatency, *flagBucketLat, time.Since(start).Round(time.Second))
	failover.WriteTable(&b, failover.Summarize(samples))
	fmt.Println(b.String())
}

// Summarize's nearest-rank quantiles and shares (runs in make test).
func TestSummarize(t *testing.T) {
	var samples []failover.Sample
	for i := 1; i <= 20; i++ {
		samples = append(samples, failover.Sample{
			Level: 100, Walked: int64(90 + i%3),
			Total:    time.Duration(i) * time.Second,
			DeadWait: time.Second, Settle: time.Duration(i) * 100 * time.Millisecond,
		})
	}
	samples = append(samples, failover.Sample{Level: 0, Total: 2 * time.Second, DeadWait: 2 * time.Second})
	sums := failover.Summarize(samples)
	if len(sums) != 2 || sums[0].Level != 100 || sums[1].Level != 0 {
		t.Fatalf("levels %+v, want 100 then 0", sums)
	}
	s := sums[0]
	if s.Kills != 20 || s.P50 != 10*time.Second || s.P99 != 20*time.Second || s.Max != 20*time.Second {
		t.Fatalf("p50 %v p99 %v max %v over %d kills, want 10 s, 20 s, 20 s over 20", s.P50, s.P99, s.Max, s.Kills)
	}
	if s.TakeoverP50 != 9*time.Second || s.SettleP50 != time.Second || s.WalkedMax != 92 {
		t.Fatalf("takeover p50 %v, settle p50 %v, walked max %v", s.TakeoverP50, s.SettleP50, s.WalkedMax)
	}
	if s.SettleShare < 0.0999 || s.SettleShare > 0.1001 {
		t.Fatalf("settle share %v, want 0.1", s.SettleShare)
	}
	var b strings.Builder
	failover.WriteTable(&b, sums)
	if !strings.Contains(b.String(), "| 100 | 91 / 92 | 20 | 10000 ms | 20000 ms | 20000 ms |") {
		t.Fatalf("table:\n%s", b.String())
	}
}
