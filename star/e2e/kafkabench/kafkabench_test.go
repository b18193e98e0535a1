package kafkabench

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/shared/sdk/sdktest"
	"github.com/starlog/starlog/star/e2e/peerbench"
)

func TestQuantileAndMedian(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3, 10, 9, 8, 7, 6}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 5}, {0.99, 10}, {0.1, 1}, {0, 1}, {1, 10}} {
		if got := Quantile(ds, tc.q); got != tc.want {
			t.Errorf("q%v = %v, want %v", tc.q, got, tc.want)
		}
	}
	if Quantile(nil, 0.5) != 0 || peerbench.Median(nil) != 0 {
		t.Fatal("quantile or median of nothing is not 0")
	}
	if m := peerbench.Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Fatalf("median of 4,1,3,2 = %v", m)
	}
}

// With every ack's latency kept, the table's percentiles pool the runs.
func TestPooledPercentiles(t *testing.T) {
	var a, b []time.Duration
	for i := range 100 {
		a = append(a, time.Duration(i+1)) // 1..100
		b = append(b, time.Duration(1000+i))
	}
	ss := []Sample{{P99: 99, Lat: a}, {P99: 1099, Lat: b}}
	if got := p99(ss); got != 1097 {
		t.Fatalf("pooled p99 %v, want the 198th of 200, 1097", got)
	}
	if got := p50(ss); got != 100 {
		t.Fatalf("pooled p50 %v, want 100", got)
	}
}

// The table has one line per workload: both faces' median rates, the
// ratio, the median ack percentiles and the goal, met or missed; the
// `star read` figure goes below it.
func TestWriteTable(t *testing.T) {
	wls := Workloads(false, true, 1<<20)
	if len(wls) != 6 || wls[5].Shape != "consume" || !wls[3].Express || wls[2].InFlight != 1 {
		t.Fatalf("workloads %+v", wls)
	}
	ms := time.Millisecond
	rows := []Row{
		{Workload: wls[0],
			S2S:   []Sample{{Rate: 100000, P50: 10 * ms, P99: 20 * ms}, {Rate: 90000, P50: 12 * ms, P99: 30 * ms}, {Rate: 110000, P50: 11 * ms, P99: 25 * ms}},
			Kafka: []Sample{{Rate: 70000, P50: 14 * ms, P99: 40 * ms}, {Rate: 75000, P50: 13 * ms, P99: 41 * ms}, {Rate: 60000, P50: 15 * ms, P99: 42 * ms}}},
		{Workload: wls[4],
			S2S:   []Sample{{Rate: 900, P50: 8 * ms, P99: 18 * ms}},
			Kafka: []Sample{{Rate: 880, P50: 8500 * time.Microsecond, P99: 19500 * time.Microsecond}}},
		{Workload: wls[5], S2S: []Sample{{Rate: 500000}}, Kafka: []Sample{{Rate: 250000}}, CLI: []Sample{{Rate: 100000}}},
	}
	var b bytes.Buffer
	WriteTable(&b, rows, 1024)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	want := []string{
		"| 1 producer, 1,000 in flight | 100,000 (97.7) | 70,000 (68.4) | 0.70× | 11.00 ms / 25.00 ms | 14.00 ms / 41.00 ms | ≥ 0.8× (missed) |",
		"| 16 producers, 1 in flight, Express timings | 900 (0.9) | 880 (0.9) | 0.98× | 8.00 ms / 18.00 ms | 8.50 ms / 19.50 ms | p99 +1.50 ms, ≤ +2.00 ms (met) |",
		"| 1 reader, 1,048,576 records from the start | 500,000 (488.3) | 250,000 (244.1) | 0.50× | — | — | none set |",
		"",
		"1 reader, 1,048,576 records from the start through `star read` (the CLI, its output discarded): 100,000 (97.7)",
	}
	if len(lines) != 2+len(want) {
		t.Fatalf("%d lines:\n%s", len(lines), b.String())
	}
	for i, w := range want {
		if lines[2+i] != w {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[2+i], w)
		}
	}
}

func TestWorkloadsIdempotentRow(t *testing.T) {
	wls := Workloads(true, false, 0)
	if len(wls) != 4 || !wls[2].Idempotent || wls[2].InFlight != ProduceInFlight {
		t.Fatalf("workloads %+v", wls)
	}
	for _, w := range wls {
		if w.Express || w.Shape != "produce" {
			t.Errorf("%s: express or not a produce row", w.Name)
		}
	}
}

// ProduceS2S keeps each producer's records in order on its stream, every
// submitted record acknowledged, with a latency for each (here against
// the SDK's test server).
func TestProduceS2S(t *testing.T) {
	srv := sdktest.New(sdktest.Options{})
	t.Cleanup(srv.Close)
	cfg := sdk.Config{AccountEndpoint: srv.URL}
	cl, err := sdk.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.CreateBasin(ctx, "kafkabench", nil); err != nil {
		t.Fatal(err)
	}
	names := []string{"a", "b"}
	for _, n := range names {
		if _, err := cl.Basin("kafkabench").CreateStream(ctx, n, nil); err != nil {
			t.Fatal(err)
		}
	}
	w := Workload{Name: "t", Shape: "produce", Producers: 2, InFlight: 4}
	s, err := ProduceS2S(ctx, cfg, "kafkabench", names, w, Body(64), 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, n := range names {
		recs := srv.Records("kafkabench", n)
		for i, r := range recs {
			if r.SeqNum != uint64(i) || len(r.Body) != 64 {
				t.Fatalf("%s: record %d: seq %d, %d bytes", n, i, r.SeqNum, len(r.Body))
			}
		}
		total += len(recs) - 1 // less the one sent before the clock
	}
	if s.Rate <= 0 || s.P50 <= 0 || s.P99 < s.P50 || total == 0 || len(s.Lat) != total {
		t.Fatalf("sample %+v over %d records", s, total)
	}
}
