// Package config is the typed configuration of the starlog CDK app: every
// knob the stack reads, its default, how it is parsed from CDK context
// (cdk.json or `cdk -c key=value`), and how it is validated. It is pure: no
// CDK, no I/O, so it is tested without starting jsii.
package config

import (
	"fmt"
	"maps"
	"net/netip"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/starlog/starlog/infra/userdata"
)

// ContextPrefix prefixes every context key the app reads, e.g.
// "starlog:instanceType".
const ContextPrefix = "starlog:"

// Job names of the auditor's Lambda functions. They are also the folder
// names under the Lambda build directory (<dir>/<job>/bootstrap).
const (
	JobPlan        = "plan"
	JobJanitor     = "janitor"
	JobSettle      = "settle"
	JobTrim        = "trim"
	JobChainSettle = "chain-settle"
)

// Jobs lists every auditor job in a fixed order.
var Jobs = []string{JobPlan, JobJanitor, JobSettle, JobTrim, JobChainSettle}

// QueueJobs are the jobs fed by an SQS queue; the others run on a schedule.
var QueueJobs = []string{JobSettle, JobTrim, JobChainSettle}

// ScheduledJobs run from an EventBridge schedule.
var ScheduledJobs = []string{JobPlan, JobJanitor}

// Function sizes one auditor Lambda.
type Function struct {
	MemoryMiB      int `json:"memoryMiB"`
	EphemeralMiB   int `json:"ephemeralMiB"`
	TimeoutSeconds int `json:"timeoutSeconds"`
	// BatchSize is the SQS batch size (queue jobs only).
	BatchSize int `json:"batchSize"`
	// MaxConcurrency caps concurrent invocations from the queue (queue
	// jobs only; 0 means no cap, else 2..1000).
	MaxConcurrency int `json:"maxConcurrency"`
	// MaxReceiveCount is how many deliveries a message gets before it
	// moves to the dead-letter queue (queue jobs only).
	MaxReceiveCount int `json:"maxReceiveCount"`
	// ScheduleMinutes is the EventBridge rate (scheduled jobs only).
	ScheduleMinutes int `json:"scheduleMinutes"`
}

// Config is everything the stack needs. Paths are as given; see
// ResolvePaths.
type Config struct {
	Account   string
	Region    string
	StackName string

	// AvailabilityZones are three AZ names (us-east-1a) and
	// AvailabilityZoneIDs the matching AZ IDs (use1-az4), index for index.
	// The name→ID mapping differs per account: read it with
	// `aws ec2 describe-availability-zones`.
	AvailabilityZones   []string
	AvailabilityZoneIDs []string

	VPCCIDR     string
	NATGateways int

	InstanceType string
	// AmiID is the stars' machine image (arm64 Amazon Linux 2023), pinned:
	// a new public image changes nothing until this does, so a redeploy
	// never rolls every star for an image it was not asked to take.
	AmiID        string
	StarCount    int
	StarMaxCount int
	// StarPort serves S2's API and /health: the load balancer's target.
	StarPort int
	// InternalPort serves peers and operators: forwarding between stars,
	// settle nudges, drain, handoff and /metrics. Only stars reach it.
	InternalPort int
	// KafkaPort is where every star serves the Kafka protocol and where
	// the load balancer's Kafka listener takes clients (TLS with
	// CertificateARN, as the API's); 0 serves no Kafka (docs/kafka.md,
	// "Many stars").
	KafkaPort int
	// Policy is what the stars and the auditor functions must agree on;
	// both are given it from here.
	Policy Policy
	// StarFlags are extra `star serve` flags (name without dashes → value),
	// rendered sorted into the systemd unit after the required ones.
	StarFlags map[string]string
	// DrainArgs are the star CLI arguments that drain the local star and
	// return when its terminate gate opens.
	DrainArgs []string
	// DrainMaxMinutes bounds how long a terminating star may drain before
	// the instance goes anyway.
	DrainMaxMinutes int
	// LifecycleHeartbeatSeconds is the lifecycle hook's heartbeat timeout;
	// the drain script records a heartbeat well inside it.
	LifecycleHeartbeatSeconds int
	HealthGraceSeconds        int
	EnableSSM                 bool

	// ListenerPort is the plaintext TCP listener, used only without a
	// certificate; with CertificateARN the TLS listener on TLSPort is the
	// only one.
	ListenerPort   int
	TLSPort        int
	CertificateARN string
	InternetFacing bool
	// ClientCIDRs may reach the load balancer listener. Internal load
	// balancers default to the VPC; an internet-facing one must name them.
	ClientCIDRs []string

	TableDeletionProtection bool
	// RetainData keeps the table and buckets when the stack is deleted.
	RetainData bool
	// ExpressBucketBase is the base name of the directory buckets:
	// <base>--<azid>--x-s3.
	ExpressBucketBase string

	StarBinary string
	LambdaDir  string
	// AllowPlaceholderBinaries lets the app synthesize with the placeholder
	// files `make synth` writes for binaries that do not exist yet. Never
	// set it for a deploy.
	AllowPlaceholderBinaries bool

	Functions map[string]Function

	LogRetentionDays       int
	AlarmEmail             string
	BacklogAgeAlarmSeconds int
	SettleLagAlarmSeconds  int
	QueueAgeAlarmSeconds   int
}

