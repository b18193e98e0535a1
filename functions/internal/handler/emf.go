package handler

import (
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// SettleLagMetric is the series the settle-lag alarm watches; the stars
// forward it from /metrics and plan publishes it too (docs/deploy.md).
const SettleLagMetric = "starlog_settle_lag_seconds"

// EMF publishes the settle-lag gauge Plan sets as one CloudWatch
// embedded-metric-format line: the function's log stream is the
// transport, so no PutMetricData permission or call is needed.
type EMF struct {
	Namespace string
	// Cluster is the one dimension (cluster=<stack name>), as the stars'.
	Cluster  string
	Out      io.Writer
	Gatherer prometheus.Gatherer
}

// Publish writes the greatest settle lag over the classes, if the
// gatherer has the gauge.
func (e EMF) Publish(now time.Time) error {
	mfs, err := e.Gatherer.Gather()
	if err != nil {
		return fmt.Errorf("emf: gather: %w", err)
	}
	lag, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != SettleLagMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			if g := m.GetGauge(); g != nil {
				lag, found = max(lag, g.GetValue()), true
			}
		}
	}
	if !found {
		return nil
	}
	line := map[string]any{
		"_aws": map[string]any{
			"Timestamp": now.UnixMilli(),
			"CloudWatchMetrics": []any{map[string]any{
				"Namespace":  e.Namespace,
				"Dimensions": [][]string{{"cluster"}},
				"Metrics":    []any{map[string]string{"Name": SettleLagMetric, "Unit": "Seconds"}},
			}},
		},
		"cluster":       e.Cluster,
		SettleLagMetric: lag,
	}
	b, err := json.Marshal(line)
	if err != nil {
		return fmt.Errorf("emf: %w", err)
	}
	_, err = e.Out.Write(append(b, '\n'))
	return err
}
