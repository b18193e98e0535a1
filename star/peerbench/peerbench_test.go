package peerbench

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
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
		"| 1 producer, 1 in flight | 2,391 | 1,500 | 0.63× | ≥ 0.5× (met) |",
		"| 16 producers × 500 in flight | 4,557 | 44,299 | 9.72× | ≥ 2× (met) |",
		"| 16 producers, 1 in flight | 4,823 | 292 | 0.06× | ≥ 1× (missed) |",
	} {
		if lines[2+i] != want {
			t.Errorf("line %d:\n got %s\nwant %s", i, lines[2+i], want)
		}
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

func TestWriteChart(t *testing.T) {
	var rows []Row
	for i, w := range Workloads() {
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
