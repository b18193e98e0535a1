package stack

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-cdk-go/awscdk/v2/assertions"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/jsii-runtime-go"

	"github.com/starlog/starlog/infra/assets"
	"github.com/starlog/starlog/infra/config"
	"github.com/starlog/starlog/infra/iamcheck"
	"github.com/starlog/starlog/infra/userdata"
)

func TestAssertionFailureIsAnError(t *testing.T) {
	// A failed assertion panics inside jsii; check must turn it into an
	// error instead of crashing the test binary.
	x := defaults(t)
	err := catch(func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), like("BillingMode", "PROVISIONED"))
	})
	if err == nil {
		t.Fatal("a failing assertion did not fail")
	}
	if err := catch(func() { x.tmpl.ResourceCountIs(jsii.String("AWS::DynamoDB::Table"), jsii.Number(1)) }); err != nil {
		t.Fatalf("a passing assertion failed: %v", err)
	}
}

func TestResourceCounts(t *testing.T) {
	x := defaults(t)
	for typ, n := range map[string]float64{
		"AWS::EC2::VPC":                             1,
		"AWS::EC2::Subnet":                          6,
		"AWS::EC2::NatGateway":                      1,
		"AWS::EC2::VPCEndpoint":                     3,
		"AWS::DynamoDB::Table":                      1,
		"AWS::S3::Bucket":                           1,
		"AWS::S3Express::DirectoryBucket":           3,
		"AWS::SQS::Queue":                           6,
		"AWS::Lambda::EventSourceMapping":           3,
		"AWS::Events::Rule":                         2,
		"AWS::ElasticLoadBalancingV2::LoadBalancer": 1,
		"AWS::ElasticLoadBalancingV2::Listener":     2, // the API's and Kafka's
		"AWS::ElasticLoadBalancingV2::TargetGroup":  2,
		"AWS::AutoScaling::AutoScalingGroup":        1,
		"AWS::AutoScaling::LifecycleHook":           1,
		"AWS::AutoScaling::LaunchConfiguration":     0,
		"AWS::EC2::LaunchTemplate":                  1,
		"AWS::SNS::Topic":                           1,
		"AWS::CloudWatch::Alarm":                    16,
		"AWS::Logs::MetricFilter":                   1,
		"Custom::AWS":                               1,
	} {
		check(t, typ, func() { x.tmpl.ResourceCountIs(jsii.String(typ), jsii.Number(n)) })
	}
	// The auditor's functions; the VPC's default-SG custom resource brings
	// one more (Node.js) function of its own.
	check(t, "auditor functions", func() {
		x.tmpl.ResourcePropertiesCountIs(jsii.String("AWS::Lambda::Function"), like("Runtime", "provided.al2023"), jsii.Number(5))
	})
}

func TestVPCZones(t *testing.T) {
	x := defaults(t)
	var zones []string
	for _, r := range x.resources("AWS::EC2::Subnet") {
		zones = append(zones, props(r)["AvailabilityZone"].(string))
	}
	slices.Sort(zones)
	zones = slices.Compact(zones)
	if strings.Join(zones, ",") != "us-east-1a,us-east-1b,us-east-1c" {
		t.Errorf("subnet zones %v", zones)
	}
	var services []string
	for _, r := range x.resources("AWS::EC2::VPCEndpoint") {
		services = append(services, iamcheck.Render(props(r)["ServiceName"]))
		if props(r)["VpcEndpointType"] != "Gateway" {
			t.Errorf("endpoint %v is not a gateway endpoint", props(r)["ServiceName"])
		}
	}
	slices.Sort(services)
	want := "com.amazonaws.${AWS::Region}.dynamodb,com.amazonaws.${AWS::Region}.s3,com.amazonaws.${AWS::Region}.s3express"
	if strings.Join(services, ",") != want {
		t.Errorf("gateway endpoints %v", services)
	}
}

func TestTable(t *testing.T) {
	x := defaults(t)
	check(t, "table keys, billing, PITR", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), like(
			"KeySchema", assertions.Match_ArrayEquals(arr(
				like("AttributeName", "pk", "KeyType", "HASH"),
				like("AttributeName", "sk", "KeyType", "RANGE"),
			)),
			"AttributeDefinitions", assertions.Match_ArrayEquals(arr(
				like("AttributeName", "pk", "AttributeType", "S"),
				like("AttributeName", "sk", "AttributeType", "S"),
			)),
			"BillingMode", "PAY_PER_REQUEST",
			"PointInTimeRecoverySpecification", like("PointInTimeRecoveryEnabled", true),
			// Created unprotected: protection comes last (below).
			"DeletionProtectionEnabled", assertions.Match_Absent(),
		))
	})
	// Issue 12 item 2: kept on delete and replacement, not on a failed
	// first create.
	check(t, "table retained on delete and update, not on a failed create", func() {
		x.tmpl.HasResource(jsii.String("AWS::DynamoDB::Table"), like("DeletionPolicy", "RetainExceptOnCreate", "UpdateReplacePolicy", "Retain"))
	})
	check(t, "deletion protection switched on by a custom resource", func() {
		x.tmpl.HasResourceProperties(jsii.String("Custom::AWS"), like(
			"Create", like("Fn::Join", arr("", assertions.Match_ArrayWith(arr(re(`"action":"updateTable","parameters":\{"DeletionProtectionEnabled":true,"TableName":"$`))))),
			"Delete", like("Fn::Join", arr("", assertions.Match_ArrayWith(arr(re(`"DeletionProtectionEnabled":false`))))),
		))
	})
	// It must come last: after the stars have signalled and every other
	// resource exists, so nothing can fail a create after it.
	var deps []string
	var crID string
	for id, r := range x.resources("Custom::AWS") {
		crID = id
		for _, d := range r["DependsOn"].([]any) {
			deps = append(deps, d.(string))
		}
	}
	res, _ := x.json["Resources"].(map[string]any)
	for id, r := range res {
		typ := r.(map[string]any)["Type"].(string)
		if id == crID || strings.HasPrefix(id, "AWS679f53fac002430cb0da5b7982bd2287") || strings.HasPrefix(id, TableProtectionID) {
			continue
		}
		if !slices.Contains(deps, id) {
			t.Errorf("the deletion-protection resource does not wait for %s (%s)", id, typ)
		}
	}
	// Its grant is the one call on the one table.
	for _, st := range x.statements(t) {
		if slices.Contains(st.Actions, "dynamodb:updatetable") {
			if len(st.Actions) != 1 || len(st.Resources) != 1 || !regexp.MustCompile(`^\$\{Metastore[0-9A-F]+\.Arn\}$`).MatchString(st.Resources[0]) {
				t.Errorf("UpdateTable grant %+v", st)
			}
		}
	}
}

