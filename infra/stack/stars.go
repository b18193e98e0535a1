package stack

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-cdk-go/awscdk/v2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsautoscaling"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsec2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awselasticloadbalancingv2"
	"github.com/aws/aws-cdk-go/awscdk/v2/awsiam"
	"github.com/aws/aws-cdk-go/awscdk/v2/awslogs"
	"github.com/aws/aws-cdk-go/awscdk/v2/awss3assets"
	"github.com/aws/jsii-runtime-go"

	"github.com/starlog/starlog/infra/config"
	"github.com/starlog/starlog/infra/userdata"
)

// LifecycleHookName is the termination hook the drain script completes.
const LifecycleHookName = "starlog-drain"

// HealthPath is the star's health endpoint (on the public port, with the
// API).
const HealthPath = "/health"

// AutoScalingGroupName is the fixed name of the star group: the drain
// script and its policy need it, and the launch template cannot refer to
// the group it belongs to.
func AutoScalingGroupName(stackName string) string { return stackName + "-stars" }

// LogGroupNames are the CloudWatch log groups of the stars.
func starLogGroupName(stackName string) string    { return "/starlog/" + stackName + "/star" }
func metricsLogGroupName(stackName string) string { return "/starlog/" + stackName + "/prometheus" }

// stars builds the star fleet: role, launch template (arm64 AL2023, IMDSv2
// only, user data from package userdata), the autoscaling group with its
// drain lifecycle hook, and the Network Load Balancer in front.
func (s *Starlog) stars() error {
	c := s.Config
	st := s.Stack
	asgName := AutoScalingGroupName(c.StackName)

	binary := awss3assets.NewAsset(st, jsii.String("StarBinary"), &awss3assets.AssetProps{
		Path:        jsii.String(c.StarBinary),
		DisplayName: jsii.String("star binary (linux/arm64)"),
	})

	s.starLogs = awslogs.NewLogGroup(st, jsii.String("StarLogs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String(starLogGroupName(c.StackName)),
		Retention:     retention(c.LogRetentionDays),
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})
	metricLogs := awslogs.NewLogGroup(st, jsii.String("StarMetricLogs"), &awslogs.LogGroupProps{
		LogGroupName:  jsii.String(metricsLogGroupName(c.StackName)),
		Retention:     awslogs.RetentionDays_ONE_WEEK,
		RemovalPolicy: awscdk.RemovalPolicy_DESTROY,
	})

	s.StarRole = awsiam.NewRole(st, jsii.String("StarRole"), &awsiam.RoleProps{
		AssumedBy:   awsiam.NewServicePrincipal(jsii.String("ec2.amazonaws.com"), nil),
		Description: jsii.String("starlog star VM: chain slots, settled reads, metastore, drain hook"),
	})
	if c.EnableSSM {
		// Operator shell access without SSH keys or open ports.
		s.StarRole.AddManagedPolicy(awsiam.ManagedPolicy_FromAwsManagedPolicyName(jsii.String("AmazonSSMManagedInstanceCore")))
	}
	policy := awsiam.NewPolicy(st, jsii.String("StarPolicy"), &awsiam.PolicyProps{
		Roles: &[]awsiam.IRole{s.StarRole},
	})
	for _, stmt := range s.statements(starGrant) {
		policy.AddStatements(stmt)
	}
	policy.AddStatements(
		s.secretReadStatement(),
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("StarBinary"),
			Actions:   strs("s3:GetObject"),
			Resources: strs(*binary.Bucket().ArnForObjects(binary.S3ObjectKey())),
		}),
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:     jsii.String("DrainHook"),
			Actions: strs("autoscaling:CompleteLifecycleAction", "autoscaling:RecordLifecycleActionHeartbeat"),
			Resources: strs(*awscdk.Fn_Join(jsii.String(""), &[]*string{
				jsii.String("arn:"), awscdk.Aws_PARTITION(), jsii.String(":autoscaling:"), awscdk.Aws_REGION(), jsii.String(":"),
				awscdk.Aws_ACCOUNT_ID(), jsii.String(":autoScalingGroup:*:autoScalingGroupName/" + asgName),
			})),
		}),
		awsiam.NewPolicyStatement(&awsiam.PolicyStatementProps{
			Sid:       jsii.String("Logs"),
			Actions:   strs("logs:CreateLogStream", "logs:PutLogEvents", "logs:DescribeLogStreams"),
			Resources: strs(*s.starLogs.LogGroupArn(), *metricLogs.LogGroupArn()),
		}),
	)

	lbSG := awsec2.NewSecurityGroup(st, jsii.String("LoadBalancerSG"), &awsec2.SecurityGroupProps{
		Vpc:              s.Vpc,
		Description:      jsii.String("starlog NLB: clients in, stars out"),
		AllowAllOutbound: jsii.Bool(false),
	})
	starSG := awsec2.NewSecurityGroup(st, jsii.String("StarSG"), &awsec2.SecurityGroupProps{
		Vpc:         s.Vpc,
		Description: jsii.String("starlog stars: API from the NLB, internal port between stars"),
		// Stars call S3, DynamoDB, Auto Scaling and CloudFormation.
		AllowAllOutbound: jsii.Bool(true),
	})
	// The NLB reaches the public port only (S2's API and /health); the
	// internal port (forwarding, settle nudges, drain, handoff, /metrics)
	// is open to the other stars and nothing else.
	port := awsec2.Port_Tcp(jsii.Number(float64(c.StarPort)))
	internal := awsec2.Port_Tcp(jsii.Number(float64(c.InternalPort)))
	starSG.AddIngressRule(lbSG, port, jsii.String("API and health checks from the NLB"), nil)
	starSG.AddIngressRule(starSG, internal, jsii.String("stars: forwarding to stream leaders, settle nudges"), nil)
	lbSG.AddEgressRule(starSG, port, jsii.String("to stars"), nil)
	for _, cidr := range c.ClientCIDRs {
		lbSG.AddIngressRule(awsec2.Peer_Ipv4(jsii.String(cidr)), awsec2.Port_Tcp(jsii.Number(float64(clientPort(c)))), jsii.String("clients"), nil)
	}
	// Kafka: the same path on its own port, NLB to every star (any star
	// serves any partition, forwarding to its leader over the internal
	// port; docs/kafka.md, "Many stars").
	if c.KafkaPort > 0 {
		kafka := awsec2.Port_Tcp(jsii.Number(float64(c.KafkaPort)))
		starSG.AddIngressRule(lbSG, kafka, jsii.String("Kafka from the NLB"), nil)
		lbSG.AddEgressRule(starSG, kafka, jsii.String("Kafka to stars"), nil)
		for _, cidr := range c.ClientCIDRs {
			lbSG.AddIngressRule(awsec2.Peer_Ipv4(jsii.String(cidr)), kafka, jsii.String("Kafka clients"), nil)
		}
	}
	// The load balancer before the stars' user data: they advertise its
	// name to Kafka clients.
	s.newLoadBalancer(lbSG)

	template := awsec2.NewLaunchTemplate(st, jsii.String("StarTemplate"), &awsec2.LaunchTemplateProps{
		InstanceType: awsec2.NewInstanceType(jsii.String(c.InstanceType)),
		// Pinned (amiId): a newly published image changes nothing until
		// the configuration does, so a redeploy rolls no star for it.
		MachineImage:            awsec2.MachineImage_GenericLinux(&map[string]*string{c.Region: jsii.String(c.AmiID)}, nil),
		Role:                    s.StarRole,
		SecurityGroup:           starSG,
		HttpEndpoint:            jsii.Bool(true),
		HttpTokens:              awsec2.LaunchTemplateHttpTokens_REQUIRED,
		HttpPutResponseHopLimit: jsii.Number(1),
		InstanceMetadataTags:    jsii.Bool(false),
		EbsOptimized:            jsii.Bool(true),
		// Filled once the group exists: the script names the group's logical
		// ID for cfn-signal.
		UserData: awsec2.UserData_ForLinux(&awsec2.LinuxUserDataOptions{Shebang: jsii.String("#!/bin/bash")}),
		BlockDevices: &[]*awsec2.BlockDevice{{
			DeviceName: jsii.String("/dev/xvda"),
			Volume: awsec2.BlockDeviceVolume_Ebs(jsii.Number(20), &awsec2.EbsDeviceOptions{
				VolumeType:          awsec2.EbsDeviceVolumeType_GP3,
				Encrypted:           jsii.Bool(true),
				DeleteOnTermination: jsii.Bool(true),
			}),
		}},
	})

	s.Stars = awsautoscaling.NewAutoScalingGroup(st, jsii.String("Stars"), &awsautoscaling.AutoScalingGroupProps{
		Vpc:                  s.Vpc,
		VpcSubnets:           &awsec2.SubnetSelection{SubnetType: awsec2.SubnetType_PRIVATE_WITH_EGRESS},
		LaunchTemplate:       template,
		AutoScalingGroupName: jsii.String(asgName),
		MinCapacity:          jsii.Number(float64(c.StarCount)),
		MaxCapacity:          jsii.Number(float64(c.StarMaxCount)),
		// No desired capacity: it starts at the minimum, and a deploy never
		// resets a size an operator changed. The group's signals policy
		// (cfn-signal from user data) also grants cloudformation:SignalResource.
		HealthChecks: awsautoscaling.HealthChecks_WithAdditionalChecks(&awsautoscaling.AdditionalHealthChecksOptions{
			AdditionalTypes: &[]awsautoscaling.AdditionalHealthCheckType{awsautoscaling.AdditionalHealthCheckType_ELB},
			GracePeriod:     awscdk.Duration_Seconds(jsii.Number(float64(c.HealthGraceSeconds))),
		}),
		// A deploy waits until each new star answers /health (cfn-signal in
		// user data), one at a time, keeping every old star in service
		// until its replacement is healthy.
		Signals: awsautoscaling.Signals_WaitForMinCapacity(&awsautoscaling.SignalsOptions{
			Timeout: awscdk.Duration_Seconds(jsii.Number(float64(c.HealthGraceSeconds + 600))),
		}),
		UpdatePolicy: awsautoscaling.UpdatePolicy_RollingUpdate(&awsautoscaling.RollingUpdateOptions{
			MaxBatchSize:          jsii.Number(1),
			MinInstancesInService: jsii.Number(float64(c.StarCount)),
			WaitOnResourceSignals: jsii.Bool(true),
			PauseTime:             awscdk.Duration_Seconds(jsii.Number(float64(c.HealthGraceSeconds + 600))),
		}),
		GroupMetrics: &[]awsautoscaling.GroupMetrics{awsautoscaling.GroupMetrics_All()},
	})
	s.Stars.AddLifecycleHook(jsii.String("Drain"), &awsautoscaling.BasicLifecycleHookProps{
		LifecycleHookName:   jsii.String(LifecycleHookName),
		LifecycleTransition: awsautoscaling.LifecycleTransition_INSTANCE_TERMINATING,
		HeartbeatTimeout:    awscdk.Duration_Seconds(jsii.Number(float64(c.LifecycleHeartbeatSeconds))),
		// If the drain script dies, the instance still goes when the
		// heartbeat runs out; the janitor settles what it left.
		DefaultResult: awsautoscaling.DefaultResult_CONTINUE,
	})

	asgLogicalID := s.Stack.GetLogicalId(s.Stars.Node().DefaultChild().(awscdk.CfnElement))
	script, err := userdata.Render(userdata.Params{
		Region:               *awscdk.Aws_REGION(),
		StackName:            *awscdk.Aws_STACK_NAME(),
		SignalResource:       *asgLogicalID,
		StarBinaryURL:        "s3://" + *binary.S3BucketName() + "/" + *binary.S3ObjectKey(),
		Port:                 c.StarPort,
		InternalPort:         c.InternalPort,
		KafkaPort:            c.KafkaPort,
		KafkaAdvertise:       *s.LoadBalancer.LoadBalancerDnsName(),
		TableName:            *s.Table.TableName(),
		StandardBucket:       *s.Bucket.BucketName(),
		AdminTokenSecret:     *s.AdminToken.SecretArn(),
		InternalKeySecret:    *s.InternalKey.SecretArn(),
		ExpressBuckets:       s.expressBucketRefs(),
		PolicyFlags:          c.Policy.Flags(),
		ExtraFlags:           userdata.SortedFlags(c.StarFlags),
		DrainArgs:            drainArgs(c.DrainArgs, c.InternalPort, *s.InternalKey.SecretArn()),
		DrainMaxSeconds:      c.DrainMaxMinutes * 60,
		HeartbeatEverySecond: max(c.LifecycleHeartbeatSeconds/3, 30),
		LifecycleHookName:    LifecycleHookName,
		AutoScalingGroupName: asgName,
		StopTimeoutSeconds:   c.DrainMaxMinutes * 60,
		HealthWaitSeconds:    c.HealthGraceSeconds,
		Cluster:              c.StackName,
		MetricsNamespace:     MetricsNamespace,
		StarLogGroup:         starLogGroupName(c.StackName),
		MetricsLogGroup:      metricsLogGroupName(c.StackName),
	})
	if err != nil {
		return fmt.Errorf("star user data: %w", err)
	}
	template.UserData().AddCommands(jsii.String(strings.TrimPrefix(script, "#!/bin/bash\n")))

	s.loadBalancer()
	return nil
}

