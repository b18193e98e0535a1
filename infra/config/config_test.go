package config

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// base is a minimal valid context, as cdk.json would give it.
func base() map[string]any {
	return map[string]any{
		"account":             "123456789012",
		"region":              "us-east-1",
		"availabilityZones":   []any{"us-east-1a", "us-east-1b", "us-east-1c"},
		"availabilityZoneIds": []any{"use1-az4", "use1-az5", "use1-az6"},
		"amiId":               "ami-0123456789abcdef0",
	}
}

func lookupOf(m map[string]any) Lookup {
	return func(k string) (any, bool) { v, ok := m[k]; return v, ok }
}

func TestParseDefaults(t *testing.T) {
	c, err := Parse(lookupOf(base()))
	if err != nil {
		t.Fatal(err)
	}
	if c.StackName != "Starlog" || c.InstanceType != "m7g.large" || c.StarCount != 3 || c.StarPort != 8080 {
		t.Errorf("defaults not applied: %+v", c)
	}
	if c.StarMaxCount != 4 {
		t.Errorf("StarMaxCount = %d, want starCount+1 = 4", c.StarMaxCount)
	}
	if got := strings.Join(c.ClientCIDRs, ","); got != "10.40.0.0/16" {
		t.Errorf("internal NLB clients = %q, want the VPC CIDR", got)
	}
	if c.ExpressBucketBase != "starlog-123456789012" {
		t.Errorf("ExpressBucketBase = %q", c.ExpressBucketBase)
	}
	want := []string{
		"starlog-123456789012--use1-az4--x-s3",
		"starlog-123456789012--use1-az5--x-s3",
		"starlog-123456789012--use1-az6--x-s3",
	}
	if got := c.DirectoryBucketNames(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("DirectoryBucketNames = %v, want %v", got, want)
	}
	if !c.TableDeletionProtection || !c.RetainData {
		t.Error("data protection must default on")
	}
	if c.AvailabilityZonesContextKey() != "availability-zones:account=123456789012:region=us-east-1" {
		t.Errorf("context key %q", c.AvailabilityZonesContextKey())
	}
	if c.InternalPort != 8081 || c.Policy != DefaultPolicy() {
		t.Errorf("internal port %d, policy %+v", c.InternalPort, c.Policy)
	}
}

func TestParseStringForms(t *testing.T) {
	// `cdk -c key=value` gives every value as a string.
	m := map[string]any{
		"account":                 "123456789012",
		"region":                  "eu-north-1",
		"availabilityZones":       "eu-north-1a, eu-north-1b,eu-north-1c",
		"availabilityZoneIds":     `["eun1-az1","eun1-az2","eun1-az3"]`,
		"amiId":                   "ami-01234567",
		"starCount":               "5",
		"internetFacing":          "true",
		"clientCidrs":             "203.0.113.0/24, 198.51.100.0/24",
		"settleLinger":            "30s",
		"settleOutputCapMiB":      "64",
		"deadAfter":               "45s",
		"starFlags":               `{"s3-memory-buffer-mib":"512","s3-chain-backlog-flights":2048}`,
		"functions":               `{"settle":{"memoryMiB":4096}}`,
		"tableDeletionProtection": "false",
	}
	c, err := Parse(lookupOf(m))
	if err != nil {
		t.Fatal(err)
	}
	if c.StarCount != 5 || c.StarMaxCount != 6 {
		t.Errorf("counts %d/%d", c.StarCount, c.StarMaxCount)
	}
	if !c.InternetFacing || strings.Join(c.ClientCIDRs, ",") != "203.0.113.0/24,198.51.100.0/24" {
		t.Errorf("internet-facing clients = %v", c.ClientCIDRs)
	}
	if p := c.Policy; p.SettleLinger != "30s" || p.SettleOutputCapMiB != 64 || p.DeadAfter != "45s" || p.SettleAgeCap != "15m" {
		t.Errorf("policy %+v", p)
	}
	if c.AvailabilityZones[1] != "eu-north-1b" || c.AvailabilityZoneIDs[2] != "eun1-az3" {
		t.Errorf("zones %v %v", c.AvailabilityZones, c.AvailabilityZoneIDs)
	}
	if c.StarFlags["s3-memory-buffer-mib"] != "512" || c.StarFlags["s3-chain-backlog-flights"] != "2048" {
		t.Errorf("flags %v", c.StarFlags)
	}
	s := c.Functions[JobSettle]
	if s.MemoryMiB != 4096 || s.EphemeralMiB != 10240 || s.TimeoutSeconds != 900 {
		t.Errorf("settle override must merge field by field, got %+v", s)
	}
	if c.TableDeletionProtection {
		t.Error("tableDeletionProtection=false ignored")
	}
}