func TestBuckets(t *testing.T) {
	x := defaults(t)
	check(t, "standard bucket", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::S3::Bucket"), like(
			"BucketEncryption", like("ServerSideEncryptionConfiguration", assertions.Match_ArrayWith(arr(
				like("ServerSideEncryptionByDefault", like("SSEAlgorithm", "AES256"))))),
			"PublicAccessBlockConfiguration", like(
				"BlockPublicAcls", true, "BlockPublicPolicy", true, "IgnorePublicAcls", true, "RestrictPublicBuckets", true),
			"LifecycleConfiguration", like("Rules", assertions.Match_ArrayWith(arr(
				like("AbortIncompleteMultipartUpload", like("DaysAfterInitiation", 1), "Status", "Enabled")))),
		))
	})
	check(t, "TLS-only bucket policy", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::S3::BucketPolicy"), like(
			"PolicyDocument", like("Statement", assertions.Match_ArrayWith(arr(like(
				"Effect", "Deny",
				"Condition", like("Bool", like("aws:SecureTransport", "false")),
			)))),
		))
	})
	check(t, "buckets retained on delete and update, not on a failed create", func() {
		x.tmpl.AllResources(jsii.String("AWS::S3Express::DirectoryBucket"), like("DeletionPolicy", "RetainExceptOnCreate", "UpdateReplacePolicy", "Retain"))
		x.tmpl.AllResources(jsii.String("AWS::S3::Bucket"), like("DeletionPolicy", "RetainExceptOnCreate", "UpdateReplacePolicy", "Retain"))
	})
	for _, id := range []string{"use1-az4", "use1-az5", "use1-az6"} {
		check(t, "directory bucket in "+id, func() {
			x.tmpl.HasResourceProperties(jsii.String("AWS::S3Express::DirectoryBucket"), like(
				"BucketName", "starlog-123456789012--"+id+"--x-s3",
				"LocationName", id,
				"DataRedundancy", "SingleAvailabilityZone",
			))
		})
	}
}

func TestFunctions(t *testing.T) {
	x := defaults(t)
	cfg := x.s.Config
	for _, job := range config.Jobs {
		f := cfg.Functions[job]
		check(t, "function "+job, func() {
			x.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), like(
				"FunctionName", "Starlog-"+job,
				"Runtime", "provided.al2023",
				"Architectures", assertions.Match_ArrayEquals(arr("arm64")),
				"Handler", "bootstrap",
				"MemorySize", f.MemoryMiB,
				"EphemeralStorage", like("Size", f.EphemeralMiB),
				"Timeout", f.TimeoutSeconds,
				"Environment", like("Variables", like(
					EnvTable, like("Ref", re("^Metastore")),
					EnvBucket, like("Ref", re("^Standard")),
					EnvScratchMiB, strconv.Itoa(f.EphemeralMiB),
					EnvMemoryMiB, strconv.Itoa(f.MemoryMiB),
					"STARLOG_SETTLE_LINGER", "60s",
					"STARLOG_SETTLE_EXPRESS_AGE_CAP", "2m",
					"STARLOG_READ_GRACE", "5m",
					"STARLOG_DEAD_AFTER", "30s",
				)),
			))
		})
	}
	// Settle's scratch is the fetch cache: it must get the most.
	if s := cfg.Functions[config.JobSettle]; s.EphemeralMiB < 4096 {
		t.Errorf("settle scratch %d MiB is too small for an era's bundles", s.EphemeralMiB)
	}
	// Only the jobs that enqueue know the queue URLs.
	for id, r := range x.resources("AWS::Lambda::Function") {
		env, _ := props(r)["Environment"].(map[string]any)
		vars, _ := env["Variables"].(map[string]any)
		name, _ := props(r)["FunctionName"].(string)
		_, hasSettleURL := vars[QueueURLEnv(config.JobSettle)]
		if hasSettleURL != (name == "Starlog-plan") {
			t.Errorf("%s (%s): settle queue URL present = %v", id, name, hasSettleURL)
		}
	}
}

func TestQueues(t *testing.T) {
	x := defaults(t)
	cfg := x.s.Config
	for _, job := range config.QueueJobs {
		f := cfg.Functions[job]
		id := constructID(job)
		check(t, job+" queue redrive", func() {
			x.tmpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), like(
				"QueueName", "Starlog-"+job,
				"VisibilityTimeout", config.VisibilityTimeoutSeconds(f),
				"RedrivePolicy", like(
					"deadLetterTargetArn", like("Fn::GetAtt", arr(re("^"+id+"DLQ"), "Arn")),
					"maxReceiveCount", f.MaxReceiveCount,
				),
			))
		})
		check(t, job+" dead-letter queue", func() {
			x.tmpl.HasResourceProperties(jsii.String("AWS::SQS::Queue"), like(
				"QueueName", "Starlog-"+job+"-dlq",
				"MessageRetentionPeriod", 14*24*3600,
			))
		})
		check(t, job+" event source mapping", func() {
			x.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::EventSourceMapping"), like(
				"EventSourceArn", like("Fn::GetAtt", arr(re("^"+id+"Queue"), "Arn")),
				"FunctionName", like("Ref", re("^"+id+"Function")),
				"FunctionResponseTypes", assertions.Match_ArrayEquals(arr("ReportBatchItemFailures")),
				"BatchSize", f.BatchSize,
			))
		})
	}
}

