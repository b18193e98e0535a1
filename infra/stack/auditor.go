package stack

import (
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsevents"
	"github.com/aws/aws-cdk-go/awscdk/v2/awseventstargets"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambdaeventsources"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/jsii-runtime-go"

	"github.com/starlog/starlog/infra/config"
)

// Environment variables the auditor functions read. They are the env
// fallbacks of the star's own flags (STARLOG_ + the flag upper-cased,
// dashes as underscores: --dynamo-table, --standard-buckets,
// --express-buckets), so one loader serves both.
const (
	EnvTable            = "STARLOG_DYNAMO_TABLE"
	EnvBucket           = "STARLOG_STANDARD_BUCKETS"
	EnvExpressBuckets   = "STARLOG_EXPRESS_BUCKETS"
	EnvScratchDir       = "STARLOG_SCRATCH_DIR"
	EnvScratchMiB       = "STARLOG_SCRATCH_MIB"
	EnvMemoryMiB        = "STARLOG_MEMORY_MIB"
	EnvMetricsNamespace = "STARLOG_METRICS_NAMESPACE"
	EnvCluster          = "STARLOG_CLUSTER"
)

// QueueURLEnv is the variable holding a queue job's queue URL, e.g.
// STARLOG_CHAIN_SETTLE_QUEUE_URL.
func QueueURLEnv(job string) string {
	return "STARLOG_" + strings.ToUpper(strings.ReplaceAll(job, "-", "_")) + "_QUEUE_URL"
}

// FunctionName is the Lambda function name of a job.
func FunctionName(stackName, job string) string { return stackName + "-" + job }

// constructID turns a job name into a construct id part: chain-settle →
// ChainSettle.
func constructID(job string) string {
	parts := strings.Split(job, "-")
	for i, p := range parts {
		parts[i] = strings.ToUpper(p[:1]) + p[1:]
	}
	return strings.Join(parts, "")
}

