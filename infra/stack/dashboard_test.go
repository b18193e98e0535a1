package stack

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/starlog/starlog/infra/userdata"
)

// awsMetrics are the AWS metrics the dashboard may read, by namespace:
// what Lambda, SQS and DynamoDB publish for the resources the stack makes
// (their documented names).
var awsMetrics = map[string][]string{
	"AWS/Lambda":   {"Errors", "Duration", "Throttles", "Invocations"},
	"AWS/SQS":      {"ApproximateAgeOfOldestMessage", "ApproximateNumberOfMessagesVisible"},
	"AWS/DynamoDB": {"ConsumedReadCapacityUnits", "ConsumedWriteCapacityUnits", "ReadThrottleEvents", "WriteThrottleEvents", "SystemErrors", "UserErrors"},
}

// dashboardBody rebuilds the dashboard's JSON from the template's
// Fn::Join, each token (a bucket's name, a function's, the region) as a
// placeholder string.
func dashboardBody(t *testing.T, x *synthesized) map[string]any {
	t.Helper()
	ds := x.resources("AWS::CloudWatch::Dashboard")
	if len(ds) != 1 {
		t.Fatalf("%d dashboards in the template", len(ds))
	}
	var raw any
	for _, d := range ds {
		raw = props(d)["DashboardBody"]
	}
	var b strings.Builder
	var flatten func(v any)
	flatten = func(v any) {
		switch v := v.(type) {
		case string:
			b.WriteString(v)
		case map[string]any:
			if j, ok := v["Fn::Join"].([]any); ok && len(j) == 2 && j[0] == "" {
				for _, p := range j[1].([]any) {
					flatten(p)
				}
				return
			}
			b.WriteString("TOKEN") // a Ref or an attribute, inside a JSON string
		default:
			t.Fatalf("dashboard body part %T %v", v, v)
		}
	}
	flatten(raw)
	var body map[string]any
	if err := json.Unmarshal([]byte(b.String()), &body); err != nil {
		t.Fatalf("dashboard body is not JSON: %v\n%s", err, b.String())
	}
	return body
}

// Every metric on the dashboard is one the stars forward with exactly
// those dimensions (infra/userdata/forwarded.json, which star/servecmd's
// TestCloudWatchForwardedMetricsAreExported checks against star dev), one
// the auditor functions or the stack's log filter publish, or one AWS
// emits for the stack's resources; and the alarm widget shows every
// alarm (issue 32 item 1).
func TestDashboardMetricsAreEmitted(t *testing.T) {
	x := defaults(t)
	body := dashboardBody(t, x)
	published := map[string]bool{MetricQuarantined: true, MetricStarExits: true} // the plan function's EMF, the exit filter
	var starMetrics, awsCount, alarms int
	for _, w := range body["widgets"].([]any) {
		p := w.(map[string]any)["properties"].(map[string]any)
		if as, ok := p["alarms"].([]any); ok {
			alarms = len(as)
		}
		ms, _ := p["metrics"].([]any)
		for _, m := range ms {
			arr := m.([]any)
			ns, name := arr[0].(string), arr[1].(string)
			var dims []string
			for i := 2; i+1 < len(arr); i += 2 {
				k, ok := arr[i].(string)
				if !ok {
					break
				}
				dims = append(dims, k)
			}
			what := fmt.Sprintf("%s %s %v (widget %q)", ns, name, dims, p["title"])
			switch {
			case ns == MetricsNamespace:
				starMetrics++
				if published[name] {
					if !slices.Equal(dims, []string{userdata.DimensionCluster}) {
						t.Errorf("%s: published with the cluster dimension only", what)
					}
					continue
				}
				if !userdata.ForwardedWith(name, dims) {
					t.Errorf("%s: the agent does not forward this metric with these dimensions", what)
				}
			case awsMetrics[ns] != nil:
				awsCount++
				if !slices.Contains(awsMetrics[ns], name) {
					t.Errorf("%s: not a metric %s publishes", what, ns)
				}
			default:
				t.Errorf("%s: unknown namespace", what)
			}
		}
	}
	if n := len(x.resources("AWS::CloudWatch::Alarm")); alarms != n || n == 0 {
		t.Errorf("the alarm widget shows %d alarms, the stack has %d", alarms, n)
	}
	if starMetrics == 0 || awsCount == 0 {
		t.Fatalf("dashboard reads %d star metrics and %d AWS metrics", starMetrics, awsCount)
	}
	t.Logf("dashboard: %d widgets, %d star metrics, %d AWS metrics, %d alarms", len(body["widgets"].([]any)), starMetrics, awsCount, alarms)
}