func TestSchedules(t *testing.T) {
	x := defaults(t)
	for _, job := range config.ScheduledJobs {
		id := constructID(job)
		check(t, job+" schedule", func() {
			x.tmpl.HasResourceProperties(jsii.String("AWS::Events::Rule"), like(
				"ScheduleExpression", "rate(1 minute)",
				"State", "ENABLED",
				"Targets", assertions.Match_ArrayWith(arr(like(
					"Arn", like("Fn::GetAtt", arr(re("^"+id+"Function"), "Arn")),
					"RetryPolicy", like("MaximumRetryAttempts", 0),
				))),
			))
		})
		check(t, job+" invoke permission", func() {
			x.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Permission"), like(
				"Principal", "events.amazonaws.com",
				"FunctionName", like("Fn::GetAtt", arr(re("^"+id+"Function"), "Arn")),
			))
		})
	}
}

func TestLoadBalancer(t *testing.T) {
	x := defaults(t)
	check(t, "internal NLB", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::LoadBalancer"), like(
			"Type", "network", "Scheme", "internal"))
	})
	check(t, "TCP listener", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), like(
			"Port", 80, "Protocol", "TCP"))
	})
	check(t, "no TLS listener without a certificate", func() {
		x.tmpl.ResourcePropertiesCountIs(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), like("Protocol", "TLS"), jsii.Number(0))
	})
	check(t, "target group health on /health", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::TargetGroup"), like(
			"Port", 8080, "Protocol", "TCP", "TargetType", "instance",
			"HealthCheckProtocol", "HTTP", "HealthCheckPath", "/health",
		))
	})
	// Kafka (issue 30 item 5): its own listener and target group, the
	// stars' Kafka port, health-checked on the API's /health.
	check(t, "Kafka listener", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), like(
			"Port", 9092, "Protocol", "TCP",
			"DefaultActions", arr(like("TargetGroupArn", like("Ref", re("^StarKafkaTargets"))))))
	})
	check(t, "Kafka target group health on the API's /health", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::TargetGroup"), like(
			"Port", 9092, "Protocol", "TCP", "TargetType", "instance",
			"HealthCheckProtocol", "HTTP", "HealthCheckPath", "/health", "HealthCheckPort", "8080",
		))
	})
	check(t, "stars in the Kafka target group", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::AutoScaling::AutoScalingGroup"), like(
			"TargetGroupARNs", assertions.Match_ArrayWith(arr(like("Ref", re("^StarKafkaTargets"))))))
	})
	checkExposure(t, x, 8080, 8081, 9092)
}

// checkExposure: the NLB reaches the stars' public port (and Kafka's,
// when given) and nothing else; the internal port is open to other stars
// only (issue 12 item 8).
func checkExposure(t *testing.T, x *synthesized, public, internal float64, kafka ...float64) {
	t.Helper()
	reached := append([]float64{public}, kafka...)
	if n := len(x.resources("AWS::ElasticLoadBalancingV2::TargetGroup")); n != len(reached) {
		t.Errorf("%d target groups, want %d (the public port, Kafka's)", n, len(reached))
	}
	for _, tg := range x.resources("AWS::ElasticLoadBalancingV2::TargetGroup") {
		if p, _ := props(tg)["Port"].(float64); !slices.Contains(reached, p) {
			t.Errorf("target group on port %v, want one of %v", props(tg)["Port"], reached)
		}
	}
	kafkaIn := false
	var lbSG, starSG string
	for id := range x.resources("AWS::EC2::SecurityGroup") {
		switch {
		case strings.HasPrefix(id, "LoadBalancerSG"):
			lbSG = id
		case strings.HasPrefix(id, "StarSG"):
			starSG = id
		}
	}
	sgRef := func(v any) string {
		m, _ := v.(map[string]any)
		if g, ok := m["Fn::GetAtt"].([]any); ok {
			return g[0].(string)
		}
		return ""
	}
	for id, r := range x.resources("AWS::EC2::SecurityGroupIngress") {
		p := props(r)
		if sgRef(p["GroupId"]) != starSG {
			continue
		}
		from, src := p["FromPort"], sgRef(p["SourceSecurityGroupId"])
		switch {
		case from == public && src == lbSG:
		case from == internal && src == starSG:
		case len(kafka) > 0 && from == kafka[0] && src == lbSG:
			kafkaIn = true
		default:
			t.Errorf("star ingress %s: port %v from %q", id, from, src)
		}
	}
	for id, r := range x.resources("AWS::EC2::SecurityGroupEgress") {
		p := props(r)
		if port, _ := p["FromPort"].(float64); sgRef(p["GroupId"]) == lbSG && !slices.Contains(reached, port) {
			t.Errorf("NLB egress %s to port %v", id, p["FromPort"])
		}
	}
	if len(kafka) > 0 && !kafkaIn {
		t.Errorf("no star ingress on the Kafka port %v from the NLB", kafka[0])
	}
}

