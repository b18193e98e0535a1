// Package kafkabench sets the Kafka face beside the S2 face of one `star
// dev` (issue 30's performance section, `make bench-kafka`): the same
// records produced through franz-go's kgo client and through the Go SDK's
// S2S append session, and read back through a kgo consumer and an S2S read
// session, interleaved run by run; it reports each row's medians and the
// Kafka/S2S ratio (docs/bench.md).
package kafkabench

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/starlog/starlog/star/e2e/peerbench"
)

// Workload is one row of the table.
type Workload struct {
	Name string
	// Shape is "produce" (Producers producers, each on its own partition
	// or stream, keeping at most InFlight records unacknowledged) or
	// "consume" (one reader, Messages records of a partition filled once
	// before the runs, from its start).
	Shape     string
	Producers int
	InFlight  int
	// Linger is how long both clients let a batch's first record wait
	// for more (kgo ProducerLinger, the SDK producer's Linger); 0: none,
	// each record goes as soon as the client can send it.
	Linger   time.Duration
	Messages int
	// Idempotent: the kgo producers are idempotent (InitProducerId);
	// the S2 side is the same append session.
	Idempotent bool
	// Express: the row runs on the star with S3 Express-like latency on
	// its Express buckets; its goal is on ack p99, not throughput.
	Express bool
}

// Goals of issue 30: the Kafka face's produce throughput at ≥ 0.8 of
// S2S's; on Express timings its produce p99 within 2 ms of S2S's.
const (
	GoalThroughputRatio = 0.8
	GoalExpressP99      = 2 * time.Millisecond
)

// Sample is one run of one workload on one face.
type Sample struct {
	Rate     float64 // records per second
	P50, P99 time.Duration
	// Lat holds every acknowledgement's latency of the run (produce
	// rows): the table's percentiles pool them over the runs, as a
	// median of per-run p99s would rest on a handful of acks each.
	Lat []time.Duration
}

// Row is one workload's samples, run by run, by face ("S2S" is the S2
// face: an append session, or a read session; CLI is `star read`).
type Row struct {
	Workload Workload
	Kafka    []Sample
	S2S      []Sample
	CLI      []Sample
}

// Quantile is the q-quantile of ds (nearest rank; 0 for none). It sorts ds.
func Quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	slices.Sort(ds)
	i := int(q*float64(len(ds)) + 0.5)
	return ds[min(max(i-1, 0), len(ds)-1)]
}

// rate is the median over a face's runs.
func rate(ss []Sample) float64 {
	return peerbench.Median(pick(ss, func(s Sample) float64 { return s.Rate }))
}

// p50 and p99 are the percentiles of every run's latencies pooled, or,
// for samples without them, the medians of the runs' percentiles.
func p50(ss []Sample) time.Duration {
	return pooled(ss, 0.50, func(s Sample) time.Duration { return s.P50 })
}
func p99(ss []Sample) time.Duration {
	return pooled(ss, 0.99, func(s Sample) time.Duration { return s.P99 })
}

func pooled(ss []Sample, q float64, per func(Sample) time.Duration) time.Duration {
	var all []time.Duration
	for _, s := range ss {
		all = append(all, s.Lat...)
	}
	if len(all) > 0 {
		return Quantile(all, q)
	}
	return time.Duration(peerbench.Median(pick(ss, func(s Sample) float64 { return float64(per(s)) })))
}

func pick(ss []Sample, f func(Sample) float64) []float64 {
	out := make([]float64, len(ss))
	for i, s := range ss {
		out[i] = f(s)
	}
	return out
}

// Ratio is the Kafka face's median rate over the S2 face's (0 when the S2
// face has none).
func (r Row) Ratio() float64 {
	s := rate(r.S2S)
	if s == 0 {
		return 0
	}
	return rate(r.Kafka) / s
}

// Goal says whether the row meets its goal: the throughput ratio for a
// produce row, the p99 gap for an Express row; "none set" for a read row.
func (r Row) Goal() string {
	w := r.Workload
	switch {
	case w.Shape == "consume":
		return "none set"
	case w.Express:
		gap := p99(r.Kafka) - p99(r.S2S)
		return fmt.Sprintf("p99 %+.2f ms, ≤ +%s (%s)", float64(gap)/1e6, ms(GoalExpressP99), metOrMissed(gap <= GoalExpressP99))
	}
	return fmt.Sprintf("≥ %g× (%s)", GoalThroughputRatio, metOrMissed(r.Ratio() >= GoalThroughputRatio))
}

func metOrMissed(ok bool) string {
	if ok {
		return "met"
	}
	return "missed"
}

// WriteTable writes rows as a Markdown table: each face's median rate
// (records/s and MiB/s of bodies), the ratio, each face's ack p50 and p99
// over all its runs (produce rows), and the goal. A row with `star read` figures
// gets them in a line of its own below the table.
func WriteTable(out io.Writer, rows []Row, recordSize int) {
	fmt.Fprintln(out, "| workload (1 KiB records) | S2S rec/s (MiB/s) | Kafka rec/s (MiB/s) | Kafka / S2S | S2S ack p50 / p99 | Kafka ack p50 / p99 | goal |")
	fmt.Fprintln(out, "|---|---|---|---|---|---|---|")
	for _, r := range rows {
		lat := func(ss []Sample) string { return ms(p50(ss)) + " / " + ms(p99(ss)) }
		ls, lk := lat(r.S2S), lat(r.Kafka)
		if r.Workload.Shape == "consume" {
			ls, lk = "—", "—"
		}
		fmt.Fprintf(out, "| %s | %s | %s | %.2f× | %s | %s | %s |\n", r.Workload.Name,
			rateCell(rate(r.S2S), recordSize), rateCell(rate(r.Kafka), recordSize), r.Ratio(), ls, lk, r.Goal())
	}
	for _, r := range rows {
		if len(r.CLI) > 0 {
			fmt.Fprintf(out, "\n%s through `star read` (the CLI, its output discarded): %s\n", r.Workload.Name, rateCell(rate(r.CLI), recordSize))
		}
	}
}

func rateCell(v float64, recordSize int) string {
	return fmt.Sprintf("%s (%.1f)", thousands(v), v*float64(recordSize)/(1<<20))
}

// ms formats d in milliseconds with two decimals.
func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// thousands formats a rate rounded to an integer with comma separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 && c != '-' {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