// auditor builds the queues (each with a dead-letter queue), one function
// per job from its bootstrap, the SQS event source mappings with partial
// batch responses, and the EventBridge schedules.
func (s *Starlog) auditor() {
	c := s.Config
	st := s.Stack
	s.Queues = map[string]awssqs.Queue{}
	s.DeadLetterQueues = map[string]awssqs.Queue{}
	s.Functions = map[string]awslambda.Function{}
	s.FunctionRoles = map[string]awsiam.Role{}

	for _, job := range config.QueueJobs {
		f := c.Functions[job]
		id := constructID(job)
		dlq := awssqs.NewQueue(st, jsii.String(id+"DLQ"), &awssqs.QueueProps{
			QueueName:       jsii.String(c.StackName + "-" + job + "-dlq"),
			Encryption:      awssqs.QueueEncryption_SQS_MANAGED,
			EnforceSSL:      jsii.Bool(true),
			RetentionPeriod: awscdk.Duration_Days(jsii.Number(14)),
		})
		q := awssqs.NewQueue(st, jsii.String(id+"Queue"), &awssqs.QueueProps{
			QueueName:         jsii.String(c.StackName + "-" + job),
			Encryption:        awssqs.QueueEncryption_SQS_MANAGED,
			EnforceSSL:        jsii.Bool(true),
			VisibilityTimeout: awscdk.Duration_Seconds(jsii.Number(float64(config.VisibilityTimeoutSeconds(f)))),
			RetentionPeriod:   awscdk.Duration_Days(jsii.Number(4)),
			DeadLetterQueue: &awssqs.DeadLetterQueue{
				Queue:           dlq,
				MaxReceiveCount: jsii.Number(float64(f.MaxReceiveCount)),
			},
		})
		s.Queues[job] = q
		s.DeadLetterQueues[job] = dlq
	}

	env := map[string]*string{
		// The same table, buckets and policy the stars are given (one
		// source: the stars get them as flags, the functions as the
		// flags' environment fallbacks).
		EnvTable:            s.Table.TableName(),
		EnvBucket:           s.Bucket.BucketName(),
		EnvExpressBuckets:   jsii.String(strings.Join(s.expressBucketRefs(), ",")),
		EnvScratchDir:       jsii.String("/tmp"),
		EnvMetricsNamespace: jsii.String(MetricsNamespace),
		EnvCluster:          jsii.String(c.StackName),
	}
	for _, f := range c.Policy.Flags() {
		env[config.EnvName(f.Name)] = jsii.String(f.Value)
	}

	for _, job := range config.Jobs {
		f := c.Functions[job]
		id := constructID(job)
		name := FunctionName(c.StackName, job)
		logs := awslogs.NewLogGroup(st, jsii.String(id+"Logs"), &awslogs.LogGroupProps{
			LogGroupName:  jsii.String("/aws/lambda/" + name),
			Retention:     retention(c.LogRetentionDays),
			RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
		})
		g := jobGrants[job]
		doc := awsiam.NewPolicyDocument(nil)
		doc.AddStatements(awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("Logs"),
			Actions:   strs("logs:CreateLogStream", "logs:PutLogEvents"),
			Resources: strs(*logs.LogGroupArn()),
		}))
		for _, stmt := range s.statements(g) {
			doc.AddStatements(stmt)
		}
		// A role of its own per job, with no managed policies: the basic
		// execution policy would allow logs on every group.
		role := awsiam.NewRole(st, jsii.String(id+"Role"), &awsiam.RoleProps{
			AssumedBy:      awsiam.NewServicePrincipal(jsii.String("lambda.amazonaws.com"), nil),
			Description:    jsii.String("starlog " + job + " job"),
			InlinePolicies: &map[string]awsiam.PolicyDocument{"job": doc},
		})

		// The function's real /tmp and memory: the settle job's scratch
		// and footer limits are derived from them (shared/auditjob/awsenv).
		fenv := map[string]*string{EnvScratchMiB: jsii.String(strconv.Itoa(f.EphemeralMiB)), EnvMemoryMiB: jsii.String(strconv.Itoa(f.MemoryMiB))}
		for k, v := range env {
			fenv[k] = v
		}
		for _, to := range g.sendTo {
			fenv[QueueURLEnv(to)] = s.Queues[to].QueueUrl()
		}
		props := &awslambda.FunctionProps{
			FunctionName:         jsii.String(name),
			Description:          jsii.String("starlog auditor: " + job),
			Runtime:              awslambda.Runtime_PROVIDED_AL2023(),
			Architecture:         awslambda.Architecture_ARM_64(),
			Handler:              jsii.String("bootstrap"),
			Code:                 awslambda.Code_FromAsset(jsii.String(filepath.Join(c.LambdaDir, job)), nil),
			MemorySize:           jsii.Number(float64(f.MemoryMiB)),
			EphemeralStorageSize: awscdk.Size_Mebibytes(jsii.Number(float64(f.EphemeralMiB))),
			Timeout:              awscdk.Duration_Seconds(jsii.Number(float64(f.TimeoutSeconds))),
			Role:                 role,
			LogGroup:             logs,
			LoggingFormat:        awslambda.LoggingFormat_JSON,
			Environment:          &fenv,
		}
		if f.ScheduleMinutes > 0 && !slices.Contains(config.QueueJobs, job) {
			// A missed run is covered by the next one: no retries, and an
			// event older than two periods is dropped.
			props.RetryAttempts = jsii.Number(0)
			props.MaxEventAge = awscdk.Duration_Minutes(jsii.Number(float64(max(2*f.ScheduleMinutes, 1))))
		}
		fn := awslambda.NewFunction(st, jsii.String(id+"Function"), props)
		// Stars before the auditor (docs/deploy.md, "Upgrades"): an update
		// replaces the functions' code only once the stars' rolling update
		// has finished, so a new auditor never meets an old star.
		fn.Node().AddDependency(s.Stars)
		s.Functions[job] = fn
		s.FunctionRoles[job] = role

		if q, ok := s.Queues[job]; ok {
			src := &awslambdaeventsources.SqsEventSourceProps{
				BatchSize:               jsii.Number(float64(f.BatchSize)),
				ReportBatchItemFailures: jsii.Bool(true),
			}
			if f.MaxConcurrency > 0 {
				src.MaxConcurrency = jsii.Number(float64(f.MaxConcurrency))
			}
			fn.AddEventSource(awslambdaeventsources.NewSqsEventSource(q, src))
		} else {
			awsevents.NewRule(st, jsii.String(id+"Schedule"), &awsevents.RuleProps{
				Description: jsii.String("starlog " + job + " every " + strconv.Itoa(f.ScheduleMinutes) + " min"),
				Schedule:    awsevents.Schedule_Rate(awscdk.Duration_Minutes(jsii.Number(float64(f.ScheduleMinutes)))),
				Targets: &[]awsevents.IRuleTarget{awseventstargets.NewLambdaFunction(fn, &awseventstargets.LambdaFunctionProps{
					RetryAttempts: jsii.Number(0),
					MaxEventAge:   awscdk.Duration_Minutes(jsii.Number(float64(max(2*f.ScheduleMinutes, 1)))),
				})},
			})
		}
	}
}