func TestStars(t *testing.T) {
	x := defaults(t)
	check(t, "ASG on a launch template", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::AutoScaling::AutoScalingGroup"), like(
			"AutoScalingGroupName", "Starlog-stars",
			"MinSize", "3", "MaxSize", "4",
			"HealthCheckType", "ELB",
			"LaunchTemplate", like("LaunchTemplateId", like("Ref", re("^StarTemplate"))),
			"LaunchConfigurationName", assertions.Match_Absent(),
			"TargetGroupARNs", assertions.Match_ArrayWith(arr(like("Ref", re("^StarTargets")))),
		))
	})
	check(t, "rolling update waits for healthy stars", func() {
		x.tmpl.HasResource(jsii.String("AWS::AutoScaling::AutoScalingGroup"), like(
			"CreationPolicy", like("ResourceSignal", like("Count", 3)),
			"UpdatePolicy", like("AutoScalingRollingUpdate", like(
				"MaxBatchSize", 1, "MinInstancesInService", 3, "WaitOnResourceSignals", true)),
		))
	})
	// Stars before the auditor (docs/deploy.md, "Upgrades"): every auditor
	// function waits for the stars' group, so an update rolls the stars
	// first and replaces the functions' code after.
	check(t, "auditor functions update after the stars", func() {
		var asg string
		for id := range x.resources("AWS::AutoScaling::AutoScalingGroup") {
			asg = id
		}
		n := 0
		for id, r := range x.resources("AWS::Lambda::Function") {
			if !strings.Contains(fmt.Sprint(r["Properties"]), "starlog auditor: ") {
				continue // CDK's own handlers
			}
			n++
			deps, _ := r["DependsOn"].([]any)
			if !slices.Contains(deps, any(asg)) {
				t.Errorf("auditor function %s does not depend on the stars' group %s: DependsOn %v", id, asg, deps)
			}
		}
		if n != len(config.Jobs) {
			t.Errorf("%d auditor functions, want %d", n, len(config.Jobs))
		}
	})
	check(t, "launch template: IMDSv2 only, arm64 type", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::EC2::LaunchTemplate"), like(
			"LaunchTemplateData", like(
				"InstanceType", "m7g.large",
				"MetadataOptions", like("HttpTokens", "required", "HttpPutResponseHopLimit", 1),
				// Pinned (issue 12 item 7): no image resolved at deploy.
				"ImageId", "ami-0123456789abcdef0",
			),
		))
	})
	params, _ := x.json["Parameters"].(map[string]any)
	for id, p := range params {
		if typ := p.(map[string]any)["Type"]; typ != "AWS::SSM::Parameter::Value<String>" || id != "BootstrapVersion" {
			t.Errorf("parameter %s (%v): the image must not be resolved at deploy time", id, typ)
		}
	}
	check(t, "drain lifecycle hook", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::AutoScaling::LifecycleHook"), like(
			"LifecycleHookName", LifecycleHookName,
			"LifecycleTransition", "autoscaling:EC2_INSTANCE_TERMINATING",
			"DefaultResult", "CONTINUE",
			"HeartbeatTimeout", 600,
			"AutoScalingGroupName", like("Ref", re("^StarsASG")),
		))
	})
}

func TestStarUserData(t *testing.T) {
	x := defaults(t)
	var lt map[string]any
	for _, r := range x.resources("AWS::EC2::LaunchTemplate") {
		lt = props(r)
	}
	data, _ := lt["LaunchTemplateData"].(map[string]any)
	b64, _ := data["UserData"].(map[string]any)
	script := iamcheck.Render(b64["Fn::Base64"])
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m)^ExecStart=/opt/starlog/bin/star serve \\$`),
		regexp.MustCompile(`--listen=:8080 \\`),
		regexp.MustCompile(`--internal-listen=:8081 \\`),
		regexp.MustCompile(`--kafka-listen=:9092 \\`),
		regexp.MustCompile(`--kafka-advertise=\$\{LoadBalancer[0-9A-F]+\.DNSName\}:9092 \\`),
		regexp.MustCompile(`--s3-region=\$\{AWS::Region\} \\`),
		regexp.MustCompile(`--dynamo-region=\$\{AWS::Region\} \\`),
		regexp.MustCompile(`--dynamo-table=\$\{Metastore[0-9A-F]+\} \\`),
		regexp.MustCompile(`--standard-buckets=\$\{Standard[0-9A-F]+\} \\`),
		regexp.MustCompile(`--express-buckets=\$\{Express1\},\$\{Express2\},\$\{Express3\} \\`),
		regexp.MustCompile(`--admin-token-secret=\$\{AdminToken[0-9A-F]+\} \\`),
		regexp.MustCompile(`--internal-key-secret=\$\{InternalKey[0-9A-F]+\} \\`),
		regexp.MustCompile(`--settle-linger=60s \\`),
		regexp.MustCompile(`--dead-after=30s \\`),
		regexp.MustCompile(`\nSTARLOG_STAR_ID=\$\{INSTANCE_ID\}\nSTARLOG_ADDRESS=\$\{LOCAL_IP\}:8081\n`),
		regexp.MustCompile(`StartLimitIntervalSec=0`),
		regexp.MustCompile(`DRAIN_ARGS='drain --wait --endpoint http://127\.0\.0\.1:8081 --internal-key-secret \$\{InternalKey[0-9A-F]+\}'`),
		regexp.MustCompile(`--s3-chain-backlog-flights=12288 \\`),
		regexp.MustCompile(`--s3-memory-buffer-mib=256\n`),
		regexp.MustCompile(`Restart=always`),
		regexp.MustCompile(`aws s3 cp .* 's3://cdk-[a-z0-9]+-assets-123456789012-us-east-1/[0-9a-f]+`),
		regexp.MustCompile(`--resource 'StarsASG[0-9A-F]+'`),
		regexp.MustCompile(`ASG_NAME='Starlog-stars'`),
		regexp.MustCompile(`HOOK_NAME='starlog-drain'`),
		regexp.MustCompile(`http://127\.0\.0\.1:8080/health`),
	} {
		if !want.MatchString(script) {
			t.Errorf("user data lacks %s", want)
		}
	}
	if strings.Contains(script, "${Token[") {
		t.Error("an unresolved CDK token leaked into the user data")
	}
	if len(script) > userdata.MaxBytes {
		t.Errorf("user data %d bytes > %d", len(script), userdata.MaxBytes)
	}
}