// Defaults returns the configuration used when context says nothing. The
// account, region and zones have no useful default and must come from
// context.
func Defaults() Config {
	return Config{
		StackName:                 "Starlog",
		VPCCIDR:                   "10.40.0.0/16",
		NATGateways:               1,
		InstanceType:              "m7g.large",
		StarCount:                 3,
		StarPort:                  8080,
		InternalPort:              8081,
		KafkaPort:                 9092,
		Policy:                    DefaultPolicy(),
		StarFlags:                 map[string]string{},
		DrainArgs:                 []string{"drain", "--wait"},
		DrainMaxMinutes:           30,
		LifecycleHeartbeatSeconds: 600,
		HealthGraceSeconds:        300,
		EnableSSM:                 true,
		ListenerPort:              80,
		TLSPort:                   443,
		TableDeletionProtection:   true,
		RetainData:                true,
		StarBinary:                "build/star-linux-arm64/star",
		LambdaDir:                 "build/lambda",
		Functions:                 DefaultFunctions(),
		LogRetentionDays:          30,
		// Above the pass spacing the absorb budget allows in steady state:
		// at 10,000 streams on 50 writes/s, passes are 200 s apart, and a
		// pass runs early at half the backlog (6,144 Standard flights,
		// about 300 s at 20 flights/s). docs/write-path.md "Absorb pace".
		BacklogAgeAlarmSeconds: 600,
		SettleLagAlarmSeconds:  900,
		QueueAgeAlarmSeconds:   1800,
	}
}

// DefaultFunctions sizes each job. Settle warms an era's bundles into /tmp
// (the fetch cache), so it gets the most scratch; chain-settle reads
// footers only.
func DefaultFunctions() map[string]Function {
	return map[string]Function{
		JobPlan:        {MemoryMiB: 256, EphemeralMiB: 512, TimeoutSeconds: 60, ScheduleMinutes: 1},
		JobJanitor:     {MemoryMiB: 512, EphemeralMiB: 512, TimeoutSeconds: 300, ScheduleMinutes: 1},
		JobSettle:      {MemoryMiB: 2048, EphemeralMiB: 10240, TimeoutSeconds: 900, BatchSize: 1, MaxConcurrency: 20, MaxReceiveCount: 5},
		JobTrim:        {MemoryMiB: 256, EphemeralMiB: 512, TimeoutSeconds: 300, BatchSize: 10, MaxConcurrency: 5, MaxReceiveCount: 5},
		JobChainSettle: {MemoryMiB: 1024, EphemeralMiB: 2048, TimeoutSeconds: 900, BatchSize: 1, MaxConcurrency: 10, MaxReceiveCount: 5},
	}
}

