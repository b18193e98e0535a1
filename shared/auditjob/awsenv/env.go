// Package awsenv builds the auditor's runtime on AWS from the process
// environment: the DynamoDB metastore, the S3 object store, the settle
// policy, and the SQS queues jobs are sent to. The names are the ones the
// CDK stack sets (infra/stack/auditor.go) and, where a star flag exists,
// that flag's environment fallback (star/servecmd: STARLOG_ + the flag
// upper-cased), so a function and a star read one set of names. Endpoint
// overrides point a function at versitygw, DynamoDB Local and a local SQS.
package awsenv

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/settle"
)

// Variables set by the CDK stack for every function.
const (
	EnvTable            = "STARLOG_DYNAMO_TABLE"
	EnvStandardBuckets  = "STARLOG_STANDARD_BUCKETS"
	EnvExpressBuckets   = "STARLOG_EXPRESS_BUCKETS"
	EnvScratchDir       = "STARLOG_SCRATCH_DIR"
	EnvScratchMiB       = "STARLOG_SCRATCH_MIB"
	EnvMemoryMiB        = "STARLOG_MEMORY_MIB"
	EnvMetricsNamespace = "STARLOG_METRICS_NAMESPACE"
	EnvCluster          = "STARLOG_CLUSTER"
)

// Overrides, for local services and tests; the star's flags of the same
// names (--dynamo-endpoint, --s3-endpoint, …) take the same variables.
const (
	EnvDynamoEndpoint = "STARLOG_DYNAMO_ENDPOINT"
	EnvDynamoRegion   = "STARLOG_DYNAMO_REGION"
	EnvS3Endpoint     = "STARLOG_S3_ENDPOINT"
	EnvS3Region       = "STARLOG_S3_REGION"
	EnvS3PathStyle    = "STARLOG_S3_PATH_STYLE"
	EnvAccessKey      = "STARLOG_AWS_ACCESS_KEY_ID"
	EnvSecretKey      = "STARLOG_AWS_SECRET_ACCESS_KEY"
	// EnvSQSEndpoint has no star flag: only the auditor sends to queues.
	EnvSQSEndpoint = "STARLOG_SQS_ENDPOINT"
	EnvLogLevel    = "STARLOG_LOG_LEVEL"
	// EnvRecordOps names a file to append every AWS operation to (the
	// deploy rehearsal's IAM coverage check; shared/awsrecord). Test-only,
	// like the endpoints; the star's --record-ops takes the same variable.
	EnvRecordOps = "STARLOG_RECORD_OPS"
	// EnvRegion is the function's region, set by Lambda itself.
	EnvRegion = "AWS_REGION"
)

// The settle policy: the environment fallbacks of the star's --settle-*
// --read-grace and --dead-after flags. Unset means the default (docs/design.md §10).
const (
	EnvSettleTriggerMiB    = "STARLOG_SETTLE_TRIGGER_MIB"
	EnvSettleLinger        = "STARLOG_SETTLE_LINGER"
	EnvSettleExpressLinger = "STARLOG_SETTLE_EXPRESS_LINGER"
	EnvSettleAgeCap        = "STARLOG_SETTLE_AGE_CAP"
	EnvSettleExpressAgeCap = "STARLOG_SETTLE_EXPRESS_AGE_CAP"
	EnvSettleOutputCapMiB  = "STARLOG_SETTLE_OUTPUT_CAP_MIB"
	EnvReadGrace           = "STARLOG_READ_GRACE"
	EnvDeadAfter           = "STARLOG_DEAD_AFTER"
	// Auditor-only knobs (no star flag): settle's worker pool and the
	// era bound the planner cuts by.
	EnvSettleWorkers     = "STARLOG_SETTLE_WORKERS"
	EnvSettleEraMaxSlots = "STARLOG_SETTLE_ERA_MAX_SLOTS"
	// EnvSettleQuarantineAfter is Config.QuarantineAfter: consecutive
	// failed settle jobs before a stream is quarantined.
	EnvSettleQuarantineAfter = "STARLOG_SETTLE_QUARANTINE_AFTER"
)

// QueueURLEnv is the variable holding a job kind's queue URL, e.g.
// STARLOG_CHAIN_SETTLE_QUEUE_URL (as infra/stack.QueueURLEnv).
func QueueURLEnv(kind string) string {
	return "STARLOG_" + strings.ToUpper(strings.ReplaceAll(kind, "-", "_")) + "_QUEUE_URL"
}

// Env is the parsed environment.
type Env struct {
	Table string
	// SettledBucket is the first Standard bucket: settled objects land
	// there whatever the stream's class. The CDK stack sets exactly one.
	SettledBucket  string
	ExpressBuckets []string
	ScratchDir     string
	// ScratchMiB and MemoryMiB are the function's ephemeral storage and
	// memory, set by the stack from the function's own sizes: the settle
	// job's limits derive from them (SettleLimits).
	ScratchMiB, MemoryMiB int

	MetricsNamespace, Cluster string

	DynamoEndpoint, DynamoRegion string
	S3Endpoint, S3Region         string
	S3PathStyle                  bool
	AccessKey, SecretKey         string
	SQSEndpoint                  string
	Region                       string
	LogLevel                     string
	RecordOps                    string

	// QueueURLs maps a job kind to its queue URL (only those set).
	QueueURLs map[string]string

	Settle settle.Config
}

