package dashboards

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// The CloudWatch dashboard is read from the synthesized template (`make
// synth`), so the image shows the stack's widgets as deployed. A widget
// metric in the Starlog namespace is a star series the CloudWatch agent
// forwards (infra/userdata/forwarded.json): the same name, its dimensions
// (cluster aside: one star here) as label matchers, evaluated over the
// run's scrapes as the agent and CloudWatch would aggregate it over the
// widget's period: a counter's Sum is its increase over the period
// (sum(rate(m[period])) * period: the agent sends a counter's change
// between scrapes), a gauge's or a summary quantile's Sum or Maximum is
// the sum or maximum over the stars. The template names buckets by token
// (a bucket's name is known at deploy time), so a per-bucket widget's
// metrics map in order to star dev's buckets: the Standard bucket, then
// one directory bucket per zone. Metrics in AWS namespaces (Lambda, SQS,
// DynamoDB), the alarm widget, and Starlog metrics the star does not
// export (the log filter's unclean exits) are AWS's alone: the image
// says so instead of drawing them.

// LoadCloudWatch reads the dashboard of the template at path. buckets are
// the run's bucket names in the stack's order (Standard, then Express by
// zone); st says which metrics the star exports and their types.
func LoadCloudWatch(path string, buckets []string, st *Store) ([]Panel, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var tpl struct {
		Resources map[string]struct {
			Type       string
			Properties map[string]any
		}
	}
	if err := json.Unmarshal(b, &tpl); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var bodies []string
	for _, r := range tpl.Resources {
		if r.Type == "AWS::CloudWatch::Dashboard" {
			s, err := flatten(r.Properties["DashboardBody"])
			if err != nil {
				return nil, err
			}
			bodies = append(bodies, s)
		}
	}
	if len(bodies) != 1 {
		return nil, fmt.Errorf("%s: %d dashboards, want 1", path, len(bodies))
	}
	var body struct {
		Widgets []struct {
			Type                string
			X, Y, Width, Height int
			Properties          struct {
				Title   string
				Metrics [][]any
				Alarms  []any
			}
		}
	}
	if err := json.Unmarshal([]byte(bodies[0]), &body); err != nil {
		return nil, fmt.Errorf("dashboard body: %w", err)
	}
	var out []Panel
	for _, w := range body.Widgets {
		p := Panel{Title: w.Properties.Title, X: w.X, Y: w.Y, W: w.Width, H: w.Height}
		switch w.Type {
		case "alarm":
			p.AWSOnly = fmt.Sprintf("the state of the stack's %d alarms: CloudWatch's own", len(w.Properties.Alarms))
		case "metric":
			if err := p.cloudWatchTargets(w.Properties.Metrics, buckets, st); err != nil {
				return nil, fmt.Errorf("widget %q: %w", p.Title, err)
			}
		default:
			return nil, fmt.Errorf("widget %q: type %q", p.Title, w.Type)
		}
		out = append(out, p)
	}
	return out, nil
}

// cloudWatchTargets turns a widget's metrics into queries over the star's
// series, and lists those only AWS has in AWSOnly.
func (p *Panel) cloudWatchTargets(metrics [][]any, buckets []string, st *Store) error {
	var awsOnly []string
	bucketIdx := 0
	for _, m := range metrics {
		if len(m) < 3 {
			return fmt.Errorf("metric %v", m)
		}
		ns, _ := m[0].(string)
		name, _ := m[1].(string)
		opts, _ := m[len(m)-1].(map[string]any)
		label, _ := opts["label"].(string)
		stat, _ := opts["stat"].(string)
		period := time.Duration(60) * time.Second
		if f, ok := opts["period"].(float64); ok {
			period = time.Duration(f) * time.Second
		}
		if ns != "Starlog" || !st.Has(name) {
			why := ns + " " + name
			if ns == "Starlog" {
				why += " (not a star series: published from a log metric filter or a Lambda)"
			}
			awsOnly = append(awsOnly, fmt.Sprintf("%s: %s", label, why))
			continue
		}
		var ms []string
		for i := 2; i+1 < len(m)-1; i += 2 {
			dim, _ := m[i].(string)
			val, _ := m[i+1].(string)
			if dim == "cluster" {
				continue
			}
			if dim == "bucket" && strings.Contains(val, "TOKEN") {
				if bucketIdx >= len(buckets) {
					return fmt.Errorf("more bucket metrics than the run's %d buckets", len(buckets))
				}
				val = buckets[bucketIdx]
				bucketIdx++
			}
			ms = append(ms, fmt.Sprintf("%s=%q", dim, val))
		}
		sort.Strings(ms)
		sel := name + "{" + strings.Join(ms, ",") + "}"
		var q string
		switch {
		case stat == "Sum" && st.Types[name] == "COUNTER":
			q = fmt.Sprintf("sum(rate(%s[%s])) * %g", sel, promDuration(period), period.Seconds())
		case stat == "Sum":
			q = "sum(" + sel + ")"
		case stat == "Maximum":
			q = "max(" + sel + ")"
		default:
			return fmt.Errorf("metric %s: statistic %q is not mapped", name, stat)
		}
		e, err := Parse(q)
		if err != nil {
			return err
		}
		p.Targets = append(p.Targets, Target{Expr: q, Legend: label, parsed: e})
	}
	if len(awsOnly) > 0 {
		p.AWSOnly = "from AWS alone: " + strings.Join(awsOnly, "; ")
	}
	return nil
}

// flatten rebuilds a template string from its Fn::Join, each Ref or
// attribute as TOKEN (as infra/stack's dashboard test does).
func flatten(v any) (string, error) {
	var b strings.Builder
	var walk func(v any) error
	walk = func(v any) error {
		switch v := v.(type) {
		case string:
			b.WriteString(v)
		case map[string]any:
			if j, ok := v["Fn::Join"].([]any); ok && len(j) == 2 && j[0] == "" {
				parts, _ := j[1].([]any)
				for _, p := range parts {
					if err := walk(p); err != nil {
						return err
					}
				}
				return nil
			}
			b.WriteString("TOKEN")
		default:
			return fmt.Errorf("dashboard body part %T", v)
		}
		return nil
	}
	err := walk(v)
	return b.String(), err
}