// Lookup returns the raw context value for a key without the prefix, and
// whether it was set. Values from cdk.json arrive JSON-typed (string,
// float64, bool, []any, map[string]any); values from `-c` arrive as strings.
type Lookup func(key string) (any, bool)

// Parse reads every known key through lookup over the defaults, then
// validates. Unknown keys are not seen (the lookup is by name), so a typo
// in cdk.json is caught by CheckKeys.
func Parse(lookup Lookup) (Config, error) {
	c := Defaults()
	p := parser{lookup: lookup}
	p.str("account", &c.Account)
	p.str("region", &c.Region)
	p.str("stackName", &c.StackName)
	p.strList("availabilityZones", &c.AvailabilityZones)
	p.strList("availabilityZoneIds", &c.AvailabilityZoneIDs)
	p.str("vpcCidr", &c.VPCCIDR)
	p.integer("natGateways", &c.NATGateways)
	p.str("instanceType", &c.InstanceType)
	p.str("amiId", &c.AmiID)
	p.integer("starCount", &c.StarCount)
	p.integer("starMaxCount", &c.StarMaxCount)
	p.integer("starPort", &c.StarPort)
	p.integer("internalPort", &c.InternalPort)
	p.integer("kafkaPort", &c.KafkaPort)
	p.integer("settleTriggerMiB", &c.Policy.SettleTriggerMiB)
	p.str("settleLinger", &c.Policy.SettleLinger)
	p.str("settleExpressLinger", &c.Policy.SettleExpressLinger)
	p.str("settleAgeCap", &c.Policy.SettleAgeCap)
	p.str("settleExpressAgeCap", &c.Policy.SettleExpressAgeCap)
	p.integer("settleOutputCapMiB", &c.Policy.SettleOutputCapMiB)
	p.str("readGrace", &c.Policy.ReadGrace)
	p.str("deadAfter", &c.Policy.DeadAfter)
	p.strMap("starFlags", &c.StarFlags)
	p.strList("drainArgs", &c.DrainArgs)
	p.integer("drainMaxMinutes", &c.DrainMaxMinutes)
	p.integer("lifecycleHeartbeatSeconds", &c.LifecycleHeartbeatSeconds)
	p.integer("healthGraceSeconds", &c.HealthGraceSeconds)
	p.boolean("enableSsm", &c.EnableSSM)
	p.integer("listenerPort", &c.ListenerPort)
	p.integer("tlsPort", &c.TLSPort)
	p.str("certificateArn", &c.CertificateARN)
	p.boolean("internetFacing", &c.InternetFacing)
	p.strList("clientCidrs", &c.ClientCIDRs)
	p.boolean("tableDeletionProtection", &c.TableDeletionProtection)
	p.boolean("retainData", &c.RetainData)
	p.str("expressBucketBase", &c.ExpressBucketBase)
	p.str("starBinary", &c.StarBinary)
	p.str("lambdaDir", &c.LambdaDir)
	p.boolean("allowPlaceholderBinaries", &c.AllowPlaceholderBinaries)
	p.functions("functions", c.Functions)
	p.integer("logRetentionDays", &c.LogRetentionDays)
	p.str("alarmEmail", &c.AlarmEmail)
	p.integer("backlogAgeAlarmSeconds", &c.BacklogAgeAlarmSeconds)
	p.integer("settleLagAlarmSeconds", &c.SettleLagAlarmSeconds)
	p.integer("queueAgeAlarmSeconds", &c.QueueAgeAlarmSeconds)
	if p.err != nil {
		return Config{}, p.err
	}
	c.fillDerived()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Keys lists every context key Parse reads, without the prefix.
var Keys = []string{
	"account", "region", "stackName", "availabilityZones", "availabilityZoneIds",
	"vpcCidr", "natGateways", "instanceType", "amiId", "starCount", "starMaxCount",
	"starPort", "internalPort", "settleTriggerMiB", "settleLinger", "settleExpressLinger",
	"settleAgeCap", "settleExpressAgeCap", "settleOutputCapMiB", "readGrace", "deadAfter",
	"starFlags", "drainArgs", "drainMaxMinutes",
	"lifecycleHeartbeatSeconds", "healthGraceSeconds", "enableSsm",
	"listenerPort", "tlsPort", "certificateArn", "internetFacing",
	"clientCidrs", "tableDeletionProtection", "retainData",
	"expressBucketBase", "starBinary", "lambdaDir", "allowPlaceholderBinaries",
	"functions", "logRetentionDays", "alarmEmail", "backlogAgeAlarmSeconds",
	"settleLagAlarmSeconds", "queueAgeAlarmSeconds",
}

// CheckKeys reports context keys that carry the prefix but that Parse does
// not read: a misspelt key would otherwise be ignored silently.
func CheckKeys(contextKeys []string) error {
	var unknown []string
	for _, k := range contextKeys {
		name, ok := strings.CutPrefix(k, ContextPrefix)
		if ok && !slices.Contains(Keys, name) {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		slices.Sort(unknown)
		return fmt.Errorf("unknown context keys %s (known: %s)", strings.Join(unknown, ", "), strings.Join(Keys, ", "))
	}
	return nil
}

func (c *Config) fillDerived() {
	if c.StarMaxCount == 0 {
		// One spare so a rolling update brings a new star up before an old
		// one drains.
		c.StarMaxCount = c.StarCount + 1
	}
	if len(c.ClientCIDRs) == 0 && !c.InternetFacing {
		// An internal load balancer serves the VPC; an internet-facing one
		// has no default (Validate asks for clientCidrs).
		c.ClientCIDRs = []string{c.VPCCIDR}
	}
	if c.ExpressBucketBase == "" && c.Account != "" {
		c.ExpressBucketBase = strings.ToLower(c.StackName) + "-" + c.Account
	}
}

var (
	accountRe      = regexp.MustCompile(`^[0-9]{12}$`)
	regionRe       = regexp.MustCompile(`^[a-z]{2}(-[a-z]+)+-[0-9]$`)
	stackNameRe    = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9-]{0,63}$`)
	azIDRe         = regexp.MustCompile(`^[a-z]{2,4}[0-9]-az[0-9]+$`)
	instanceTypeRe = regexp.MustCompile(`^[a-z]+[0-9]+[a-z]*g[a-z-]*\.[a-z0-9]+$`)
	amiIDRe        = regexp.MustCompile(`^ami-([0-9a-f]{8}|[0-9a-f]{17})$`)
	flagNameRe     = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*$`)
	// Flag values land unquoted in a systemd ExecStart line: no spaces,
	// quotes, `$` (variable expansion) or `%` (specifiers).
	flagValueRe  = regexp.MustCompile(`^[A-Za-z0-9._:/,=@+-]*$`)
	bucketBaseRe = regexp.MustCompile(`^[a-z0-9][a-z0-9-]*[a-z0-9]$`)
	certARNRe    = regexp.MustCompile(`^arn:aws[a-z-]*:acm:[a-z0-9-]+:[0-9]{12}:certificate/[A-Za-z0-9-]+$`)
	emailRe      = regexp.MustCompile(`^[^@\s]+@[^@\s]+\.[^@\s]+$`)
	// The flags the stack sets itself cannot be overridden, and the
	// policy flags come from the policy keys (so the functions get them
	// too).
	reservedFlags = slices.Concat(userdata.StackFlags, PolicyFlagNames())
)

