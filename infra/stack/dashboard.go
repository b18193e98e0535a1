package stack

import (
	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/jsii-runtime-go"

	"github.com/starlog/starlog/infra/config"
)

// Metric names the dashboard reads from the stars' forwarded series
// (infra/userdata/forwarded.json lists them with their dimensions).
const (
	metricServedOps      = "starlog_served_operations_total"
	metricServedBytes    = "starlog_served_metered_bytes_total"
	metricAckQuantiles   = "starlog_ack_latency_summary_seconds"
	metricPutQuantiles   = "starlog_put_latency_summary_seconds"
	metricPutErrors      = "starlog_put_errors_total"
	metricBacklogFlights = "starlog_backlog_flights"
	metricBacklogAge     = "starlog_backlog_age_seconds"
	metricSlotsInFlight  = "starlog_slots_in_flight"
	metricSettleLag      = "starlog_settle_lag_seconds"
	metricUnsettled      = "starlog_settle_unsettled_bytes"
	metricAbsorbErrors   = "starlog_absorb_errors_total"
	metricClassDegraded  = "starlog_storage_class_degraded"
	metricStreamsLed     = "starlog_leader_streams_led"
)

// storageClasses are the class label values of the stars' metrics.
var storageClasses = []string{"standard", "express"}

// dashboard is the operator's CloudWatch dashboard: ingest and egress,
// appends and their ack latency per class, per-bucket PUT latency and
// errors (one slow zone visible at a glance), buffer and backlog fill,
// absorb lag, settle progress and quarantine, the auditor's functions
// and queues, the metastore's capacity and throttles, and every alarm's
// state. Every metric is one the stars forward, the functions publish or
// AWS emits (TestDashboardMetricsAreEmitted).
func (s *Starlog) dashboard() {
	c := s.Config
	minute := awscdk.Duration_Minutes(jsii.Number(1))
	star := func(name, stat, label string, dims ...string) awscloudwatch.IMetric {
		dm := map[string]*string{"cluster": jsii.String(c.StackName)}
		for i := 0; i+1 < len(dims); i += 2 {
			dm[dims[i]] = jsii.String(dims[i+1])
		}
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace: jsii.String(MetricsNamespace), MetricName: jsii.String(name),
			DimensionsMap: &dm, Statistic: jsii.String(stat), Period: minute, Label: jsii.String(label),
		})
	}
	perClass := func(name, stat string) *[]awscloudwatch.IMetric {
		var ms []awscloudwatch.IMetric
		for _, cl := range storageClasses {
			ms = append(ms, star(name, stat, cl, "class", cl))
		}
		return &ms
	}
	buckets := append([]string{*s.Bucket.BucketName()}, s.expressBucketRefs()...)
	bucketLabels := append([]string{"standard"}, func() []string {
		var l []string
		for i, z := range c.AvailabilityZones {
			if i < len(s.DirectoryBuckets) {
				l = append(l, "express "+z)
			}
		}
		return l
	}()...)
	perBucket := func(name, stat string, extra ...string) *[]awscloudwatch.IMetric {
		var ms []awscloudwatch.IMetric
		for i, b := range buckets {
			label := "bucket"
			if i < len(bucketLabels) {
				label = bucketLabels[i]
			}
			ms = append(ms, star(name, stat, label, append([]string{"bucket", b}, extra...)...))
		}
		return &ms
	}
	graph := func(title string, left *[]awscloudwatch.IMetric) awscloudwatch.IWidget {
		return awscloudwatch.NewGraphWidget(&awscloudwatch.GraphWidgetProps{
			Title: jsii.String(title), Left: left, Width: jsii.Number(8), Height: jsii.Number(6),
		})
	}
	ms := func(xs ...awscloudwatch.IMetric) *[]awscloudwatch.IMetric { return &xs }

	var ackLatency []awscloudwatch.IMetric
	for _, cl := range storageClasses {
		ackLatency = append(ackLatency,
			star(metricAckQuantiles, "Maximum", "p50 "+cl, "class", cl, "quantile", "0.5"),
			star(metricAckQuantiles, "Maximum", "p99 "+cl, "class", cl, "quantile", "0.99"))
	}

	var fnErrors, fnDuration, queueAge []awscloudwatch.IMetric
	for _, job := range config.Jobs {
		fn := s.Functions[job]
		fnErrors = append(fnErrors, fn.MetricErrors(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: minute, Label: jsii.String(job)}))
		fnDuration = append(fnDuration, fn.MetricDuration(&awscloudwatch.MetricOptions{Statistic: jsii.String("p99"), Period: minute, Label: jsii.String(job + " p99")}))
	}
	for _, job := range config.QueueJobs {
		queueAge = append(queueAge, s.Queues[job].MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Period: minute, Label: jsii.String(job)}))
	}
	table := func(name, stat string) awscloudwatch.IMetric {
		return s.Table.Metric(jsii.String(name), &awscloudwatch.MetricOptions{Statistic: jsii.String(stat), Period: minute, Label: jsii.String(name)})
	}

	rows := [][]awscloudwatch.IWidget{
		{
			graph("Appends and reads per minute (S2's API)", ms(
				star(metricServedOps, "Sum", "appends", "op", "append"), star(metricServedOps, "Sum", "reads", "op", "read"))),
			graph("Ingest and egress, metered bytes per minute", ms(
				star(metricServedBytes, "Sum", "ingest", "op", "append"), star(metricServedBytes, "Sum", "egress", "op", "read"))),
			graph("Ack latency p50 / p99 by storage class (worst star)", &ackLatency),
		},
		{
			graph("Flight PUT latency p99 by bucket (worst star)", perBucket(metricPutQuantiles, "Maximum", "quantile", "0.99")),
			graph("Flight PUT latency p50 by bucket (worst star)", perBucket(metricPutQuantiles, "Maximum", "quantile", "0.5")),
			graph("Flight PUTs that failed, by bucket", perBucket(metricPutErrors, "Sum")),
		},
		{
			graph("Backlog flights by class (worst star)", perClass(metricBacklogFlights, "Maximum")),
			graph("Absorb lag: oldest unabsorbed flight, by class", perClass(metricBacklogAge, "Maximum")),
			graph("Slots in flight by class (worst star)", perClass(metricSlotsInFlight, "Maximum")),
		},
		{
			graph("Settle lag by class", perClass(metricSettleLag, "Maximum")),
			graph("Unsettled bytes by class (worst star)", perClass(metricUnsettled, "Maximum")),
			graph("Quarantined streams, degraded classes, absorb errors", ms(
				star(MetricQuarantined, "Maximum", "quarantined streams"),
				star(metricClassDegraded, "Maximum", "degraded standard", "class", "standard"),
				star(metricClassDegraded, "Maximum", "degraded express", "class", "express"),
				star(metricAbsorbErrors, "Sum", "absorb errors standard", "class", "standard"),
				star(metricAbsorbErrors, "Sum", "absorb errors express", "class", "express"))),
		},
		{
			graph("Auditor functions: errors per minute", &fnErrors),
			graph("Auditor functions: duration p99", &fnDuration),
			graph("Auditor queues: oldest message age", &queueAge),
		},
		{
			graph("Metastore consumed capacity per minute", ms(
				table("ConsumedReadCapacityUnits", "Sum"), table("ConsumedWriteCapacityUnits", "Sum"))),
			graph("Metastore throttles and errors per minute", ms(
				table("ReadThrottleEvents", "Sum"), table("WriteThrottleEvents", "Sum"), table("SystemErrors", "Sum"), table("UserErrors", "Sum"))),
			graph("Streams led (all stars) and unclean star exits", ms(
				star(metricStreamsLed, "Sum", "streams led"), star(MetricStarExits, "Sum", "unclean exits"))),
		},
	}
	d := awscloudwatch.NewDashboard(s.Stack, jsii.String("Dashboard"), &awscloudwatch.DashboardProps{
		DashboardName: jsii.String(c.StackName),
	})
	for _, r := range rows {
		d.AddWidgets(r...)
	}
	d.AddWidgets(awscloudwatch.NewAlarmStatusWidget(&awscloudwatch.AlarmStatusWidgetProps{
		Title: jsii.String("Alarms"), Alarms: &s.alarmList, Width: jsii.Number(24), Height: jsii.Number(4),
	}))
}