// newLoadBalancer builds the NLB itself (its listeners come with the
// stars, in loadBalancer).
func (s *Starlog) newLoadBalancer(sg awsec2.SecurityGroup) {
	c := s.Config
	subnets := awsec2.SubnetType_PRIVATE_WITH_EGRESS
	if c.InternetFacing {
		subnets = awsec2.SubnetType_PUBLIC
	}
	s.LoadBalancer = awselasticloadbalancingv2.NewNetworkLoadBalancer(s.Stack, jsii.String("LoadBalancer"), &awselasticloadbalancingv2.NetworkLoadBalancerProps{
		Vpc:              s.Vpc,
		InternetFacing:   jsii.Bool(c.InternetFacing),
		VpcSubnets:       &awsec2.SubnetSelection{SubnetType: subnets},
		CrossZoneEnabled: jsii.Bool(true),
		SecurityGroups:   &[]awsec2.ISecurityGroup{sg},
	})
}

// loadBalancer gives the NLB its API listener: TLS (ALPN h2 preferred,
// so S2S sessions get HTTP/2) when a certificate is given, else plaintext
// TCP; it forwards to the stars' public port (S2's API) with HTTP health
// checks on /health. With a Kafka port, a second listener (TLS likewise,
// no ALPN) forwards to the stars' Kafka port, health-checked on the API's
// /health. The stars' internal port is not a target.
func (s *Starlog) loadBalancer() {
	c := s.Config
	s.TargetGroup = awselasticloadbalancingv2.NewNetworkTargetGroup(s.Stack, jsii.String("StarTargets"), &awselasticloadbalancingv2.NetworkTargetGroupProps{
		Vpc:        s.Vpc,
		Port:       jsii.Number(float64(c.StarPort)),
		Protocol:   awselasticloadbalancingv2.Protocol_TCP,
		TargetType: awselasticloadbalancingv2.TargetType_INSTANCE,
		Targets:    &[]awselasticloadbalancingv2.INetworkLoadBalancerTarget{s.Stars},
		HealthCheck: &awselasticloadbalancingv2.HealthCheck{
			Protocol:                awselasticloadbalancingv2.Protocol_HTTP,
			Path:                    jsii.String(HealthPath),
			Interval:                awscdk.Duration_Seconds(jsii.Number(10)),
			HealthyThresholdCount:   jsii.Number(2),
			UnhealthyThresholdCount: jsii.Number(2),
		},
		// Long-lived read and append sessions survive deregistration; the
		// draining star tells them to reconnect.
		DeregistrationDelay:   awscdk.Duration_Seconds(jsii.Number(60)),
		ConnectionTermination: jsii.Bool(false),
		PreserveClientIp:      jsii.Bool(true),
	})
	if c.CertificateARN == "" {
		s.LoadBalancer.AddListener(jsii.String("Tcp"), &awselasticloadbalancingv2.BaseNetworkListenerProps{
			Port:                jsii.Number(float64(c.ListenerPort)),
			Protocol:            awselasticloadbalancingv2.Protocol_TCP,
			DefaultTargetGroups: &[]awselasticloadbalancingv2.INetworkTargetGroup{s.TargetGroup},
		})
	} else {
		s.LoadBalancer.AddListener(jsii.String("Tls"), &awselasticloadbalancingv2.BaseNetworkListenerProps{
			Port:     jsii.Number(float64(c.TLSPort)),
			Protocol: awselasticloadbalancingv2.Protocol_TLS,
			Certificates: &[]awselasticloadbalancingv2.IListenerCertificate{
				awselasticloadbalancingv2.ListenerCertificate_FromArn(jsii.String(c.CertificateARN)),
			},
			SslPolicy:           awselasticloadbalancingv2.SslPolicy_RECOMMENDED_TLS,
			AlpnPolicy:          awselasticloadbalancingv2.AlpnPolicy_HTTP2_PREFERRED,
			DefaultTargetGroups: &[]awselasticloadbalancingv2.INetworkTargetGroup{s.TargetGroup},
		})
	}
	if c.KafkaPort > 0 {
		s.kafkaListener()
	}
}

