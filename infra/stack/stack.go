// Package stack is the starlog CloudFormation stack in CDK: network, star
// fleet behind a Network Load Balancer, the metastore table, the Standard
// and S3 Express One Zone buckets, the auditor Lambdas with their queues and
// schedules, least-privilege roles, alarms and outputs.
package stack

import (
	"fmt"
	"os"
	"sort"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsautoscaling"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsdynamodb"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticloadbalancingv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslambda"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3express"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssecretsmanager"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssns"
	"github.com/aws/aws-cdk-go/awscdk/v2/awssqs"
	"github.com/aws/aws-cdk-go/awscdk/v2/interfaces/interfacesawscloudwatch"
	"github.com/aws/constructs-go/constructs/v10"
	"github.com/aws/jsii-runtime-go"

	"github.com/starlog/starlog/infra/assets"
	"github.com/starlog/starlog/infra/config"
)

// MetricsNamespace is the CloudWatch namespace of the star's and the
// auditor's own metrics.
const MetricsNamespace = "Starlog"

// Starlog holds the stack and the constructs tests and callers look at.
type Starlog struct {
	Stack  awscdk.Stack
	Config config.Config

	Vpc              awsec2.Vpc
	Table            awsdynamodb.Table
	Bucket           awss3.Bucket
	DirectoryBuckets []awss3express.CfnDirectoryBucket

	StarRole     awsiam.Role
	Stars        awsautoscaling.AutoScalingGroup
	LoadBalancer awselasticloadbalancingv2.NetworkLoadBalancer
	TargetGroup  awselasticloadbalancingv2.NetworkTargetGroup
	// KafkaTargetGroup is the stars' Kafka port behind the load
	// balancer's Kafka listener (nil when config.KafkaPort is 0).
	KafkaTargetGroup awselasticloadbalancingv2.NetworkTargetGroup

	// Queues and DeadLetterQueues are keyed by queue job.
	Queues           map[string]awssqs.Queue
	DeadLetterQueues map[string]awssqs.Queue
	// Functions and FunctionRoles are keyed by job.
	Functions     map[string]awslambda.Function
	FunctionRoles map[string]awsiam.Role

	AlarmTopic awssns.Topic
	// alarmList is every alarm, for the dashboard's status widget.
	alarmList []interfacesawscloudwatch.IAlarmRef

	// AdminToken and InternalKey are the stars' secrets (secrets.go).
	AdminToken, InternalKey awssecretsmanager.Secret

	starLogs awslogs.LogGroup
}

// BuildOptions are the inputs of Build besides the app's context.
type BuildOptions struct {
	// Root is the repository root: relative binary paths in the config
	// resolve against it.
	Root string
	// Warn receives one line per placeholder binary; nil discards.
	Warn func(string)
}

// Build reads the configuration from the app's context, checks the
// binaries, pins the availability zones in context (so synth never looks
// them up) and adds the stack to the app. The app must have no children
// yet.
func Build(app awscdk.App, opts BuildOptions) (*Starlog, error) {
	ctx, _ := app.Node().GetAllContext(nil).(map[string]any)
	keys := make([]string, 0, len(ctx))
	for k := range ctx {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if err := config.CheckKeys(keys); err != nil {
		return nil, err
	}
	cfg, err := config.Parse(func(key string) (any, bool) {
		v, ok := ctx[config.ContextPrefix+key]
		return unwrapJSII(v), ok
	})
	if err != nil {
		return nil, err
	}
	cfg = cfg.WithRoot(opts.Root)
	rep, err := assets.Check(cfg, cfg.AllowPlaceholderBinaries)
	if err != nil {
		return nil, err
	}
	if opts.Warn != nil {
		for _, p := range rep.Placeholders {
			opts.Warn(fmt.Sprintf("WARNING: %s is a placeholder; this synth is not deployable", p))
		}
	}
	// The CDK checks the VPC's zones against the stack's zone list, which
	// it would otherwise look up in the account: give it the configured
	// zones for whatever account is configured.
	app.Node().SetContext(jsii.String(cfg.AvailabilityZonesContextKey()), toAny(cfg.AvailabilityZones))
	return New(app, cfg)
}

// New adds the starlog stack to scope. cfg must hold absolute binary paths
// (see config.Config.WithRoot); New validates it but does not check the
// files.
func New(scope constructs.Construct, cfg config.Config) (*Starlog, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if _, ok := retentionByDays[cfg.LogRetentionDays]; !ok {
		return nil, fmt.Errorf("logRetentionDays %d has no CDK retention value", cfg.LogRetentionDays)
	}
	for _, p := range []string{cfg.StarBinary, cfg.LambdaDir} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("stack input: %w", err)
		}
	}
	st := awscdk.NewStack(scope, jsii.String(cfg.StackName), &awscdk.StackProps{
		Env: &awscdk.Environment{
			Account: jsii.String(cfg.Account),
			Region:  jsii.String(cfg.Region),
		},
		Description: jsii.String("starlog: durable stream store on S3 and DynamoDB (stars, auditor, storage)"),
	})
	awscdk.Tags_Of(st).Add(jsii.String("project"), jsii.String("starlog"), nil)

	s := &Starlog{Stack: st, Config: cfg}
	s.network()
	s.storage()
	s.secrets()
	if err := s.stars(); err != nil {
		return nil, err
	}
	s.auditor()
	s.alarms()
	s.dashboard()
	s.outputs()
	s.protectTable()
	return s, nil
}

// removalPolicy of the table and the buckets: with retainData they are
// kept when the stack is deleted or they are replaced, but not when the
// stack's first create rolls back (CloudFormation's RetainExceptOnCreate):
// a failed first deploy leaves no fixed-name directory bucket behind to
// make the retry fail.
func (s *Starlog) removalPolicy() awscdk.RemovalPolicy {
	if s.Config.RetainData {
		return awscdk.RemovalPolicy_RETAIN_ON_UPDATE_OR_DELETE
	}
	return awscdk.RemovalPolicy_DESTROY
}

// unwrapJSII removes the {"$jsii.map": …} envelopes jsii leaves around
// maps that were handed to it from Go (the app's context in tests) and
// hands back untyped.
func unwrapJSII(v any) any {
	switch x := v.(type) {
	case map[string]any:
		if inner, ok := x["$jsii.map"]; ok && len(x) == 1 {
			return unwrapJSII(inner)
		}
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = unwrapJSII(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = unwrapJSII(e)
		}
		return out
	default:
		return v
	}
}

func toAny(xs []string) []any {
	out := make([]any, len(xs))
	for i, x := range xs {
		out[i] = x
	}
	return out
}

func strs(xs ...string) *[]*string { return jsii.Strings(xs...) }
