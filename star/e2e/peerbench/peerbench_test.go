package peerbench

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/sdk"
	"github.com/starlog/starlog/shared/sdk/sdktest"
)

func TestMedianAndRatio(t *testing.T) {
	if m := Median([]float64{5, 1, 3}); m != 3 {
		t.Fatalf("median of 5,1,3 = %v", m)
	}
	if m := Median([]float64{4, 1, 3, 2}); m != 2.5 {
		t.Fatalf("median of 4,1,3,2 = %v", m)
	}
	if m := Median(nil); m != 0 {
		t.Fatalf("median of none = %v", m)
	}
	r := Row{NATS: []float64{100, 300, 200}, Star: []float64{50, 10, 90}}
	if got := r.Ratio(); got != 0.25 {
		t.Fatalf("ratio %v, want 50/200", got)
	}
	if got := (Row{Star: []float64{1}}).Ratio(); got != 0 {
		t.Fatalf("ratio without JetStream figures: %v", got)
	}
}

// The table has one line per workload with both medians, the ratio and
// whether the goal is met.
func TestWriteTable(t *testing.T) {
	wls := Workloads()
	rows := []Row{
		{Workload: wls[0], NATS: []float64{2391}, Star: []float64{1500}},
		{Workload: wls[3], NATS: []float64{4557}, Star: []float64{44299}},
		{Workload: wls[1], NATS: []float64{4823}, Star: []float64{292}},
	}
	var b bytes.Buffer
	WriteTable(&b, rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2+len(rows) {
		t.Fatalf("%d lines:\n%s", len(lines), b.String())
	}
	for i, want := range []string{
		"| 1 producer, 1 in flight | 2,391 | 1,500 | 0.63× | ≥ 1× (missed) |",
		"| 16 producers × 500 in flight | 4,557 | 44,299 | 9.72× | ≥ 2× (met) |",
		"| 16 producers, 1 in flight | 4,823 | 292 | 0.06× | ≥ 2× (missed) |",
	} {
		if lines[2+i] != want {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[2+i], want)
		}
	}
}

// The read row's goal is issue 31's: twice JetStream's reader.
func TestWriteTableReadRow(t *testing.T) {
	w := ReadWorkload(1000000)
	if w.Name != "1 reader, 1,000,000 msgs from the start" || w.Shape != "read" || w.Messages != 1000000 {
		t.Fatalf("read workload %+v", w)
	}
	if g := w.Goal(); g != 2 {
		t.Fatalf("read row goal %v, want 2", g)
	}
	rows := []Row{
		{Workload: Workloads()[0], NATS: []float64{2000}, Star: []float64{1500}},
		{Workload: w, NATS: []float64{300000, 250000, 320000}, Star: []float64{900000, 600000, 1000000}},
	}
	var b bytes.Buffer
	WriteTable(&b, rows)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines:\n%s", len(lines), b.String())
	}
	for i, want := range []string{
		"| 1 producer, 1 in flight | 2,000 | 1,500 | 0.75× | ≥ 1× (missed) |",
		"| 1 reader, 1,000,000 msgs from the start | 300,000 | 900,000 | 3.00× | ≥ 2× (met) |",
	} {
		if lines[2+i] != want {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[2+i], want)
		}
	}
}

// FillStar writes n records in batches of at most 1,000 and ReadStar reads
// exactly them back from seq 0 (here against the SDK's test server).
func TestFillAndReadStar(t *testing.T) {
	srv := sdktest.New(sdktest.Options{})
	t.Cleanup(srv.Close)
	cl, err := sdk.New(sdk.Config{AccountEndpoint: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := cl.CreateBasin(ctx, "peerbench", nil); err != nil {
		t.Fatal(err)
	}
	b := cl.Basin("peerbench")
	const n = 2500
	if err := FillStar(ctx, b, "r", n, 100); err != nil {
		t.Fatal(err)
	}
	recs := srv.Records("peerbench", "r")
	if len(recs) != n || len(recs[n-1].Body) != 100 {
		t.Fatalf("%d records after the fill", len(recs))
	}
	v, err := ReadStar(ctx, b.Stream("r"), n)
	if err != nil || v <= 0 {
		t.Fatalf("read: %v msg/s, %v", v, err)
	}
	// Asking for more than the stream holds fails rather than reporting a
	// rate for records that were not read.
	if _, err := ReadStar(ctx, b.Stream("r"), n+1); err == nil || !strings.Contains(err.Error(), "ended after 2500 records of 2501") {
		t.Fatalf("a read of more records than the stream holds: %v", err)
	}
}

func TestWorkloadArgs(t *testing.T) {
	wls := Workloads()
	if len(wls) != 6 {
		t.Fatalf("%d workloads, the issue's table has 6", len(wls))
	}
	for _, tc := range []struct {
		w    Workload
		want []string
	}{
		{wls[0], []string{"--mode", "unary", "--batch", "1", "--in-flight", "1", "--producers", "1"}},
		{wls[3], []string{"--mode", "session", "--in-flight", "500", "--producers", "16", "--streams", "16"}},
		{wls[5], []string{"--mode", "unary", "--batch", "500", "--in-flight", "1", "--producers", "16"}},
	} {
		args := tc.w.StarArgs(1024)
		for i := 0; i < len(tc.want); i += 2 {
			j := slices.Index(args, tc.want[i])
			if j < 0 || j+1 >= len(args) || args[j+1] != tc.want[i+1] {
				t.Errorf("%s: args %v lack %s %s", tc.w.Name, args, tc.want[i], tc.want[i+1])
			}
		}
	}
}

// Chart labels wrap at spaces so that a long one (the read row's) does
// not run into its neighbour; the six fit on one line.
func TestWrapLabel(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"16 producers × 500 in flight", "16 producers × 500 in flight"},
		{"1 reader, 1,000,000 msgs from the start", "1 reader, 1,000,000 msgs\nfrom the start"},
		{"a verylongwordthatdoesnotfitatall b", "a\nverylongwordthatdoesnotfitatall\nb"},
		{"", ""},
	} {
		if got := wrapLabel(tc.in, labelWidth); got != tc.want {
			t.Errorf("wrapLabel(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	for _, w := range Workloads() {
		if strings.Contains(wrapLabel(w.Name, labelWidth), "\n") {
			t.Errorf("%q wraps", w.Name)
		}
	}
}

func TestWriteChart(t *testing.T) {
	var rows []Row
	for i, w := range append(Workloads(), ReadWorkload(1000000)) {
		rows = append(rows, Row{Workload: w, NATS: []float64{float64(1000 * (i + 1))}, Star: []float64{float64(20 * (i + 1) * (i + 1) * (i + 1))}})
	}
	path := filepath.Join(t.TempDir(), "c.png")
	if err := WriteChart(path, "test", rows); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("chart: %v, %d bytes", err, len(b))
	}
}
