package stack

import (
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatch"
	"github.com/aws/aws-cdk-go/awscdk/v2/awscloudwatchactions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssnssubscriptions"
	"github.com/aws/jsii-runtime-go"

	"github.com/starlog/starlog/infra/config"
	"github.com/starlog/starlog/infra/userdata"
)

// alarm is one alarm's definition.
type alarm struct {
	id          string
	description string
	metric      awscloudwatch.IMetric
	threshold   float64
	op          awscloudwatch.ComparisonOperator
	periods     float64
	missing     awscloudwatch.TreatMissingData
}

// MetricStarExits counts the star processes that ended uncleanly (a crash,
// a kill, a failed start), from the line the unit logs on every exit.
const MetricStarExits = "starlog_star_unclean_exits"

// StarExitsAlarmCount unclean exits in StarExitsAlarmMinutes across the
// fleet is a crash loop (systemd restarts the star forever, every 2 s).
const (
	StarExitsAlarmCount   = 3
	StarExitsAlarmMinutes = 10
)

// MetricQuarantined is the quarantined-streams gauge the plan function
// publishes (functions/internal/handler.QuarantinedMetric).
const MetricQuarantined = "starlog_settle_quarantined_streams"

// alarms wires every alarm to one SNS topic: backlog age and stalls (the
// seeds say to alert on backlog age, never rate), a degraded storage
// class, settle lag, quarantined streams, work queue
// age, dead-letter depth, star health, star crash loops, and scheduled job
// failures.
func (s *Starlog) alarms() {
	c := s.Config
	st := s.Stack
	s.AlarmTopic = awssns.NewTopic(st, jsii.String("Alarms"), &awssns.TopicProps{
		DisplayName: jsii.String("starlog " + c.StackName + " alarms"),
		EnforceSSL:  jsii.Bool(true),
	})
	if c.AlarmEmail != "" {
		s.AlarmTopic.AddSubscription(awssnssubscriptions.NewEmailSubscription(jsii.String(c.AlarmEmail), nil))
	}

	starMetric := func(name, stat string, period float64) awscloudwatch.Metric {
		return awscloudwatch.NewMetric(&awscloudwatch.MetricProps{
			Namespace:     jsii.String(MetricsNamespace),
			MetricName:    jsii.String(name),
			DimensionsMap: &map[string]*string{userdata.DimensionCluster: jsii.String(c.StackName)},
			Statistic:     jsii.String(stat),
			Period:        awscdk.Duration_Minutes(jsii.Number(period)),
		})
	}
	five := awscdk.Duration_Minutes(jsii.Number(5))
	oneMin := awscdk.Duration_Minutes(jsii.Number(1))

	// The unit logs one line per star exit to the star's log, which the
	// agent ships to the star log group; the unclean ones are counted.
	awslogs.NewMetricFilter(st, jsii.String("StarExits"), &awslogs.MetricFilterProps{
		LogGroup:        s.starLogs,
		FilterPattern:   awslogs.FilterPattern_Literal(jsii.String(userdata.ExitFilterPattern)),
		MetricNamespace: jsii.String(MetricsNamespace),
		MetricName:      jsii.String(MetricStarExits),
		MetricValue:     jsii.String("1"),
		Dimensions:      &map[string]*string{userdata.DimensionCluster: jsii.String("$cluster")},
	})

	list := []alarm{
		{"BacklogAge", "Released but unabsorbed flights are old: absorb or the metastore is behind (stars block at the backlog bound).",
			starMetric(userdata.MetricBacklogAge, "Maximum", 1), float64(c.BacklogAgeAlarmSeconds),
			awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 3, awscloudwatch.TreatMissingData_NOT_BREACHING},
		{"Stalls", "A star's publishing stalled at the backlog budget; the star log names the cause.",
			starMetric(userdata.MetricStall, "Sum", 5), 0,
			awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 1, awscloudwatch.TreatMissingData_NOT_BREACHING},
		{"StorageClassDegraded", "A storage class of a star commits nothing (its buckets refuse or do not answer its writes: a failed CreateSession, a 403): appends to it are answered 503 until a flight commits. The star's /health names the class (\"degraded\"), its /metrics has starlog_storage_class_degraded{class}, and its log the last halt's cause.",
			starMetric(userdata.MetricClassDegraded, "Maximum", 1), 0,
			awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 1, awscloudwatch.TreatMissingData_NOT_BREACHING},
		{"SettleLag", "Ripe batch markers are not being settled.",
			starMetric(userdata.MetricSettleLag, "Maximum", 5), float64(c.SettleLagAlarmSeconds),
			awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 2, awscloudwatch.TreatMissingData_NOT_BREACHING},
		{"SettleQuarantine", "A stream's settle kept failing and it is quarantined: its slots are pinned (every other stream's are trimmed); see star settle quarantine list, then retry or force it.",
			starMetric(MetricQuarantined, "Maximum", 5), 0,
			awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 1, awscloudwatch.TreatMissingData_NOT_BREACHING},
		{"StarExits", "Stars keep exiting uncleanly (a crash loop: systemd restarts them forever); the star log group has each exit and the star's last lines.",
			starMetric(MetricStarExits, "Sum", StarExitsAlarmMinutes), StarExitsAlarmCount,
			awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD, 1, awscloudwatch.TreatMissingData_NOT_BREACHING},
		{"StarUnhealthy", "A star fails its /health check.",
			s.TargetGroup.Metrics().UnHealthyHostCount(&awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Period: oneMin}), 1,
			awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD, 5, awscloudwatch.TreatMissingData_NOT_BREACHING},
		{"NoHealthyStar", "No star passes its health check: the service is down.",
			s.TargetGroup.Metrics().HealthyHostCount(&awscloudwatch.MetricOptions{Statistic: jsii.String("Minimum"), Period: oneMin}), 1,
			awscloudwatch.ComparisonOperator_LESS_THAN_THRESHOLD, 2, awscloudwatch.TreatMissingData_BREACHING},
	}
	for _, job := range config.QueueJobs {
		id := constructID(job)
		list = append(list,
			alarm{id + "QueueAge", "The " + job + " queue's oldest message is old: the job is failing or under-provisioned.",
				s.Queues[job].MetricApproximateAgeOfOldestMessage(&awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Period: five}),
				float64(c.QueueAgeAlarmSeconds), awscloudwatch.ComparisonOperator_GREATER_THAN_THRESHOLD, 3, awscloudwatch.TreatMissingData_NOT_BREACHING},
			alarm{id + "DeadLetters", "Messages of the " + job + " job exhausted their retries: inspect and redrive the dead-letter queue.",
				s.DeadLetterQueues[job].MetricApproximateNumberOfMessagesVisible(&awscloudwatch.MetricOptions{Statistic: jsii.String("Maximum"), Period: five}),
				1, awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD, 1, awscloudwatch.TreatMissingData_NOT_BREACHING},
		)
	}
	for _, job := range config.ScheduledJobs {
		list = append(list, alarm{constructID(job) + "Errors", "The scheduled " + job + " job keeps failing.",
			s.Functions[job].MetricErrors(&awscloudwatch.MetricOptions{Statistic: jsii.String("Sum"), Period: five}),
			1, awscloudwatch.ComparisonOperator_GREATER_THAN_OR_EQUAL_TO_THRESHOLD, 3, awscloudwatch.TreatMissingData_NOT_BREACHING})
	}

	action := awscloudwatchactions.NewSnsAction(s.AlarmTopic)
	for _, a := range list {
		al := awscloudwatch.NewAlarm(st, jsii.String(a.id+"Alarm"), &awscloudwatch.AlarmProps{
			AlarmName:          jsii.String(c.StackName + "-" + kebab(a.id)),
			AlarmDescription:   jsii.String(a.description),
			Metric:             a.metric,
			Threshold:          jsii.Number(a.threshold),
			ComparisonOperator: a.op,
			EvaluationPeriods:  jsii.Number(a.periods),
			DatapointsToAlarm:  jsii.Number(a.periods),
			TreatMissingData:   a.missing,
		})
		al.AddAlarmAction(action)
		al.AddOkAction(action)
		s.alarmList = append(s.alarmList, al)
	}
}