func TestParseRejects(t *testing.T) {
	cases := []struct {
		name string
		set  map[string]any
		want string
	}{
		{"no account", map[string]any{"account": nil}, "account"},
		{"short account", map[string]any{"account": "1234"}, "account"},
		{"two zones", map[string]any{"availabilityZones": []any{"us-east-1a", "us-east-1b"}}, "want 3 zone names"},
		{"zone in other region", map[string]any{"availabilityZones": []any{"us-east-1a", "us-east-1b", "us-west-2c"}}, "not in region"},
		{"zone names as ids", map[string]any{"availabilityZoneIds": []any{"us-east-1a", "us-east-1b", "us-east-1c"}}, "AZ ID"},
		{"duplicate ids", map[string]any{"availabilityZoneIds": []any{"use1-az4", "use1-az4", "use1-az5"}}, "repeat"},
		// Issue 12 item 7: regions with two S3 Express zones, zone IDs of
		// another region or without directory buckets, no pinned AMI.
		{"two express zones", map[string]any{"region": "us-east-2", "availabilityZones": []any{"us-east-2a", "us-east-2b", "us-east-2c"},
			"availabilityZoneIds": []any{"use2-az1", "use2-az2", "use2-az3"}}, "2 zones only"},
		{"no express", map[string]any{"region": "sa-east-1", "availabilityZones": []any{"sa-east-1a", "sa-east-1b", "sa-east-1c"},
			"availabilityZoneIds": []any{"sae1-az1", "sae1-az2", "sae1-az3"}}, "does not offer S3 Express"},
		{"ids of another region", map[string]any{"availabilityZoneIds": []any{"use1-az4", "use1-az5", "usw2-az1"}}, `"usw2-az1" is not a zone ID of us-east-1`},
		{"id without directory buckets", map[string]any{"availabilityZoneIds": []any{"use1-az4", "use1-az5", "use1-az1"}}, `"use1-az1" does not host S3 Express`},
		{"no ami", map[string]any{"amiId": nil}, "amiId"},
		{"ssm path as ami", map[string]any{"amiId": "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64"}, "amiId"},
		// Item 8: an internet-facing load balancer names its clients.
		{"internet-facing without clients", map[string]any{"internetFacing": true}, "needs the client CIDRs named explicitly"},
		{"internal port is the public port", map[string]any{"internalPort": 8080.0}, "internalPort"},
		// Issue 30 item 5: Kafka has a port of its own, set by the stack.
		{"kafka on the public port", map[string]any{"kafkaPort": 8080.0}, "kafkaPort 8080"},
		{"kafka on the listener's port", map[string]any{"kafkaPort": 80.0}, "kafkaPort 80"},
		{"kafka port out of range", map[string]any{"kafkaPort": 70000.0}, "kafkaPort 70000"},
		{"kafka flag in starFlags", map[string]any{"starFlags": map[string]any{"kafka-advertise": "x:1"}}, "set by the stack"},
		// Item 9: the policy is checked as the star would check it, and
		// cannot be set past the functions through starFlags.
		{"linger past age cap", map[string]any{"settleExpressLinger": "5m"}, "settleExpressLinger 5m exceeds"},
		{"bad duration", map[string]any{"readGrace": "5 minutes"}, "readGrace"},
		{"dead-after too short", map[string]any{"deadAfter": "15s"}, "deadAfter 15s must exceed"},
		{"dead-after vs heartbeat", map[string]any{"starFlags": map[string]any{"registry-heartbeat": "20s"}}, "deadAfter 30s must exceed"},
		{"output cap below trigger", map[string]any{"settleOutputCapMiB": 4.0}, "below settleTriggerMiB"},
		{"policy flag in starFlags", map[string]any{"starFlags": map[string]any{"settle-linger": "30s"}}, "set by the stack"},
		{"region flag in starFlags", map[string]any{"starFlags": map[string]any{"s3-region": "us-east-1"}}, "set by the stack"},
		{"x86 instance", map[string]any{"instanceType": "m7i.large"}, "Graviton"},
		{"zero stars", map[string]any{"starCount": 0.0}, "starCount"},
		{"fractional", map[string]any{"starCount": 2.5}, "integer"},
		{"bad bool", map[string]any{"retainData": "perhaps"}, "true or false"},
		{"reserved flag", map[string]any{"starFlags": map[string]any{"dynamo-table": "x"}}, "set by the stack"},
		{"unsafe flag value", map[string]any{"starFlags": map[string]any{"foo": "a b"}}, "unsafe"},
		{"specifier in flag", map[string]any{"starFlags": map[string]any{"foo": "50%"}}, "unsafe"},
		{"dashed flag name", map[string]any{"starFlags": map[string]any{"--foo": "1"}}, "flag name"},
		{"unknown job", map[string]any{"functions": map[string]any{"compact": map[string]any{"memoryMiB": 256.0}}}, "unknown job"},
		{"unknown function field", map[string]any{"functions": map[string]any{"settle": map[string]any{"memory": 256.0}}}, "unknown field"},
		{"too much scratch", map[string]any{"functions": map[string]any{"settle": map[string]any{"ephemeralMiB": 20000.0}}}, "ephemeralMiB"},
		{"bad batch", map[string]any{"functions": map[string]any{"trim": map[string]any{"batchSize": 0.0}}}, "batchSize"},
		{"bad cert", map[string]any{"certificateArn": "arn:aws:iam::123456789012:server-certificate/x"}, "ACM"},
		{"bad retention", map[string]any{"logRetentionDays": 31.0}, "logRetentionDays"},
		{"long bucket base", map[string]any{"expressBucketBase": strings.Repeat("a", 50)}, "longer than 63"},
		{"double dash base", map[string]any{"expressBucketBase": "a--b"}, "expressBucketBase"},
		{"bad cidr", map[string]any{"clientCidrs": []any{"10.0.0.0/33"}}, "clientCidrs"},
		{"tiny vpc", map[string]any{"vpcCidr": "10.0.0.0/28"}, "vpcCidr"},
		{"wrong type", map[string]any{"starFlags": []any{"a"}}, "want an object"},
		{"max below count", map[string]any{"starCount": 3.0, "starMaxCount": 3.0}, "starMaxCount"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m := base()
			for k, v := range tc.set {
				if v == nil {
					delete(m, k)
				} else {
					m[k] = v
				}
			}
			_, err := Parse(lookupOf(m))
			if err == nil {
				t.Fatalf("Parse accepted %v", tc.set)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not mention %q", err, tc.want)
			}
		})
	}
}