// kafkaListener forwards the NLB's Kafka port to every star's: a client
// reaches any star, which serves any partition (docs/kafka.md, "Many
// stars"). Kafka connections are long-lived: deregistration leaves them
// to the draining star, as the API's sessions.
func (s *Starlog) kafkaListener() {
	c := s.Config
	s.KafkaTargetGroup = awselasticloadbalancingv2.NewNetworkTargetGroup(s.Stack, jsii.String("StarKafkaTargets"), &awselasticloadbalancingv2.NetworkTargetGroupProps{
		Vpc:        s.Vpc,
		Port:       jsii.Number(float64(c.KafkaPort)),
		Protocol:   awselasticloadbalancingv2.Protocol_TCP,
		TargetType: awselasticloadbalancingv2.TargetType_INSTANCE,
		Targets:    &[]awselasticloadbalancingv2.INetworkLoadBalancerTarget{s.Stars},
		HealthCheck: &awselasticloadbalancingv2.HealthCheck{
			Protocol:                awselasticloadbalancingv2.Protocol_HTTP,
			Port:                    jsii.String(strconv.Itoa(c.StarPort)),
			Path:                    jsii.String(HealthPath),
			Interval:                awscdk.Duration_Seconds(jsii.Number(10)),
			HealthyThresholdCount:   jsii.Number(2),
			UnhealthyThresholdCount: jsii.Number(2),
		},
		DeregistrationDelay:   awscdk.Duration_Seconds(jsii.Number(60)),
		ConnectionTermination: jsii.Bool(false),
		PreserveClientIp:      jsii.Bool(true),
	})
	props := &awselasticloadbalancingv2.BaseNetworkListenerProps{
		Port:                jsii.Number(float64(c.KafkaPort)),
		Protocol:            awselasticloadbalancingv2.Protocol_TCP,
		DefaultTargetGroups: &[]awselasticloadbalancingv2.INetworkTargetGroup{s.KafkaTargetGroup},
	}
	if c.CertificateARN != "" {
		// TLS ends at the NLB, as for the API: clients use SASL_SSL.
		props.Protocol = awselasticloadbalancingv2.Protocol_TLS
		props.Certificates = &[]awselasticloadbalancingv2.IListenerCertificate{
			awselasticloadbalancingv2.ListenerCertificate_FromArn(jsii.String(c.CertificateARN)),
		}
		props.SslPolicy = awselasticloadbalancingv2.SslPolicy_RECOMMENDED_TLS
	}
	s.LoadBalancer.AddListener(jsii.String("Kafka"), props)
}