func TestIAMLeastPrivilege(t *testing.T) {
	x := defaults(t)
	findings := iamcheck.Check(x.statements(t))
	for _, f := range findings {
		t.Errorf("IAM: %s", f)
	}

	stmts := x.statements(t)
	roleID := func(prefix string) string {
		for id := range x.resources("AWS::IAM::Role") {
			if strings.HasPrefix(id, prefix) {
				return id
			}
		}
		t.Fatalf("no role %s*", prefix)
		return ""
	}
	chains := regexp.MustCompile(`^\$\{Standard[0-9A-F]+\.Arn\}/chains/\*$`)
	streams := regexp.MustCompile(`^\$\{Standard[0-9A-F]+\.Arn\}/streams/\*$`)
	express := regexp.MustCompile(`^\$\{Express[123]\.Arn\}$`)
	bucket := regexp.MustCompile(`^\$\{Standard[0-9A-F]+\.Arn\}$`)
	table := regexp.MustCompile(`^\$\{Metastore[0-9A-F]+\.Arn\}$`)

	star := iamcheck.ForRole(stmts, roleID("StarRole"))
	for _, c := range []struct {
		action string
		res    *regexp.Regexp
		want   bool
	}{
		{"s3:PutObject", chains, true},
		{"s3:GetObject", chains, true},
		{"s3:GetObject", streams, true},
		{"s3:PutObject", streams, false},
		{"s3:DeleteObject", chains, false},
		{"s3:ListBucket", bucket, true}, // a missing key must read 404, not 403
		{"s3express:CreateSession", express, true},
		{"dynamodb:PutItem", table, true},
		{"dynamodb:Scan", table, false},
	} {
		if got := iamcheck.Allowed(star, c.action, c.res); got != c.want {
			t.Errorf("star role: %s on %s = %v, want %v", c.action, c.res, got, c.want)
		}
	}

	// Each job's data actions are exactly its grant (plus the consumer
	// actions its queue's event source needs).
	consumer := []string{"sqs:changemessagevisibility", "sqs:deletemessage", "sqs:getqueueattributes", "sqs:getqueueurl", "sqs:receivemessage"}
	for _, job := range config.Jobs {
		role := iamcheck.ForRole(stmts, roleID(constructID(job)+"Role"))
		g := jobGrants[job]
		want := map[string]bool{"logs:createlogstream": true, "logs:putlogevents": true}
		for _, a := range g.meta {
			want[strings.ToLower(a)] = true
		}
		for _, acts := range g.objects {
			for _, a := range acts {
				want[strings.ToLower(a)] = true
			}
		}
		if g.list {
			want["s3:listbucket"] = true
		}
		if g.express != expressNone {
			want["s3express:createsession"] = true
		}
		if len(g.sendTo) > 0 {
			want["sqs:sendmessage"] = true
		}
		if slices.Contains(config.QueueJobs, job) {
			for _, a := range consumer {
				want[a] = true
			}
		}
		got := iamcheck.Actions(role)
		var wantList []string
		for a := range want {
			wantList = append(wantList, a)
		}
		slices.Sort(wantList)
		if strings.Join(got, " ") != strings.Join(wantList, " ") {
			t.Errorf("%s role actions\n got %v\nwant %v", job, got, wantList)
		}
	}
	plan := iamcheck.ForRole(stmts, roleID("PlanRole"))
	if iamcheck.Allowed(plan, "dynamodb:PutItem", table) {
		t.Error("plan must only read the metastore")
	}
	settle := iamcheck.ForRole(stmts, roleID("SettleRole"))
	readOnly := false
	for _, s := range settle {
		if slices.Contains(s.Actions, "s3express:createsession") {
			b, _ := json.Marshal(s.Condition)
			readOnly = strings.Contains(string(b), `"s3express:SessionMode":"ReadOnly"`)
		}
	}
	if !readOnly {
		t.Error("settle reads express bundles only: its sessions must be ReadOnly")
	}
}

func TestIAMCheckCatchesWildcards(t *testing.T) {
	// Negative control on a real synthesized stack: the same walk must
	// flag a wildcard grant added to the star role.
	x := synth(t, nil, func(s *Starlog) {
		awsiam.NewPolicy(s.Stack, jsii.String("TooBroad"), &awsiam.PolicyProps{
			Roles: &[]awsiam.IRole{s.StarRole},
			Statements: &[]awsiam.PolicyStatement{
				awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
					Actions:   jsii.Strings("s3:*"),
					Resources: jsii.Strings(*s.Bucket.ArnForObjects(jsii.String("*"))),
				}),
				awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
					Actions:   jsii.Strings("dynamodb:Query"),
					Resources: jsii.Strings("*"),
				}),
			},
		})
	})
	findings := iamcheck.Check(x.statements(t))
	var text []string
	for _, f := range findings {
		if !strings.HasPrefix(f.Policy, "TooBroad") {
			t.Errorf("unexpected finding %s", f)
		}
		text = append(text, f.String())
	}
	all := strings.Join(text, "\n")
	if !strings.Contains(all, `"s3:*"`) || !strings.Contains(all, "every resource") {
		t.Errorf("wildcards not caught: %v", text)
	}
}

