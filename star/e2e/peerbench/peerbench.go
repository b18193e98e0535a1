// Package peerbench sets starlog (`star dev` on its directory store) beside
// NATS JetStream (file storage, fsync on every message) on the same append
// workloads, interleaved run by run, and reports each workload's median
// throughput, the ratio, and a chart (`make bench-peer`, docs/bench.md).
package peerbench

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// Workload is one row of the table: producers appending 1 KiB records, each
// producer to its own stream (a JetStream stream of one subject), in one of
// three shapes; or the read row, one reader reading Messages records of a
// stream written beforehand from its start.
type Workload struct {
	Name      string
	Producers int
	// Shape is how each producer appends:
	//   - "one": one record per request, one request in flight;
	//   - "pipelined": one record per request, InFlight records unacked
	//     (star: an append session; JetStream: async publish);
	//   - "batch": Batch records at a time, waiting for all their acks
	//     (star: one unary append; JetStream: Batch async publishes, then
	//     their completion);
	//   - "read": no producer; one reader reads Messages records from the
	//     start of a stream filled once before the runs (star: a read
	//     session from seq 0; JetStream: an ordered consumer pulling
	//     batches of up to ReadPullBytes).
	Shape    string
	InFlight int
	Batch    int
	Messages int
}

// ReadPullBytes is how many bytes of messages the JetStream consumer of
// the read row asks for in one pull (the client asks for the next when
// half of one is consumed). Against the same 1,000,000-message stream,
// three rounds each: pulls of 1,000 messages read 252–313 k msg/s, of
// 10,000 316–359 k, of 16 MiB 352–382 k, and a loop of Fetch(1000)
// 202–245 k; the fastest is used.
const ReadPullBytes = 16 << 20

// ReadWorkload is the read row: one reader, n messages from the start.
func ReadWorkload(n int) Workload {
	return Workload{Name: fmt.Sprintf("1 reader, %s msgs from the start", thousands(float64(n))),
		Shape: "read", Messages: n}
}

// Workloads are the table, in its order.
func Workloads() []Workload {
	return []Workload{
		{Name: "1 producer, 1 in flight", Producers: 1, Shape: "one", InFlight: 1, Batch: 1},
		{Name: "16 producers, 1 in flight", Producers: 16, Shape: "one", InFlight: 1, Batch: 1},
		{Name: "1 producer, 500 in flight", Producers: 1, Shape: "pipelined", InFlight: 500, Batch: 1},
		{Name: "16 producers × 500 in flight", Producers: 16, Shape: "pipelined", InFlight: 500, Batch: 1},
		{Name: "1 producer, batches of 500", Producers: 1, Shape: "batch", InFlight: 1, Batch: 500},
		{Name: "16 producers, batches of 500", Producers: 16, Shape: "batch", InFlight: 1, Batch: 500},
	}
}

// StarArgs are the `star bench` arguments that run w (before --duration and
// the stream prefix).
func (w Workload) StarArgs(recordSize int) []string {
	args := []string{"bench", "--streams", fmt.Sprint(w.Producers), "--producers", fmt.Sprint(w.Producers),
		"--readers", "0", "--record-size", fmt.Sprint(recordSize), "--json"}
	switch w.Shape {
	case "pipelined":
		// The SDK's producer batches what waits (default linger), as the
		// NATS client coalesces async publishes on its connection.
		args = append(args, "--mode", "session", "--in-flight", fmt.Sprint(w.InFlight))
	default:
		args = append(args, "--mode", "unary", "--batch", fmt.Sprint(w.Batch), "--in-flight", fmt.Sprint(w.InFlight))
	}
	return args
}

// Row is one workload's measurements: messages (records) per second of
// each run, by system.
type Row struct {
	Workload Workload
	NATS     []float64
	Star     []float64
}

// Median of xs (0 for none).
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Ratio is star's median over JetStream's (0 when JetStream has none).
func (r Row) Ratio() float64 {
	n := Median(r.NATS)
	if n == 0 {
		return 0
	}
	return Median(r.Star) / n
}

// Goal is the goal for a workload's ratio: issue 31's where it sets one
// (one producer with one in flight ≥ 1, sixteen ≥ 2; one producer's
// batches of 500 ≥ 2; the read row ≥ 2), issue 17's for the rest (the
// pipelined rows ≥ 2, sixteen producers' batches ≥ 1).
func (w Workload) Goal() float64 {
	switch {
	case w.Shape == "read", w.Shape == "pipelined":
		return 2
	case w.Shape == "one" && w.Producers == 1:
		return 1
	case w.Shape == "one":
		return 2
	case w.Shape == "batch" && w.Producers == 1:
		return 2
	}
	return 1
}

// WriteTable writes rows as a Markdown table: medians, ratio, goal.
func WriteTable(out io.Writer, rows []Row) {
	fmt.Fprintln(out, "| workload (1 KiB records) | JetStream msg/s | star dev msg/s | star / JetStream | goal |")
	fmt.Fprintln(out, "|---|---|---|---|---|")
	for _, r := range rows {
		goal := "none set"
		if g := r.Workload.Goal(); g > 0 {
			met := "met"
			if r.Ratio() < g {
				met = "missed"
			}
			goal = fmt.Sprintf("≥ %g× (%s)", g, met)
		}
		fmt.Fprintf(out, "| %s | %s | %s | %.2f× | %s |\n", r.Workload.Name,
			thousands(Median(r.NATS)), thousands(Median(r.Star)), r.Ratio(), goal)
	}
}

// thousands formats a rate rounded to an integer with comma separators.
func thousands(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