// Lookup reads one variable (os.LookupEnv).
type Lookup func(name string) (string, bool)

// Parse reads the environment through lookup. Pure: it opens nothing.
func Parse(lookup Lookup) (Env, error) {
	p := parser{lookup: lookup}
	e := Env{
		Table:            p.str(EnvTable),
		ExpressBuckets:   p.list(EnvExpressBuckets),
		ScratchDir:       p.str(EnvScratchDir),
		ScratchMiB:       p.integer(EnvScratchMiB),
		MemoryMiB:        p.integer(EnvMemoryMiB),
		MetricsNamespace: p.str(EnvMetricsNamespace),
		Cluster:          p.str(EnvCluster),
		DynamoEndpoint:   p.str(EnvDynamoEndpoint),
		DynamoRegion:     p.str(EnvDynamoRegion),
		S3Endpoint:       p.str(EnvS3Endpoint),
		S3Region:         p.str(EnvS3Region),
		S3PathStyle:      p.boolean(EnvS3PathStyle),
		AccessKey:        p.str(EnvAccessKey),
		SecretKey:        p.str(EnvSecretKey),
		SQSEndpoint:      p.str(EnvSQSEndpoint),
		Region:           p.str(EnvRegion),
		LogLevel:         p.str(EnvLogLevel),
		RecordOps:        p.str(EnvRecordOps),
		QueueURLs:        map[string]string{},
	}
	if std := p.list(EnvStandardBuckets); len(std) > 0 {
		e.SettledBucket = std[0]
	}
	for _, k := range []string{"settle", "trim", "chain-settle"} {
		if u := p.str(QueueURLEnv(k)); u != "" {
			e.QueueURLs[k] = u
		}
	}
	e.Settle = settle.Config{
		Trigger:         uint64(p.integer(EnvSettleTriggerMiB)) << 20,
		Standard:        settle.ClassTimers{Linger: p.duration(EnvSettleLinger), AgeCap: p.duration(EnvSettleAgeCap)},
		Express:         settle.ClassTimers{Linger: p.duration(EnvSettleExpressLinger), AgeCap: p.duration(EnvSettleExpressAgeCap)},
		OutputCap:       uint64(p.integer(EnvSettleOutputCapMiB)) << 20,
		ReadGrace:       p.duration(EnvReadGrace),
		Workers:         p.integer(EnvSettleWorkers),
		ScratchDir:      e.ScratchDir,
		EraMaxSlots:     p.integer(EnvSettleEraMaxSlots),
		QuarantineAfter: p.integer(EnvSettleQuarantineAfter),
		ScratchBytes:    scratchShare(e.ScratchMiB),
		FooterBytes:     footerShare(e.MemoryMiB),
		DeadAfter:       p.duration(EnvDeadAfter),
	}
	if e.Table == "" {
		p.errs = append(p.errs, fmt.Errorf("%s is not set", EnvTable))
	}
	if e.SettledBucket == "" {
		p.errs = append(p.errs, fmt.Errorf("%s is not set", EnvStandardBuckets))
	}
	if e.S3Region == "" {
		e.S3Region = e.Region
	}
	if e.DynamoRegion == "" {
		e.DynamoRegion = e.Region
	}
	if e.S3Region == "" {
		p.errs = append(p.errs, fmt.Errorf("no region: set %s or %s", EnvRegion, EnvS3Region))
	}
	if (e.AccessKey == "") != (e.SecretKey == "") {
		p.errs = append(p.errs, fmt.Errorf("%s and %s go together", EnvAccessKey, EnvSecretKey))
	}
	if err := e.Settle.WithDefaults().Validate(); err != nil {
		p.errs = append(p.errs, err)
	}
	if err := errors.Join(p.errs...); err != nil {
		return Env{}, fmt.Errorf("awsenv: %w", err)
	}
	return e, nil
}

// parser collects every bad variable instead of stopping at the first.
type parser struct {
	lookup Lookup
	errs   []error
}

func (p *parser) str(name string) string {
	v, _ := p.lookup(name)
	return strings.TrimSpace(v)
}

func (p *parser) list(name string) []string {
	var out []string
	for _, s := range strings.Split(p.str(name), ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

func (p *parser) integer(name string) int {
	v := p.str(name)
	if v == "" {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: want a non-negative integer", name, v))
		return 0
	}
	return n
}

func (p *parser) duration(name string) time.Duration {
	v := p.str(name)
	if v == "" {
		return 0
	}
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: want a duration such as 90s", name, v))
		return 0
	}
	return d
}

func (p *parser) boolean(name string) bool {
	v := p.str(name)
	if v == "" {
		return false
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		p.errs = append(p.errs, fmt.Errorf("%s=%q: want true or false", name, v))
	}
	return b
}

// scratchShare is the settle job's scratch limit on a function with mib
// of ephemeral storage: 3/4 of it, the rest left to the runtime and the
// fetch cache's files in flight (0, unset: the default).
func scratchShare(mib int) int64 { return int64(mib) << 20 * 3 / 4 }

// footerShare is the footer-entry memory limit on a function with mib of
// memory: 1/8 of it; the rest holds the bundles being read (one whole
// bundle per warming worker) and the parts being staged.
func footerShare(mib int) int64 { return int64(mib) << 20 / 8 }
