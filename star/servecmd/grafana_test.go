package servecmd_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/poll"
)

// grafanaBoard is the Grafana dashboard operators import
// (docs/deploy.md, "A Grafana dashboard"); forwardedSeries the series the
// stack's CloudWatch agent forwards for its alarms and dashboard
// (infra/userdata reads the same file).
const (
	grafanaBoard    = "../../infra/grafana/starlog.json"
	forwardedSeries = "../../infra/userdata/forwarded.json"
)

// exported is what a star's /metrics exposes: each metric family's type
// and the label names seen on its samples.
type exported struct {
	types  map[string]string          // family name → counter, gauge, histogram…
	labels map[string]map[string]bool // family name → label names
}

func scrape(t *testing.T, p *proc) exported {
	t.Helper()
	res, err := client.Get(p.url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	e := exported{types: map[string]string{}, labels: map[string]map[string]bool{}}
	labelRE := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="`)
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			e.types[f[2]] = f[3]
			e.labels[f[2]] = map[string]bool{}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		name = strings.Fields(name)[0]
		fam := e.family(name)
		if fam == "" {
			continue
		}
		if i := strings.IndexByte(rest, '}'); i >= 0 {
			for _, m := range labelRE.FindAllStringSubmatch(rest[:i], -1) {
				e.labels[fam][m[1]] = true
			}
		}
	}
	return e
}

// family maps a sample or query name onto its exported family: a
// histogram's _bucket, _sum and _count series belong to it.
func (e exported) family(name string) string {
	if _, ok := e.types[name]; ok {
		return name
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suf); ok {
			if typ := e.types[base]; typ == "histogram" || typ == "summary" {
				return base
			}
		}
	}
	return ""
}

// Both dashboards read what a running `star dev` exports (issue 32 items
// 1 and 2): every query of the Grafana board names exported metrics with
// the labels it groups and filters by (labels Prometheus adds when it
// scrapes, instance and job, and a histogram's le are the only ones the
// star need not carry), and every series the stack's CloudWatch agent
// forwards is exported with each label it keeps as a dimension (the
// stack's own test checks the CloudWatch dashboard against that list). A
// renamed metric or label fails here, not on an operator's screen.
func TestDashboardsNameExportedMetrics(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the star binary")
	}
	raw, err := os.ReadFile(grafanaBoard)
	if err != nil {
		t.Fatal(err)
	}
	var board struct {
		Panels []struct {
			Title   string `json:"title"`
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &board); err != nil {
		t.Fatalf("%s: %v", grafanaBoard, err)
	}

	// A star with traffic on both classes and a settle behind it, so the
	// metrics that only appear with their first labels are there.
	p := startDev(t, t.TempDir(), "--kafka-listen", "127.0.0.1:0", "--auditor-interval", "100ms",
		"--settle-linger", "10ms", "--settle-age-cap", "50ms", "--settle-express-linger", "10ms", "--settle-express-age-cap", "50ms")
	if status, out, err := call(p, "POST", "/v1/streams", `{"stream":"exp","config":{"storage_class":"express"}}`); err != nil || status != 201 {
		t.Fatalf("create express stream: %d %s %v", status, out, err)
	}
	a := &acked{recs: map[string]map[uint64]string{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range []string{"std", "exp"} {
		wg.Go(func() { appendLoop(p, s, "w", a, stop) })
	}
	a.waitMore(t, 20, "std", "exp")
	close(stop)
	wg.Wait()
	readAll(t, p, "std")
	if err := poll.Wait(30*time.Second, func() error {
		if metricSum(t, p, "starlog_auditor_ticks_total") == 0 {
			return fmt.Errorf("no auditor pass yet")
		}
		return nil
	}); err != nil {
		t.Fatalf("%v\n%s", err, p.stderr)
	}
	e := scrape(t, p)

	nameRE := regexp.MustCompile(`\bstarlog_[a-z0-9_]+`)
	groupRE := regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
	selRE := regexp.MustCompile(`\{([^}]*)\}`)
	keyRE := regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)`)
	scrapeAdded := map[string]bool{"instance": true, "job": true, "le": true}
	queries := 0
	for _, panel := range board.Panels {
		if panel.Type == "row" {
			continue
		}
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q has no query", panel.Title)
		}
		for _, tg := range panel.Targets {
			queries++
			names := nameRE.FindAllString(tg.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no starlog metric", panel.Title, tg.Expr)
				continue
			}
			var fams []string
			for _, n := range names {
				fam := e.family(n)
				if fam == "" {
					t.Errorf("panel %q: %s is not exported by star dev", panel.Title, n)
					continue
				}
				fams = append(fams, fam)
			}
			var keys []string
			for _, m := range groupRE.FindAllStringSubmatch(tg.Expr, -1) {
				for _, k := range strings.Split(m[1], ",") {
					keys = append(keys, strings.TrimSpace(k))
				}
			}
			for _, m := range selRE.FindAllStringSubmatch(tg.Expr, -1) {
				for _, k := range keyRE.FindAllStringSubmatch(m[1], -1) {
					keys = append(keys, k[1])
				}
			}
			for _, k := range keys {
				if k == "" || scrapeAdded[k] {
					continue
				}
				for _, fam := range fams {
					if !e.labels[fam][k] {
						have := make([]string, 0, len(e.labels[fam]))
						for l := range e.labels[fam] {
							have = append(have, l)
						}
						sort.Strings(have)
						t.Errorf("panel %q: %s has no label %q (it has %v)", panel.Title, fam, k, have)
					}
				}
			}
		}
	}
	t.Logf("%d queries in %s checked against %d exported metric families", queries, grafanaBoard, len(e.types))

	raw, err = os.ReadFile(forwardedSeries)
	if err != nil {
		t.Fatal(err)
	}
	var forwarded []struct {
		Dimensions []string `json:"dimensions"`
		Metrics    []string `json:"metrics"`
	}
	if err := json.Unmarshal(raw, &forwarded); err != nil {
		t.Fatalf("%s: %v", forwardedSeries, err)
	}
	series := 0
	for _, f := range forwarded {
		for _, m := range f.Metrics {
			series++
			typ, ok := e.types[m]
			switch {
			case !ok:
				t.Errorf("%s: %s is not exported by star dev", forwardedSeries, m)
				continue
			case typ == "histogram":
				t.Errorf("%s: %s is a histogram, which the CloudWatch agent drops", forwardedSeries, m)
			}
			for _, d := range f.Dimensions {
				if !e.labels[m][d] {
					t.Errorf("%s: %s has no label %q to keep as a dimension", forwardedSeries, m, d)
				}
			}
		}
	}
	t.Logf("%d forwarded series in %s checked", series, forwardedSeries)
}
