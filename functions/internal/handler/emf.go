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

// QuarantinedMetric is the gauge of quarantined streams plan sets; the
// stack's SettleQuarantine alarm watches it.
const QuarantinedMetric = "starlog_settle_quarantined_streams"

// emfMetrics are the gauges published, each as its greatest value over
// its series, with its CloudWatch unit.
var emfMetrics = []struct{ name, unit string }{{SettleLagMetric, "Seconds"}, {QuarantinedMetric, "Count"}}

// EMF publishes the gauges Plan sets (settle lag, quarantined streams) as
// one CloudWatch embedded-metric-format line: the function's log stream
// is the transport, so no PutMetricData permission or call is needed.
type EMF struct {
	Namespace string
	// Cluster is the one dimension (cluster=<stack name>), as the stars'.
	Cluster  string
	Out      io.Writer
	Gatherer prometheus.Gatherer
}

// Publish writes the greatest value of each gauge over its series, for
// the gauges the gatherer has (nothing when it has none).
func (e EMF) Publish(now time.Time) error {
	mfs, err := e.Gatherer.Gather()
	if err != nil {
		return fmt.Errorf("emf: gather: %w", err)
	}
	line := map[string]any{"cluster": e.Cluster}
	var defs []any
	for _, em := range emfMetrics {
		v, found := 0.0, false
		for _, mf := range mfs {
			if mf.GetName() != em.name {
				continue
			}
			for _, m := range mf.GetMetric() {
				if g := m.GetGauge(); g != nil {
					v, found = max(v, g.GetValue()), true
				}
			}
		}
		if found {
			line[em.name] = v
			defs = append(defs, map[string]string{"Name": em.name, "Unit": em.unit})
		}
	}
	if len(defs) == 0 {
		return nil
	}
	line["_aws"] = map[string]any{
		"Timestamp": now.UnixMilli(),
		"CloudWatchMetrics": []any{map[string]any{
			"Namespace":  e.Namespace,
			"Dimensions": [][]string{{"cluster"}},
			"Metrics":    defs,
		}},
	}
	b, err := json.Marshal(line)
	if err != nil {
		return fmt.Errorf("emf: %w", err)
	}
	_, err = e.Out.Write(append(b, '\n'))
	return err
}