func TestCheckKeys(t *testing.T) {
	if err := CheckKeys([]string{"starlog:account", "starlog:functions", "@aws-cdk/core:foo", "availability-zones:account=1:region=x"}); err != nil {
		t.Errorf("known keys rejected: %v", err)
	}
	err := CheckKeys([]string{"starlog:instancetype", "starlog:account"})
	if err == nil || !strings.Contains(err.Error(), "starlog:instancetype") {
		t.Errorf("misspelt key not reported: %v", err)
	}
}

func TestKeysAreAllRead(t *testing.T) {
	// Every key in Keys must change the parse result when set to something
	// odd: a key listed but never read would pass CheckKeys silently.
	for _, k := range Keys {
		seen := false
		look := func(key string) (any, bool) {
			if key == k {
				seen = true
			}
			return base()[key], base()[key] != nil
		}
		_, _ = Parse(look)
		if !seen {
			t.Errorf("key %q is listed but Parse never reads it", k)
		}
	}
}

func TestWithRoot(t *testing.T) {
	c := Defaults()
	c = c.WithRoot("/repo")
	if c.StarBinary != filepath.FromSlash("/repo/build/star-linux-arm64/star") {
		t.Errorf("StarBinary %q", c.StarBinary)
	}
	if c.LambdaBootstrap(JobChainSettle) != filepath.FromSlash("/repo/build/lambda/chain-settle/bootstrap") {
		t.Errorf("bootstrap %q", c.LambdaBootstrap(JobChainSettle))
	}
	c.StarBinary = "/abs/star"
	if c.WithRoot("/other").StarBinary != "/abs/star" {
		t.Error("absolute path rewritten")
	}
}