func TestAlarmsAndOutputs(t *testing.T) {
	x := defaults(t)
	names := []string{"backlog-age", "stalls", "storage-class-degraded", "settle-lag", "settle-quarantine", "star-exits", "star-unhealthy", "no-healthy-star",
		"plan-errors", "janitor-errors"}
	for _, job := range config.QueueJobs {
		names = append(names, kebab(constructID(job))+"-queue-age", kebab(constructID(job))+"-dead-letters")
	}
	for _, n := range names {
		check(t, "alarm "+n, func() {
			x.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
				"AlarmName", "Starlog-"+n,
				"AlarmActions", assertions.Match_ArrayWith(arr(like("Ref", re("^Alarms")))),
			))
		})
	}
	check(t, "backlog age alarm on the star metric", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
			"AlarmName", "Starlog-backlog-age",
			"Namespace", MetricsNamespace,
			"MetricName", userdata.MetricBacklogAge,
			"Dimensions", assertions.Match_ArrayEquals(arr(like("Name", userdata.DimensionCluster, "Value", "Starlog"))),
			"Threshold", 600,
		))
	})
	// Issue 26 defect 9: a storage class whose buckets refuse every
	// request alarms, on the gauge the star exports and the agent forwards
	// (TestDegradedClassMetricIsTheStars ties the name to the star's code).
	check(t, "degraded storage class alarm on the star metric", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
			"AlarmName", "Starlog-storage-class-degraded",
			"Namespace", MetricsNamespace,
			"MetricName", userdata.MetricClassDegraded,
			"Dimensions", assertions.Match_ArrayEquals(arr(like("Name", userdata.DimensionCluster, "Value", "Starlog"))),
			"Statistic", "Maximum", "Period", 60, "Threshold", 0, "ComparisonOperator", "GreaterThanThreshold",
			"EvaluationPeriods", 1, "TreatMissingData", "notBreaching",
		))
		if !slices.Contains(userdata.ForwardedMetrics, userdata.MetricClassDegraded) {
			t.Errorf("the agent does not forward %s", userdata.MetricClassDegraded)
		}
	})
	// Issue 12 item 6: a crash loop is visible.
	check(t, "star exits counted from the star log", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::Logs::MetricFilter"), like(
			"LogGroupName", like("Ref", re("^StarLogs")),
			"FilterPattern", userdata.ExitFilterPattern,
			"MetricTransformations", assertions.Match_ArrayEquals(arr(like(
				"MetricNamespace", MetricsNamespace, "MetricName", MetricStarExits, "MetricValue", "1",
				"Dimensions", assertions.Match_ArrayEquals(arr(like("Key", userdata.DimensionCluster, "Value", "$cluster"))),
			))),
		))
		x.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
			"AlarmName", "Starlog-star-exits",
			"MetricName", MetricStarExits, "Namespace", MetricsNamespace,
			"Dimensions", assertions.Match_ArrayEquals(arr(like("Name", userdata.DimensionCluster, "Value", "Starlog"))),
			"Statistic", "Sum", "Period", 600, "Threshold", 3, "ComparisonOperator", "GreaterThanOrEqualToThreshold",
		))
	})
	// Issue 15 item 5: a quarantined stream alarms (the plan publishes
	// the gauge by EMF).
	check(t, "quarantine alarm on the plan's gauge", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
			"AlarmName", "Starlog-settle-quarantine",
			"MetricName", MetricQuarantined, "Namespace", MetricsNamespace,
			"Dimensions", assertions.Match_ArrayEquals(arr(like("Name", userdata.DimensionCluster, "Value", "Starlog"))),
			"Statistic", "Maximum", "Threshold", 0, "ComparisonOperator", "GreaterThanThreshold",
		))
	})
	check(t, "dead-letter alarm watches the DLQ", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::CloudWatch::Alarm"), like(
			"AlarmName", "Starlog-settle-dead-letters",
			"MetricName", "ApproximateNumberOfMessagesVisible",
			"Dimensions", assertions.Match_ArrayWith(arr(like("Value", like("Fn::GetAtt", arr(re("^SettleDLQ"), "QueueName"))))),
		))
	})
	for _, o := range []string{"LoadBalancerDnsName", "TableName", "BucketName", "ExpressBucketNames", "StarAutoScalingGroupName", "AlarmTopicArn"} {
		check(t, "output "+o, func() { x.tmpl.HasOutput(jsii.String(o), like("Value", assertions.Match_AnyValue())) })
	}
	check(t, "NLB DNS output", func() {
		x.tmpl.HasOutput(jsii.String("LoadBalancerDnsName"), like("Value", like("Fn::GetAtt", arr(re("^LoadBalancer"), "DNSName"))))
	})
}