// kebab turns a construct id into an alarm name part: QueueAge → queue-age.
func kebab(id string) string {
	var b strings.Builder
	for i, r := range id {
		if r >= 'A' && r <= 'Z' {
			if i > 0 {
				b.WriteByte('-')
			}
			r += 'a' - 'A'
		}
		b.WriteRune(r)
	}
	return b.String()
}

// outputs are what operators and clients need after a deploy.
func (s *Starlog) outputs() {
	out := func(id, desc string, v *string) {
		awscdk.NewCfnOutput(s.Stack, jsii.String(id), &awscdk.CfnOutputProps{Value: v, Description: jsii.String(desc)})
	}
	out("LoadBalancerDnsName", "Endpoint of the starlog API (point S2 clients here)", s.LoadBalancer.LoadBalancerDnsName())
	out("TableName", "DynamoDB metastore table", s.Table.TableName())
	out("BucketName", "S3 Standard bucket (chains and settled objects)", s.Bucket.BucketName())
	out("ExpressBucketNames", "S3 Express One Zone directory buckets, one per zone", jsii.String(strings.Join(s.expressBucketRefs(), ",")))
	out("StarAutoScalingGroupName", "Autoscaling group of the stars", s.Stars.AutoScalingGroupName())
	out("AdminTokenSecretArn", "Secrets Manager secret holding the admin access token (aws secretsmanager get-secret-value --secret-id <arn>)", s.AdminToken.SecretArn())
	out("AlarmTopicArn", "SNS topic every alarm notifies", s.AlarmTopic.TopicArn())
}