// retentionByDays maps the day counts CloudWatch Logs accepts (the ones
// config validates against) to the CDK enum.
var retentionByDays = map[int]awslogs.RetentionDays{
	1: awslogs.RetentionDays_ONE_DAY, 3: awslogs.RetentionDays_THREE_DAYS, 5: awslogs.RetentionDays_FIVE_DAYS,
	7: awslogs.RetentionDays_ONE_WEEK, 14: awslogs.RetentionDays_TWO_WEEKS, 30: awslogs.RetentionDays_ONE_MONTH,
	60: awslogs.RetentionDays_TWO_MONTHS, 90: awslogs.RetentionDays_THREE_MONTHS, 120: awslogs.RetentionDays_FOUR_MONTHS,
	150: awslogs.RetentionDays_FIVE_MONTHS, 180: awslogs.RetentionDays_SIX_MONTHS, 365: awslogs.RetentionDays_ONE_YEAR,
	400: awslogs.RetentionDays_THIRTEEN_MONTHS, 545: awslogs.RetentionDays_EIGHTEEN_MONTHS, 731: awslogs.RetentionDays_TWO_YEARS,
	1096: awslogs.RetentionDays_THREE_YEARS, 1827: awslogs.RetentionDays_FIVE_YEARS, 2192: awslogs.RetentionDays_SIX_YEARS,
	2557: awslogs.RetentionDays_SEVEN_YEARS, 2922: awslogs.RetentionDays_EIGHT_YEARS, 3288: awslogs.RetentionDays_NINE_YEARS,
	3653: awslogs.RetentionDays_TEN_YEARS,
}

// retention maps days to the enum; New has checked the value is mapped.
func retention(days int) awslogs.RetentionDays { return retentionByDays[days] }

// clientPort is the one listener's port: TLS with a certificate (the
// plaintext listener is gone then), TCP without.
func clientPort(c config.Config) int {
	if c.CertificateARN != "" {
		return c.TLSPort
	}
	return c.ListenerPort
}

// drainArgs points the drain command at the local star's internal port
// (where drain is served) unless the configuration names an endpoint (the
// CLI's default is star dev's), and gives it the internal key's secret
// unless it names a key source: drain is an admin call.
func drainArgs(args []string, port int, internalKeySecret string) []string {
	out := append([]string(nil), args...)
	given := func(flags ...string) bool {
		for _, a := range args {
			for _, f := range flags {
				if a == f || strings.HasPrefix(a, f+"=") {
					return true
				}
			}
		}
		return false
	}
	if !given("--endpoint") {
		out = append(out, "--endpoint", fmt.Sprintf("http://127.0.0.1:%d", port))
	}
	if !given("--internal-key-secret", "--internal-key-file") {
		out = append(out, "--internal-key-secret", internalKeySecret)
	}
	return out
}
