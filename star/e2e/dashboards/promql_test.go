package dashboards

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"
)

// scrapes is a counter and a histogram at three scrapes 10 s apart.
var scrapes = []string{`# TYPE req_total counter
req_total{class="express",code="200"} 0
req_total{class="standard",code="200"} 100
req_total{class="standard",code="500"} 5
# TYPE lat_seconds histogram
lat_seconds_bucket{class="express",le="0.01"} 0
lat_seconds_bucket{class="express",le="0.1"} 0
lat_seconds_bucket{class="express",le="+Inf"} 0
lat_seconds_sum{class="express"} 0
lat_seconds_count{class="express"} 0
# TYPE up gauge
up{class="express"} 1
`, `# TYPE req_total counter
req_total{class="express",code="200"} 50
req_total{class="standard",code="200"} 200
req_total{class="standard",code="500"} 5
# TYPE lat_seconds histogram
lat_seconds_bucket{class="express",le="0.01"} 40
lat_seconds_bucket{class="express",le="0.1"} 90
lat_seconds_bucket{class="express",le="+Inf"} 100
lat_seconds_sum{class="express"} 3
lat_seconds_count{class="express"} 100
# TYPE up gauge
up{class="express"} 3
`, `# TYPE req_total counter
req_total{class="express",code="200"} 20
req_total{class="standard",code="200"} 300
req_total{class="standard",code="500"} 5
# TYPE lat_seconds histogram
lat_seconds_bucket{class="express",le="0.01"} 40
lat_seconds_bucket{class="express",le="0.1"} 90
lat_seconds_bucket{class="express",le="+Inf"} 100
lat_seconds_sum{class="express"} 3
lat_seconds_count{class="express"} 100
# TYPE up gauge
up{class="express"} 2
`}

func testStore(t *testing.T) (*Store, []time.Time) {
	t.Helper()
	st := NewStore()
	t0 := time.Unix(1000, 0)
	var ts []time.Time
	for i, s := range scrapes {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		ts = append(ts, at)
		if err := st.AddScrape(at, strings.NewReader(s)); err != nil {
			t.Fatal(err)
		}
	}
	return st, ts
}

func eval(t *testing.T, st *Store, q string, at time.Time) map[string]float64 {
	t.Helper()
	e, err := Parse(q)
	if err != nil {
		t.Fatal(err)
	}
	vs, err := Eval(e, st, at)
	if err != nil {
		t.Fatalf("%s: %v", q, err)
	}
	out := map[string]float64{}
	for _, s := range vs {
		out[key(s.Labels)] = s.V
	}
	return out
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 || math.IsNaN(a) && math.IsNaN(b) }

// The evaluator's answers, worked by hand: a rate over a window (a counter
// reset counted from 0, extrapolated as Prometheus does), sum and max by a label, a quantile interpolated
// inside its bucket, a quantile of no observations NaN, a regexp matcher
// anchored, a vector times a number.
func TestEvalSubset(t *testing.T) {
	st, ts := testStore(t)
	cases := []struct {
		q    string
		at   int
		want map[string]float64
	}{
		// express from 0: no extrapolation below its zero; standard
		// extrapolated 10 s back to the window's start (one interval).
		{`sum by (class) (rate(req_total{class=~".*"}[30s]))`, 2, map[string]float64{
			`class="express",`: (50 + 20) / 30.0, `class="standard",`: 200 * 1.5 / 30}},
		{`sum by (class) (rate(req_total[20s]))`, 0, map[string]float64{}}, // one sample: no rate (windows are open at their start)
		{`sum(rate(req_total{code!~"2.."}[20s]))`, 2, map[string]float64{``: 0}},
		{`sum(rate(req_total{code=~"2"}[20s]))`, 2, map[string]float64{}}, // anchored: "2" is not "200"
		{`max by (class) (up)`, 1, map[string]float64{`class="express",`: 3}},
		{`max(up{class="express"})`, 2, map[string]float64{``: 2}},
		{`sum(up) * 60`, 2, map[string]float64{``: 120}},
		{`histogram_quantile(0.5, sum by (le, class) (rate(lat_seconds_bucket[20s])))`, 1, map[string]float64{
			`class="express",`: 0.01 + (0.1-0.01)*(50-40)/50.0}},
		{`histogram_quantile(0.99, sum by (le) (rate(lat_seconds_bucket[20s])))`, 1, map[string]float64{``: 0.1}}, // in +Inf: the largest finite bound
		{`histogram_quantile(0.2, sum by (le) (rate(lat_seconds_bucket[20s])))`, 1, map[string]float64{``: 0.01 * 20 / 40}},
		{`histogram_quantile(0.5, sum by (le) (rate(lat_seconds_bucket[20s])))`, 2, map[string]float64{``: math.NaN()}}, // no observations
	}
	for _, c := range cases {
		got := eval(t, st, c.q, ts[c.at])
		if len(got) != len(c.want) {
			t.Errorf("%s at %d: %v, want %v", c.q, c.at, got, c.want)
			continue
		}
		for k, w := range c.want {
			if g, ok := got[k]; !ok || !near(g, w) {
				t.Errorf("%s at %d: %v, want %v", c.q, c.at, got, c.want)
			}
		}
	}
}