func TestVisibilityTimeout(t *testing.T) {
	for _, job := range QueueJobs {
		f := DefaultFunctions()[job]
		if VisibilityTimeoutSeconds(f) < 6*f.TimeoutSeconds {
			t.Errorf("%s: visibility %d below 6× timeout", job, VisibilityTimeoutSeconds(f))
		}
	}
}

// FuzzParse feeds arbitrary JSON objects as context: Parse must return a
// config or an error, never panic, and a config it returns must validate.
func FuzzParse(f *testing.F) {
	seed, _ := json.Marshal(base())
	f.Add(seed)
	f.Add([]byte(`{"account":"123456789012","region":"us-east-1","amiId":"ami-01234567","availabilityZones":"us-east-1a,us-east-1b,us-east-1c","availabilityZoneIds":"use1-az4,use1-az5,use1-az6","starFlags":"{\"a\":1}"}`))
	f.Add([]byte(`{"functions":{"settle":{"memoryMiB":1e300}},"starCount":-1}`))
	f.Add([]byte(`{"functions":"not json","drainArgs":[1,2],"starPort":"0x10"}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		var m map[string]any
		if json.Unmarshal(data, &m) != nil {
			return
		}
		c, err := Parse(lookupOf(m))
		if err != nil {
			return
		}
		if verr := c.Validate(); verr != nil {
			t.Fatalf("Parse returned a config that does not validate: %v", verr)
		}
	})
}

// The region table: the regions with three S3 Express zones, each zone ID
// carrying its region's prefix.
func TestExpressZones(t *testing.T) {
	if got := strings.Join(ExpressRegions(), ","); got != "eu-north-1,us-east-1,us-west-2" {
		t.Errorf("regions with three S3 Express zones: %s", got)
	}
	for region, zones := range ExpressZones {
		prefix, ok := ZoneIDPrefixes[region]
		if !ok {
			t.Errorf("%s has no zone ID prefix", region)
		}
		for _, z := range zones {
			if !strings.HasPrefix(z, prefix+"-az") {
				t.Errorf("%s: zone %s lacks the prefix %s", region, z, prefix)
			}
		}
	}
}

// The policy renders as the star's flags, whose environment fallbacks are
// the names the functions read.
func TestPolicyFlags(t *testing.T) {
	var got []string
	for _, f := range DefaultPolicy().Flags() {
		got = append(got, "--"+f.Name+"="+f.Value+" "+EnvName(f.Name))
	}
	want := []string{
		"--settle-trigger-mib=8 STARLOG_SETTLE_TRIGGER_MIB", "--settle-linger=60s STARLOG_SETTLE_LINGER",
		"--settle-express-linger=10s STARLOG_SETTLE_EXPRESS_LINGER", "--settle-age-cap=15m STARLOG_SETTLE_AGE_CAP",
		"--settle-express-age-cap=2m STARLOG_SETTLE_EXPRESS_AGE_CAP", "--settle-output-cap-mib=256 STARLOG_SETTLE_OUTPUT_CAP_MIB",
		"--read-grace=5m STARLOG_READ_GRACE", "--dead-after=30s STARLOG_DEAD_AFTER",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("policy flags\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
