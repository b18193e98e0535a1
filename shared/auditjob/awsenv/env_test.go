package awsenv_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/auditjob/awsenv"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
)

func lookup(m map[string]string) awsenv.Lookup {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// What the CDK stack sets, and nothing else: AWS defaults everywhere.
func TestParseStackEnvironment(t *testing.T) {
	e, err := awsenv.Parse(lookup(map[string]string{
		"STARLOG_DYNAMO_TABLE":           "Starlog-Table",
		"STARLOG_STANDARD_BUCKETS":       "starlog-std",
		"STARLOG_EXPRESS_BUCKETS":        "x--use1-az4--x-s3, y--use1-az5--x-s3,z--use1-az6--x-s3",
		"STARLOG_SCRATCH_DIR":            "/tmp",
		"STARLOG_SCRATCH_MIB":            "10240",
		"STARLOG_MEMORY_MIB":             "2048",
		"STARLOG_METRICS_NAMESPACE":      "Starlog",
		"STARLOG_CLUSTER":                "Starlog",
		"STARLOG_SETTLE_QUEUE_URL":       "https://sqs.us-east-1.amazonaws.com/1/Starlog-settle",
		"STARLOG_CHAIN_SETTLE_QUEUE_URL": "https://sqs.us-east-1.amazonaws.com/1/Starlog-chain-settle",
		"AWS_REGION":                     "us-east-1",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if e.Table != "Starlog-Table" || e.SettledBucket != "starlog-std" || len(e.ExpressBuckets) != 3 || e.ExpressBuckets[1] != "y--use1-az5--x-s3" ||
		e.ScratchMiB != 10240 || e.S3Region != "us-east-1" || e.DynamoRegion != "us-east-1" || e.S3Endpoint != "" || e.S3PathStyle {
		t.Fatalf("parsed %+v", e)
	}
	if len(e.QueueURLs) != 2 || e.QueueURLs["chain-settle"] != "https://sqs.us-east-1.amazonaws.com/1/Starlog-chain-settle" || e.QueueURLs["trim"] != "" {
		t.Fatalf("queue URLs %v", e.QueueURLs)
	}
	got := e.Settle.WithDefaults()
	want := settle.DefaultConfig()
	want.ScratchDir = "/tmp"
	// The settle job's limits come from the function's /tmp and memory.
	want.ScratchBytes, want.FooterBytes = 7680<<20, 256<<20
	if got != want {
		t.Fatalf("settle policy %+v, want the defaults %+v", got, want)
	}
}

func TestParseOverrides(t *testing.T) {
	e, err := awsenv.Parse(lookup(map[string]string{
		"STARLOG_DYNAMO_TABLE":            "t",
		"STARLOG_STANDARD_BUCKETS":        "std,other",
		"STARLOG_S3_ENDPOINT":             "http://127.0.0.1:7070",
		"STARLOG_S3_REGION":               "eu-west-1",
		"STARLOG_S3_PATH_STYLE":           "true",
		"STARLOG_DYNAMO_ENDPOINT":         "http://127.0.0.1:8000",
		"STARLOG_AWS_ACCESS_KEY_ID":       "ak",
		"STARLOG_AWS_SECRET_ACCESS_KEY":   "sk",
		"STARLOG_SQS_ENDPOINT":            "http://127.0.0.1:9324",
		"STARLOG_SETTLE_TRIGGER_MIB":      "2",
		"STARLOG_SETTLE_LINGER":           "5s",
		"STARLOG_SETTLE_AGE_CAP":          "1m",
		"STARLOG_SETTLE_EXPRESS_LINGER":   "1s",
		"STARLOG_SETTLE_EXPRESS_AGE_CAP":  "20s",
		"STARLOG_SETTLE_OUTPUT_CAP_MIB":   "64",
		"STARLOG_READ_GRACE":              "30s",
		"STARLOG_SETTLE_WORKERS":          "3",
		"STARLOG_SETTLE_ERA_MAX_SLOTS":    "16",
		"STARLOG_SETTLE_QUARANTINE_AFTER": "7",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if e.SettledBucket != "std" || e.S3Region != "eu-west-1" || e.DynamoRegion != "" || !e.S3PathStyle || e.AccessKey != "ak" || e.SQSEndpoint == "" {
		t.Fatalf("parsed %+v", e)
	}
	s := e.Settle
	if s.Trigger != 2<<20 || s.Standard != (settle.ClassTimers{Linger: 5 * time.Second, AgeCap: time.Minute}) ||
		s.Express != (settle.ClassTimers{Linger: time.Second, AgeCap: 20 * time.Second}) || s.OutputCap != 64<<20 ||
		s.ReadGrace != 30*time.Second || s.Workers != 3 || s.EraMaxSlots != 16 || s.QuarantineAfter != 7 {
		t.Fatalf("settle policy %+v", s)
	}
}

func TestParseRefuses(t *testing.T) {
	base := map[string]string{"STARLOG_DYNAMO_TABLE": "t", "STARLOG_STANDARD_BUCKETS": "std", "AWS_REGION": "us-east-1"}
	for name, c := range map[string]struct {
		set  map[string]string
		drop string
		want string
	}{
		"no table":          {drop: "STARLOG_DYNAMO_TABLE", want: "STARLOG_DYNAMO_TABLE"},
		"no bucket":         {drop: "STARLOG_STANDARD_BUCKETS", want: "STARLOG_STANDARD_BUCKETS"},
		"no region":         {drop: "AWS_REGION", want: "region"},
		"bad duration":      {set: map[string]string{"STARLOG_READ_GRACE": "5"}, want: "STARLOG_READ_GRACE"},
		"bad integer":       {set: map[string]string{"STARLOG_SETTLE_TRIGGER_MIB": "-1"}, want: "STARLOG_SETTLE_TRIGGER_MIB"},
		"bad bool":          {set: map[string]string{"STARLOG_S3_PATH_STYLE": "yes please"}, want: "STARLOG_S3_PATH_STYLE"},
		"half credentials":  {set: map[string]string{"STARLOG_AWS_ACCESS_KEY_ID": "ak"}, want: "go together"},
		"linger past cap":   {set: map[string]string{"STARLOG_SETTLE_LINGER": "1h"}, want: "linger"},
		"cap below trigger": {set: map[string]string{"STARLOG_SETTLE_OUTPUT_CAP_MIB": "1", "STARLOG_SETTLE_TRIGGER_MIB": "4"}, want: "output cap"},
	} {
		m := map[string]string{}
		for k, v := range base {
			m[k] = v
		}
		delete(m, c.drop)
		for k, v := range c.set {
			m[k] = v
		}
		if _, err := awsenv.Parse(lookup(m)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: error %v, want one naming %q", name, err, c.want)
		}
	}
}

// The variable names are the CDK stack's: read them from its source (a
// separate Go module), so a rename on either side fails here.
func TestNamesMatchTheStack(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(testsvc.RepoRoot(t), "infra", "stack", "auditor.go"))
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	for _, m := range regexp.MustCompile(`(Env\w+)\s*=\s*"(STARLOG_\w+)"`).FindAllStringSubmatch(string(src), -1) {
		set[m[1]] = m[2]
	}
	for stack, ours := range map[string]string{
		"EnvTable": awsenv.EnvTable, "EnvBucket": awsenv.EnvStandardBuckets, "EnvExpressBuckets": awsenv.EnvExpressBuckets,
		"EnvScratchDir": awsenv.EnvScratchDir, "EnvScratchMiB": awsenv.EnvScratchMiB,
		"EnvMetricsNamespace": awsenv.EnvMetricsNamespace, "EnvCluster": awsenv.EnvCluster,
	} {
		if set[stack] != ours {
			t.Errorf("stack %s = %q, functions read %q", stack, set[stack], ours)
		}
	}
	if !strings.Contains(string(src), `return "STARLOG_" + strings.ToUpper(strings.ReplaceAll(job, "-", "_")) + "_QUEUE_URL"`) {
		t.Error("the stack's QueueURLEnv changed; update awsenv.QueueURLEnv")
	}
	if got := awsenv.QueueURLEnv("chain-settle"); got != "STARLOG_CHAIN_SETTLE_QUEUE_URL" {
		t.Errorf("QueueURLEnv(chain-settle) = %s", got)
	}
}
