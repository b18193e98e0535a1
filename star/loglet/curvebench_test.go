package loglet_test

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

var (
	curveCSV   = flag.String("curve.csv", "", "BenchmarkLatencyCurve: write the curve's points to this CSV file")
	curveRates = flag.String("curve.rates", "1,2,5,10,20,50,100,200", "BenchmarkLatencyCurve: offered ingest rates, MiB/s, ascending")
	curveDur   = flag.Duration("curve.dur", 3*time.Second, "BenchmarkLatencyCurve: how long each rate runs")
)

// BenchmarkLatencyCurve is ack latency against ingest (issue 31 item 6):
// each class at the star's default flush settings on the latency store
// (Standard K=1, PUT p50 40 / p99 150 ms; Express K=3/W=2, 5 / 20 ms),
// 16 streams driven open loop with 10 × 1 KiB batches at each offered
// rate of -curve.rates for -curve.dur. A class stops at the first rate it
// does not sustain, which is still reported: the submitter fell more than
// a quarter of the run behind its schedule, or the acks more than a second
// behind the last submission (a queue growing through the run). With -curve.csv the
// points go to a CSV file that star/e2e/latcurve draws (make bench-curve).
func BenchmarkLatencyCurve(b *testing.B) {
	var rates []int
	for _, f := range strings.Split(*curveRates, ",") {
		r, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || r <= 0 {
			b.Fatalf("-curve.rates: %q is not a rate in MiB/s", f)
		}
		rates = append(rates, r)
	}
	var rows []string
	for _, c := range cutClasses() {
		for _, rate := range rates {
			sustained := true
			b.Run(fmt.Sprintf("%s/%dMiBps", c.name, rate), func(b *testing.B) {
				r := c.rig(b, false)
				ss := r.streams(b, 16)
				req := payload(10, 1024)
				b.ResetTimer()
				start := time.Now()
				lat, lag := driveRateLag(b, ss, rate<<20, *curveDur, req)
				took := time.Since(start)
				b.StopTimer()
				// Acked bytes over the run's schedule, or the longer time the
				// submitter took to send them.
				got := float64(len(lat)) * 10 * 1024 / (*curveDur + lag).Seconds() / (1 << 20)
				sustained = lag <= *curveDur/4 && took-*curveDur-lag <= time.Second
				p50, p99, load := ms(quantile(lat, 0.5)), ms(quantile(lat, 0.99)), load1()
				b.ReportMetric(p50, "p50-ms")
				b.ReportMetric(p99, "p99-ms")
				b.ReportMetric(got, "MiB/s")
				b.ReportMetric(load, "load1")
				rows = append(rows, fmt.Sprintf("%s,%d,%.2f,%.2f,%.2f,%.2f,%t", c.name, rate, got, p50, p99, load, sustained))
			})
			if !sustained {
				break
			}
		}
	}
	if *curveCSV != "" {
		out := "class,offered_mibps,achieved_mibps,p50_ms,p99_ms,load1,sustained\n" + strings.Join(rows, "\n") + "\n"
		if err := os.WriteFile(*curveCSV, []byte(out), 0o644); err != nil {
			b.Fatal(err)
		}
	}
}