// LogRetentionDays are the values CloudWatch Logs accepts.
var LogRetentionDays = []int{1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653}

// Validate checks every field and reports all problems at once.
func (c Config) Validate() error {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }

	if !accountRe.MatchString(c.Account) {
		bad("account %q: want 12 digits (context %saccount)", c.Account, ContextPrefix)
	}
	if !regionRe.MatchString(c.Region) {
		bad("region %q: want a region name like us-east-1", c.Region)
	}
	if !stackNameRe.MatchString(c.StackName) {
		bad("stackName %q: want a letter then letters, digits or dashes (≤ 64)", c.StackName)
	}
	if len(c.AvailabilityZones) != 3 {
		bad("availabilityZones: want 3 zone names, got %d", len(c.AvailabilityZones))
	}
	for _, az := range c.AvailabilityZones {
		if !strings.HasPrefix(az, c.Region) || len(az) <= len(c.Region) {
			bad("availability zone %q is not in region %q", az, c.Region)
		}
	}
	if hasDup(c.AvailabilityZones) {
		bad("availabilityZones repeat a zone: %v", c.AvailabilityZones)
	}
	if len(c.AvailabilityZoneIDs) != len(c.AvailabilityZones) {
		bad("availabilityZoneIds: want one AZ ID per zone (%d), got %d", len(c.AvailabilityZones), len(c.AvailabilityZoneIDs))
	}
	for _, id := range c.AvailabilityZoneIDs {
		if !azIDRe.MatchString(id) {
			bad("availability zone ID %q: want an AZ ID like use1-az4", id)
		}
	}
	if hasDup(c.AvailabilityZoneIDs) {
		bad("availabilityZoneIds repeat a zone: %v", c.AvailabilityZoneIDs)
	}
	if regionRe.MatchString(c.Region) {
		errs = append(errs, checkExpressZones(c.Region, c.AvailabilityZoneIDs)...)
	}
	if p, err := netip.ParsePrefix(c.VPCCIDR); err != nil || !p.Addr().Is4() || p.Bits() < 16 || p.Bits() > 22 {
		bad("vpcCidr %q: want an IPv4 prefix between /16 and /22", c.VPCCIDR)
	}
	if c.NATGateways < 1 || c.NATGateways > 3 {
		bad("natGateways %d: want 1..3 (stars need egress for the AWS APIs and packages)", c.NATGateways)
	}
	if !instanceTypeRe.MatchString(c.InstanceType) {
		bad("instanceType %q: want a Graviton (arm64) type such as m7g.large", c.InstanceType)
	}
	if !amiIDRe.MatchString(c.AmiID) {
		bad("amiId %q: want the stars' arm64 Amazon Linux 2023 image ID, pinned (ami-…); the current one: aws ssm get-parameter --region %s --name %s --query Parameter.Value --output text",
			c.AmiID, c.Region, AL2023ARM64Parameter)
	}
	if c.StarCount < 1 {
		bad("starCount %d: want at least 1", c.StarCount)
	}
	if c.StarMaxCount < c.StarCount+1 {
		bad("starMaxCount %d: want at least starCount+1 (%d) so rolling updates add before they drain", c.StarMaxCount, c.StarCount+1)
	}
	for _, port := range []struct {
		name string
		v    int
	}{{"starPort", c.StarPort}, {"internalPort", c.InternalPort}, {"listenerPort", c.ListenerPort}, {"tlsPort", c.TLSPort}} {
		if port.v < 1 || port.v > 65535 {
			bad("%s %d: want 1..65535", port.name, port.v)
		}
	}
	if c.StarPort == c.InternalPort {
		bad("starPort and internalPort are both %d: the internal endpoints must not be on the port the load balancer reaches", c.StarPort)
	}
	if c.KafkaPort != 0 {
		if c.KafkaPort < 1 || c.KafkaPort > 65535 {
			bad("kafkaPort %d: want 1..65535, or 0 for no Kafka", c.KafkaPort)
		}
		if c.KafkaPort == c.StarPort || c.KafkaPort == c.InternalPort || c.KafkaPort == clientListenerPort(c) {
			bad("kafkaPort %d: must differ from starPort, internalPort and the load balancer's API listener port", c.KafkaPort)
		}
	}
	errs = append(errs, c.Policy.validate(c.StarFlags)...)
	for _, name := range slices.Sorted(maps.Keys(c.StarFlags)) {
		if !flagNameRe.MatchString(name) {
			bad("starFlags: flag name %q: want lower-case letters, digits and dashes, no leading dashes", name)
		}
		if slices.Contains(reservedFlags, name) {
			bad("starFlags: %q is set by the stack and cannot be overridden", name)
		}
		if !flagValueRe.MatchString(c.StarFlags[name]) {
			bad("starFlags: value of %q (%q) has characters unsafe in a systemd command line", name, c.StarFlags[name])
		}
	}
	if len(c.DrainArgs) == 0 {
		bad("drainArgs: want the star CLI arguments that drain the local star")
	}
	for _, a := range c.DrainArgs {
		if !flagValueRe.MatchString(a) || a == "" {
			bad("drainArgs: argument %q has unsafe characters", a)
		}
	}
	if c.DrainMaxMinutes < 1 || c.DrainMaxMinutes > 24*60 {
		bad("drainMaxMinutes %d: want 1..1440", c.DrainMaxMinutes)
	}
	if c.LifecycleHeartbeatSeconds < 60 || c.LifecycleHeartbeatSeconds > 7200 {
		bad("lifecycleHeartbeatSeconds %d: want 60..7200 (the hook's limits)", c.LifecycleHeartbeatSeconds)
	}
	if c.HealthGraceSeconds < 0 || c.HealthGraceSeconds > 3600 {
		bad("healthGraceSeconds %d: want 0..3600", c.HealthGraceSeconds)
	}
	if c.CertificateARN != "" && !certARNRe.MatchString(c.CertificateARN) {
		bad("certificateArn %q: want an ACM certificate ARN", c.CertificateARN)
	}
	if len(c.ClientCIDRs) == 0 {
		if c.InternetFacing {
			bad("clientCidrs: an internet-facing load balancer needs the client CIDRs named explicitly (0.0.0.0/0 only if the whole internet is meant)")
		} else {
			bad("clientCidrs: want at least one CIDR")
		}
	}
	for _, cidr := range c.ClientCIDRs {
		if p, err := netip.ParsePrefix(cidr); err != nil || !p.Addr().Is4() {
			bad("clientCidrs: %q is not an IPv4 CIDR", cidr)
		}
	}
	if !bucketBaseRe.MatchString(c.ExpressBucketBase) || strings.Contains(c.ExpressBucketBase, "--") {
		bad("expressBucketBase %q: want lower-case letters, digits and single dashes", c.ExpressBucketBase)
	}
	for _, id := range c.AvailabilityZoneIDs {
		if n := DirectoryBucketName(c.ExpressBucketBase, id); len(n) > 63 {
			bad("directory bucket name %q is longer than 63 characters: shorten expressBucketBase", n)
		}
	}
	if c.StarBinary == "" {
		bad("starBinary: want the path of the linux/arm64 star binary")
	}
	if c.LambdaDir == "" {
		bad("lambdaDir: want the folder holding <job>/bootstrap")
	}
	for _, job := range Jobs {
		f, ok := c.Functions[job]
		if !ok {
			bad("functions: no settings for %q", job)
			continue
		}
		errs = append(errs, f.validate(job)...)
	}
	for name := range c.Functions {
		if !slices.Contains(Jobs, name) {
			bad("functions: unknown job %q (jobs: %s)", name, strings.Join(Jobs, ", "))
		}
	}
	if !slices.Contains(LogRetentionDays, c.LogRetentionDays) {
		bad("logRetentionDays %d: want one of %v", c.LogRetentionDays, LogRetentionDays)
	}
	if c.AlarmEmail != "" && !emailRe.MatchString(c.AlarmEmail) {
		bad("alarmEmail %q is not an e-mail address", c.AlarmEmail)
	}
	for _, a := range []struct {
		name string
		v    int
	}{{"backlogAgeAlarmSeconds", c.BacklogAgeAlarmSeconds}, {"settleLagAlarmSeconds", c.SettleLagAlarmSeconds}, {"queueAgeAlarmSeconds", c.QueueAgeAlarmSeconds}} {
		if a.v < 1 {
			bad("%s %d: want a positive threshold", a.name, a.v)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid starlog configuration:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

func (f Function) validate(job string) []string {
	var errs []string
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Sprintf("functions.%s: ", job)+fmt.Sprintf(format, args...))
	}
	if f.MemoryMiB < 128 || f.MemoryMiB > 10240 {
		bad("memoryMiB %d: want 128..10240", f.MemoryMiB)
	}
	if f.EphemeralMiB < 512 || f.EphemeralMiB > 10240 {
		bad("ephemeralMiB %d: want 512..10240", f.EphemeralMiB)
	}
	if f.TimeoutSeconds < 1 || f.TimeoutSeconds > 900 {
		bad("timeoutSeconds %d: want 1..900", f.TimeoutSeconds)
	}
	if slices.Contains(QueueJobs, job) {
		if f.BatchSize < 1 || f.BatchSize > 10 {
			bad("batchSize %d: want 1..10", f.BatchSize)
		}
		if f.MaxConcurrency != 0 && (f.MaxConcurrency < 2 || f.MaxConcurrency > 1000) {
			bad("maxConcurrency %d: want 0 (no cap) or 2..1000", f.MaxConcurrency)
		}
		if f.MaxReceiveCount < 1 || f.MaxReceiveCount > 1000 {
			bad("maxReceiveCount %d: want 1..1000", f.MaxReceiveCount)
		}
		if vt := VisibilityTimeoutSeconds(f); vt > 12*3600 {
			bad("timeoutSeconds %d gives a visibility timeout of %d s, above SQS's 12 h", f.TimeoutSeconds, vt)
		}
	} else if f.ScheduleMinutes < 1 || f.ScheduleMinutes > 60 {
		bad("scheduleMinutes %d: want 1..60", f.ScheduleMinutes)
	}
	return errs
}

