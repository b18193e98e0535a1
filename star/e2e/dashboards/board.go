// Package dashboards renders the operator's two dashboards (the Grafana
// board infra/grafana/starlog.json and the CDK stack's CloudWatch
// dashboard, read from the synthesized template) to PNG images from a real
// run: star dev under a workload, its /metrics scraped on a fixed
// interval, each panel's query evaluated over the scraped series
// (`make dashboards`, docs/deploy.md).
package dashboards

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"regexp"
	"strings"
	"time"
)

// Panel is one panel or widget: its place on the board's 24-column grid,
// its queries, or why it has none here.
type Panel struct {
	Title      string
	X, Y, W, H int
	Row        bool // a row header
	Unit       string
	Targets    []Target
	// AWSOnly says the widget's data comes from AWS alone (Lambda, SQS,
	// DynamoDB, alarms, a log metric filter): drawn as such, not invented.
	AWSOnly string
}

// Target is one query and its legend format ({{label}} placeholders).
type Target struct {
	Expr   string
	Legend string
	parsed Expr
}

// Line is one drawn series: its legend and its points (seconds since the
// run's first scrape, value).
type Line struct {
	Legend string
	X, Y   []float64
}

// LoadGrafana reads a Grafana board: its panels in order, rows included,
// with $__rate_interval as rateInterval and $instance as every star.
func LoadGrafana(path string, rateInterval time.Duration) ([]Panel, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var board struct {
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			GridPos struct{ X, Y, W, H int }
			Field   struct {
				Defaults struct {
					Unit string `json:"unit"`
				} `json:"defaults"`
			} `json:"fieldConfig"`
			Targets []struct {
				Expr   string `json:"expr"`
				Legend string `json:"legendFormat"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &board); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var out []Panel
	for _, p := range board.Panels {
		pn := Panel{Title: p.Title, X: p.GridPos.X, Y: p.GridPos.Y, W: p.GridPos.W, H: p.GridPos.H,
			Row: p.Type == "row", Unit: p.Field.Defaults.Unit}
		for _, t := range p.Targets {
			q := strings.NewReplacer("$__rate_interval", promDuration(rateInterval), "$instance", ".*").Replace(t.Expr)
			e, err := Parse(q)
			if err != nil {
				return nil, fmt.Errorf("panel %q: %w", p.Title, err)
			}
			pn.Targets = append(pn.Targets, Target{Expr: q, Legend: t.Legend, parsed: e})
		}
		if !pn.Row && len(pn.Targets) == 0 {
			return nil, fmt.Errorf("panel %q has no query", p.Title)
		}
		out = append(out, pn)
	}
	return out, nil
}

func promDuration(d time.Duration) string { return fmt.Sprintf("%ds", int(d.Seconds())) }

var legendRE = regexp.MustCompile(`\{\{\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\}\}`)

// Evaluate runs every target of p at each scrape time of st: one line per
// target and label set, NaN values left out (a quantile of no
// observations). Series with no point at all are not lines.
func (p *Panel) Evaluate(st *Store) ([]Line, error) {
	if len(st.Times) == 0 {
		return nil, fmt.Errorf("no scrapes")
	}
	t0 := st.Times[0]
	var lines []Line
	for _, tg := range p.Targets {
		idx := map[string]int{}
		for _, t := range st.Times {
			vs, err := Eval(tg.parsed, st, t)
			if err != nil {
				return nil, fmt.Errorf("panel %q: %s: %w", p.Title, tg.Expr, err)
			}
			for _, s := range vs {
				if math.IsNaN(s.V) || math.IsInf(s.V, 0) {
					continue
				}
				legend := legendRE.ReplaceAllStringFunc(tg.Legend, func(m string) string {
					return s.Labels[legendRE.FindStringSubmatch(m)[1]]
				})
				if tg.Legend == "" {
					legend = key(s.Labels)
				}
				i, ok := idx[legend]
				if !ok {
					i = len(lines)
					idx[legend] = i
					lines = append(lines, Line{Legend: strings.TrimSpace(legend)})
				}
				lines[i].X = append(lines[i].X, t.Sub(t0).Seconds())
				lines[i].Y = append(lines[i].Y, s.V)
			}
		}
	}
	return lines, nil
}