// TestVariant synthesizes a stack with most knobs turned: another account,
// region and zones (no lookup may happen), TLS, internet-facing, no
// deletion protection, data not retained, a bigger settle.
func TestVariant(t *testing.T) {
	cert := "arn:aws:acm:eu-north-1:210987654321:certificate/0f1e2d3c-aaaa-bbbb-cccc-123456789abc"
	x := synth(t, map[string]any{
		"starlog:account":                 "210987654321",
		"starlog:region":                  "eu-north-1",
		"starlog:availabilityZones":       "eu-north-1a,eu-north-1b,eu-north-1c",
		"starlog:availabilityZoneIds":     []any{"eun1-az1", "eun1-az2", "eun1-az3"},
		"starlog:amiId":                   "ami-0fedcba9876543210",
		"starlog:clientCidrs":             "203.0.113.0/24",
		"starlog:starPort":                9000,
		"starlog:internalPort":            9001,
		"starlog:stackName":               "StarlogEu",
		"starlog:certificateArn":          cert,
		"starlog:internetFacing":          "true",
		"starlog:tableDeletionProtection": false,
		"starlog:retainData":              false,
		"starlog:enableSsm":               false,
		"starlog:starCount":               5,
		"starlog:instanceType":            "c7g.xlarge",
		"starlog:alarmEmail":              "ops@example.com",
		"starlog:functions":               `{"settle":{"memoryMiB":4096,"ephemeralMiB":8192}}`,
	}, nil)
	check(t, "TLS listener with h2", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), like(
			"Port", 443, "Protocol", "TLS",
			"Certificates", assertions.Match_ArrayEquals(arr(like("CertificateArn", cert))),
			"AlpnPolicy", assertions.Match_ArrayEquals(arr("HTTP2Preferred")),
			"SslPolicy", re("^ELBSecurityPolicy-TLS13-"),
		))
	})
	// Issue 12 item 8: with a certificate the plaintext listener is gone
	// (the API's and Kafka's are both TLS).
	check(t, "no plaintext listener", func() {
		x.tmpl.ResourceCountIs(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), jsii.Number(2))
		x.tmpl.ResourcePropertiesCountIs(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), like("Protocol", "TCP"), jsii.Number(0))
	})
	check(t, "Kafka over TLS, ending at the NLB", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::Listener"), like(
			"Port", 9092, "Protocol", "TLS",
			"Certificates", assertions.Match_ArrayEquals(arr(like("CertificateArn", cert))),
			"AlpnPolicy", assertions.Match_Absent(),
		))
	})
	checkExposure(t, x, 9000, 9001, 9092)
	check(t, "internet-facing", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::ElasticLoadBalancingV2::LoadBalancer"), like("Scheme", "internet-facing"))
	})
	check(t, "only the named clients reach the TLS listener", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::EC2::SecurityGroup"), like(
			"GroupDescription", re("^starlog NLB"),
			"SecurityGroupIngress", assertions.Match_ArrayEquals(arr(
				like("CidrIp", "203.0.113.0/24", "FromPort", 443, "ToPort", 443),
				like("CidrIp", "203.0.113.0/24", "FromPort", 9092, "ToPort", 9092),
			)),
		))
	})
	check(t, "deletion protection off", func() {
		x.tmpl.ResourceCountIs(jsii.String("Custom::AWS"), jsii.Number(0))
		x.tmpl.HasResourceProperties(jsii.String("AWS::DynamoDB::Table"), like(
			"DeletionProtectionEnabled", assertions.Match_Absent(),
			"PointInTimeRecoverySpecification", like("PointInTimeRecoveryEnabled", true),
		))
	})
	check(t, "data not retained", func() {
		x.tmpl.HasResource(jsii.String("AWS::DynamoDB::Table"), like("DeletionPolicy", "Delete"))
		x.tmpl.HasResource(jsii.String("AWS::S3Express::DirectoryBucket"), like("DeletionPolicy", "Delete"))
	})
	for _, id := range []string{"eun1-az1", "eun1-az2", "eun1-az3"} {
		check(t, "directory bucket "+id, func() {
			x.tmpl.HasResourceProperties(jsii.String("AWS::S3Express::DirectoryBucket"), like(
				"BucketName", "starlogeu-210987654321--"+id+"--x-s3", "LocationName", id))
		})
	}
	check(t, "bigger settle", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::Lambda::Function"), like(
			"FunctionName", "StarlogEu-settle", "MemorySize", 4096, "EphemeralStorage", like("Size", 8192), "Timeout", 900))
	})
	check(t, "star count and type", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::AutoScaling::AutoScalingGroup"), like("MinSize", "5", "MaxSize", "6"))
		x.tmpl.HasResourceProperties(jsii.String("AWS::EC2::LaunchTemplate"), like(
			"LaunchTemplateData", like("InstanceType", "c7g.xlarge")))
	})
	check(t, "alarm e-mail", func() {
		x.tmpl.HasResourceProperties(jsii.String("AWS::SNS::Subscription"), like("Protocol", "email", "Endpoint", "ops@example.com"))
	})
	for _, r := range x.resources("AWS::IAM::Role") {
		if mp := props(r)["ManagedPolicyArns"]; mp != nil && strings.Contains(iamcheck.Render(mp), "AmazonSSMManagedInstanceCore") {
			t.Error("enableSsm=false still attaches the SSM policy")
		}
	}
	var zones []string
	for _, r := range x.resources("AWS::EC2::Subnet") {
		zones = append(zones, props(r)["AvailabilityZone"].(string))
	}
	if !slices.Contains(zones, "eu-north-1c") || slices.Contains(zones, "us-east-1a") {
		t.Errorf("subnet zones %v", zones)
	}
	for _, f := range iamcheck.Check(x.statements(t)) {
		t.Errorf("IAM: %s", f)
	}

	// The assembly must not ask for any context lookup.
	b, err := os.ReadFile(filepath.Join(x.outdir, "manifest.json"))
	if err != nil {
		t.Fatal(err)
	}
	var manifest map[string]any
	if err := json.Unmarshal(b, &manifest); err != nil {
		t.Fatal(err)
	}
	if missing, ok := manifest["missing"]; ok {
		t.Errorf("synth needs context lookups: %v", missing)
	}
}