// VisibilityTimeoutSeconds is the queue visibility timeout for a queue job:
// six times the function timeout, as Lambda's SQS poller recommends, so a
// throttled retry never makes a message visible while still in work.
func VisibilityTimeoutSeconds(f Function) int { return 6 * f.TimeoutSeconds }

// DirectoryBucketName is the S3 Express One Zone directory bucket name for
// one availability zone ID.
func DirectoryBucketName(base, azID string) string {
	return base + "--" + azID + "--x-s3"
}

// DirectoryBucketNames returns one name per configured AZ ID, in order.
func (c Config) DirectoryBucketNames() []string {
	out := make([]string, len(c.AvailabilityZoneIDs))
	for i, id := range c.AvailabilityZoneIDs {
		out[i] = DirectoryBucketName(c.ExpressBucketBase, id)
	}
	return out
}

// AvailabilityZonesContextKey is the CDK context key under which the CDK
// caches a (account, region)'s zone list; setting it stops the lookup.
func (c Config) AvailabilityZonesContextKey() string {
	return "availability-zones:account=" + c.Account + ":region=" + c.Region
}

func hasDup(xs []string) bool {
	seen := map[string]bool{}
	for _, x := range xs {
		if seen[x] {
			return true
		}
		seen[x] = true
	}
	return false
}

// WithRoot returns c with relative binary paths made absolute against root
// (the repository root, where cdk.json lives): defaults are written relative
// to it while the app runs in infra/.
func (c Config) WithRoot(root string) Config {
	c.StarBinary = absUnder(root, c.StarBinary)
	c.LambdaDir = absUnder(root, c.LambdaDir)
	return c
}

// LambdaBootstrap is the path of a job's bootstrap under LambdaDir.
func (c Config) LambdaBootstrap(job string) string {
	return filepath.Join(c.LambdaDir, job, "bootstrap")
}

func absUnder(root, p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(root, p)
}

// clientListenerPort is the load balancer's API listener port: TLSPort
// with a certificate, ListenerPort without.
func clientListenerPort(c Config) int {
	if c.CertificateARN != "" {
		return c.TLSPort
	}
	return c.ListenerPort
}