// A query outside the subset is an error, never an empty answer.
func TestUnsupportedQueriesFail(t *testing.T) {
	for _, q := range []string{
		`avg(up)`, `irate(req_total[1m])`, `up + up`, `sum without (class) (up)`, `rate(up)`,
		`topk(3, up)`, `up offset 5m`, `sum by (class) (rate(req_total[20s])`,
	} {
		if e, err := Parse(q); err == nil {
			t.Errorf("%q parsed as %v", q, e)
		}
	}
}

// Every query of the Grafana board parses.
func TestGrafanaBoardParses(t *testing.T) {
	ps, err := LoadGrafana("../../../infra/grafana/starlog.json", 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range ps {
		n += len(p.Targets)
	}
	if n < 30 {
		t.Fatalf("%d queries in %d panels", n, len(ps))
	}
}

// A template's dashboard: Starlog metrics become queries (a counter's Sum
// its increase over the period, bucket tokens the run's buckets in
// order), AWS namespaces and the alarm widget are AWS-only.
func TestCloudWatchWidgets(t *testing.T) {
	st, _ := testStore(t)
	tpl := `{"Resources":{"D":{"Type":"AWS::CloudWatch::Dashboard","Properties":{"DashboardBody":{"Fn::Join":["",[
	"{\"widgets\":[{\"type\":\"metric\",\"x\":0,\"y\":0,\"width\":8,\"height\":6,\"properties\":{\"title\":\"reqs\",\"region\":\"",{"Ref":"AWS::Region"},
	"\",\"metrics\":[[\"Starlog\",\"req_total\",\"cluster\",\"S\",\"bucket\",\"",{"Ref":"B"},"\",{\"label\":\"standard\",\"period\":60,\"stat\":\"Sum\"}],",
	"[\"Starlog\",\"up\",\"cluster\",\"S\",{\"label\":\"up\",\"period\":60,\"stat\":\"Maximum\"}],",
	"[\"AWS/Lambda\",\"Errors\",\"FunctionName\",\"f\",{\"label\":\"plan\",\"period\":60,\"stat\":\"Sum\"}]]}},",
	"{\"type\":\"alarm\",\"x\":0,\"y\":6,\"width\":24,\"height\":4,\"properties\":{\"title\":\"Alarms\",\"alarms\":[\"a\",\"b\"]}}]}"]]}}}}}`
	path := t.TempDir() + "/t.json"
	if err := os.WriteFile(path, []byte(tpl), 0o644); err != nil {
		t.Fatal(err)
	}
	ps, err := LoadCloudWatch(path, []string{"standard"}, st)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 {
		t.Fatalf("%d widgets", len(ps))
	}
	var qs []string
	for _, tg := range ps[0].Targets {
		qs = append(qs, tg.Expr)
	}
	want := []string{`sum(rate(req_total{bucket="standard"}[60s])) * 60`, `max(up{})`}
	if strings.Join(qs, "|") != strings.Join(want, "|") {
		t.Errorf("queries %q, want %q", qs, want)
	}
	if !strings.Contains(ps[0].AWSOnly, "AWS/Lambda Errors") || !strings.Contains(ps[1].AWSOnly, "2 alarms") {
		t.Errorf("AWS-only notes %q, %q", ps[0].AWSOnly, ps[1].AWSOnly)
	}
}

// A line with a hole is drawn as two segments.
func TestSegmentsSplitAtGaps(t *testing.T) {
	l := Line{X: []float64{0, 5, 10, 30, 35}, Y: []float64{1, 2, 3, 4, 5}}
	segs := segments(l)
	if len(segs) != 2 || len(segs[0]) != 3 || len(segs[1]) != 2 {
		t.Fatalf("segments %v", segs)
	}
}