func TestCDKJSON(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "cdk.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		App     string         `json:"app"`
		Context map[string]any `json:"context"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(doc.App, "go -C infra build") {
		t.Errorf("app %q does not build the infra module", doc.App)
	}
	ctx := doc.Context
	if ctx["@aws-cdk/aws-autoscaling:generateLaunchTemplateInsteadOfLaunchConfig"] != true {
		t.Error("cdk.json lacks the launch-template feature flag (new accounts cannot create launch configurations)")
	}
	var keys []string
	for k := range ctx {
		keys = append(keys, k)
	}
	if err := config.CheckKeys(keys); err != nil {
		t.Error(err)
	}
	cfg, err := config.Parse(func(k string) (any, bool) { v, ok := ctx[config.ContextPrefix+k]; return v, ok })
	if err != nil {
		t.Fatalf("cdk.json's starlog settings do not parse: %v", err)
	}
	azs, _ := ctx[cfg.AvailabilityZonesContextKey()].([]any)
	if len(azs) != 3 {
		t.Errorf("cdk.json does not fix the zones of %s", cfg.AvailabilityZonesContextKey())
	}
	for i, az := range azs {
		if az != cfg.AvailabilityZones[i] {
			t.Errorf("zone %d: context %v, starlog:availabilityZones %v", i, az, cfg.AvailabilityZones[i])
		}
	}
}

func TestBuildRejects(t *testing.T) {
	cases := map[string]struct {
		set  map[string]any
		prep func(root string)
		want string
	}{
		"misspelt key": {set: map[string]any{"starlog:instancetype": "m7g.large"}, want: "unknown context keys"},
		"bad config":   {set: map[string]any{"starlog:starCount": 0}, want: "starCount"},
		"placeholder binary": {
			prep: func(root string) {
				p := filepath.Join(root, "build/lambda/trim/bootstrap")
				if err := os.WriteFile(p, []byte("#!/bin/sh\n# "+assets.PlaceholderMarker+"\nexit 1\n"), 0o755); err != nil {
					panic(err)
				}
			},
			want: "placeholder",
		},
		"missing binary": {
			prep: func(root string) {
				if err := os.Remove(filepath.Join(root, "build/star-linux-arm64/star")); err != nil {
					panic(err)
				}
			},
			want: "star-linux-arm64/star",
		},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			app, root := newApp(t, "", tc.set)
			if tc.prep != nil {
				tc.prep(root)
			}
			_, err := Build(app, BuildOptions{Root: root})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Build error %v, want one mentioning %q", err, tc.want)
			}
		})
	}
}

func TestPlaceholdersAllowedWhenAsked(t *testing.T) {
	app, root := newApp(t, "", map[string]any{"starlog:allowPlaceholderBinaries": true})
	p := filepath.Join(root, "build/star-linux-arm64/star")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n# "+assets.PlaceholderMarker+"\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	var warned []string
	if _, err := Build(app, BuildOptions{Root: root, Warn: func(s string) { warned = append(warned, s) }}); err != nil {
		t.Fatal(err)
	}
	if len(warned) != 1 || !strings.Contains(warned[0], p) {
		t.Errorf("warnings %v", warned)
	}
}

func TestDrainArgsTargetTheInternalPort(t *testing.T) {
	got := drainArgs([]string{"drain", "--wait"}, 8081, "arn:k")
	if strings.Join(got, " ") != "drain --wait --endpoint http://127.0.0.1:8081 --internal-key-secret arn:k" {
		t.Fatalf("drain args %q", got)
	}
	given := []string{"drain", "--endpoint=http://10.0.0.1:9", "--internal-key-file=/k"}
	if got := drainArgs(given, 8080, "arn:k"); strings.Join(got, " ") != strings.Join(given, " ") {
		t.Fatalf("an explicit endpoint or key was changed: %q", got)
	}
}

// The stars' credentials: two generated secrets, retained like the data
// (replacing the internal key would void every issued token), readable by
// the star role and no other, passed to the star by ARN.
func TestSecrets(t *testing.T) {
	x := defaults(t)
	secrets := x.resources("AWS::SecretsManager::Secret")
	if len(secrets) != 2 {
		t.Fatalf("%d secrets, want 2 (admin token, internal key)", len(secrets))
	}
	ids := map[string]int{}
	for id, r := range secrets {
		props, _ := r["Properties"].(map[string]any)
		gen, _ := props["GenerateSecretString"].(map[string]any)
		n, _ := gen["PasswordLength"].(float64)
		switch {
		case strings.HasPrefix(id, "AdminToken"):
			ids["admin"]++
			if int(n) != AdminTokenLength {
				t.Errorf("%s: length %v, want %d", id, n, AdminTokenLength)
			}
		case strings.HasPrefix(id, "InternalKey"):
			ids["internal"]++
			if int(n) != InternalKeyLength {
				t.Errorf("%s: length %v, want %d", id, n, InternalKeyLength)
			}
		}
		if gen["ExcludePunctuation"] != true {
			t.Errorf("%s: punctuation would need quoting in a header", id)
		}
		if r["DeletionPolicy"] != "RetainExceptOnCreate" || r["UpdateReplacePolicy"] != "Retain" {
			t.Errorf("%s: DeletionPolicy %v UpdateReplacePolicy %v, want retained", id, r["DeletionPolicy"], r["UpdateReplacePolicy"])
		}
	}
	if ids["admin"] != 1 || ids["internal"] != 1 {
		t.Fatalf("secrets %v", ids)
	}
	secretRef := regexp.MustCompile(`^\$\{(AdminToken|InternalKey)[0-9A-F]+\}$`)
	for _, st := range x.statements(t) {
		for _, a := range st.Actions {
			if !strings.HasPrefix(a, "secretsmanager:") {
				continue
			}
			if a != "secretsmanager:getsecretvalue" || len(st.Resources) != 2 || len(st.Roles) != 1 || !strings.HasPrefix(st.Roles[0], "StarRole") {
				t.Errorf("secrets grant %+v: want GetSecretValue on the two secrets for the star role only", st)
			}
			for _, r := range st.Resources {
				if !secretRef.MatchString(r) {
					t.Errorf("secrets grant on %s", r)
				}
			}
		}
	}
	check(t, "admin token output", func() {
		x.tmpl.HasOutput(jsii.String("AdminTokenSecretArn"), like("Value", like("Ref", re("^AdminToken"))))
	})
}
