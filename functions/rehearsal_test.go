package functions_test

// The deploy rehearsal (issue 12): the synthesized template, rendered as a
// deploy would resolve it, run for real on this host. The star runs with
// exactly the command line and environment the launch template's user data
// gives its systemd unit, and every auditor function with exactly the
// environment its template resource gives it. The substitutions, all
// listed here and nowhere else:
//
//   - the star: the binary built for this host for /opt/starlog/bin/star,
//     and its working directory a temp dir for /var/lib/starlog (also its
//     HOME, as systemd sets for User=);
//   - the functions: their `bootstrap`s built for this host;
//   - the AWS endpoints: STARLOG_S3_ENDPOINT (S3 and S3 Express: the S3
//     Express stand-in testsvc.StartExpress, serving CreateSession and
//     checking every session-signed request, before versitygw),
//     STARLOG_DYNAMO_ENDPOINT (DynamoDB Local), for the functions also
//     STARLOG_SQS_ENDPOINT (local-aws-sqs);
//   - the instance role's (and the function roles') credentials:
//     AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY, with
//     AWS_EC2_METADATA_DISABLED (there is no IMDS here); for the
//     functions, what the Lambda runtime sets (AWS_REGION, the function
//     name and timeout);
//   - the listen addresses: --listen, --internal-listen and
//     --kafka-listen on loopback ports, and STARLOG_ADDRESS (the internal
//     listen address as peers reach it), so two stars of the same unit
//     share this host;
//   - --kafka-advertise (the load balancer's name and Kafka port): the
//     star's own Kafka listen address, as there is no load balancer here;
//     the step "kafka" reaches each star directly;
//   - STARLOG_RECORD_OPS, for the star and every function a file the
//     operation recorder (shared/awsrecord) appends each AWS call to: the
//     IAM coverage check (iam_coverage_test.go) reads them.
//
// Pseudo parameters come from the assembly manifest (account, region,
// stack name); generated resource names are <stack>-<logical id>
// (rehearse.Template.Name). The instance's metadata is INSTANCE_ID
// i-0rehearsal000000N and LOCAL_IP 127.0.0.1.
//
// It runs when STARLOG_REHEARSAL_ASSEMBLY names a cloud assembly (`make
// rehearsal`, part of `make test`, synthesizes one first); a stale cdk.out
// would rehearse an old stack, so it is never picked up by default.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	dtypes "github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/spf13/pflag"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/starlog/starlog/functions/internal/localsqs"
	"github.com/starlog/starlog/functions/internal/rehearse"
	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/auditjob"
	"github.com/starlog/starlog/shared/auditjob/awsenv"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/shared/settle"
	"github.com/starlog/starlog/shared/testsvc"
	"github.com/starlog/starlog/shared/testsvc/expressfront"
	"github.com/starlog/starlog/shared/testsvc/secretsfront"
	"github.com/starlog/starlog/star/servecmd"
)

// rehearsalTemplate loads the assembly the rehearsal was pointed at.
func rehearsalTemplate(t *testing.T) *rehearse.Template {
	t.Helper()
	dir := os.Getenv("STARLOG_REHEARSAL_ASSEMBLY")
	if dir == "" {
		t.Skip("STARLOG_REHEARSAL_ASSEMBLY is not set: `make rehearsal` synthesizes the stack and runs the rehearsal on it")
	}
	tm, err := rehearse.LoadAssembly(dir)
	if err != nil {
		t.Fatal(err)
	}
	return tm
}

// The auditor functions (the CDK's own custom-resource handlers run on
// Node.js and are not starlog's).
const auditorRuntime = "provided.al2023"

func auditorFunctions(t *testing.T, tm *rehearse.Template) map[string]rehearse.Function {
	t.Helper()
	fns, err := tm.Functions(auditorRuntime)
	if err != nil {
		t.Fatal(err)
	}
	if len(fns) != len(jobs) {
		t.Fatalf("%d auditor functions in the template, want %d (%v)", len(fns), len(jobs), jobs)
	}
	return fns
}

// jobOf is the job folder of a function: its name without "<stack>-".
func jobOf(t *testing.T, tm *rehearse.Template, f rehearse.Function) string {
	t.Helper()
	job, ok := strings.CutPrefix(f.Name, tm.Pseudo.StackName+"-")
	if !ok || !slices.Contains(jobs, job) {
		t.Fatalf("function %s is not <stack>-<job>", f.Name)
	}
	return job
}

// notShared are the settings both the star and the functions read that a
// deploy does not set (local endpoints and keys, the log level): the
// stand-in overrides of the rehearsal itself.
var notShared = []string{"dynamo-endpoint", "s3-endpoint", "s3-path-style", "aws-access-key-id", "aws-secret-access-key", "log-level", "record-ops"}

// regionFallback: a function's S3 and DynamoDB region fall back to
// AWS_REGION, which Lambda sets to the function's region (the stack's).
var regionFallback = []string{"s3-region", "dynamo-region"}

// Issue 12 item 9: what the stars and the functions must agree on comes
// from one source. The settings both read are found, not listed: every
// `star serve` flag whose environment fallback the functions' loader
// (awsenv) reads. Each must be set for the star (flag or unit environment)
// and in every function's environment, with the same value; a setting the
// star is given that a function lacks, or that differs, fails. The check
// also runs on copies of the template with one function's value changed
// and removed, and must fail on them.
func TestRehearsalSharedSettings(t *testing.T) {
	tm := rehearsalTemplate(t)
	shared := sharedSettings()
	for _, want := range []string{"dead-after", "dynamo-table", "express-buckets", "read-grace", "settle-age-cap", "settle-express-age-cap",
		"settle-express-linger", "settle-linger", "settle-output-cap-mib", "settle-trigger-mib", "standard-buckets"} {
		if !slices.Contains(shared, want) {
			t.Errorf("--%s is not a setting the star and the functions share (shared: %v)", want, shared)
		}
	}
	problems := disagreements(t, tm, shared)
	for _, p := range problems {
		t.Error(p)
	}
	if len(problems) == 0 {
		t.Logf("%d settings agree between the star and %d functions: %v", len(shared), len(auditorFunctions(t, tm)), shared)
	}

	// The check itself: a changed and a missing value in one function.
	for name, mutate := range map[string]func(vars map[string]any){
		"differs": func(vars map[string]any) { vars["STARLOG_SETTLE_EXPRESS_LINGER"] = "11s" },
		"missing": func(vars map[string]any) { delete(vars, "STARLOG_DEAD_AFTER") },
	} {
		bad := *tm
		bad.Resources = maps.Clone(tm.Resources)
		id := auditorFunctions(t, tm)[tm.Pseudo.StackName+"-janitor"].LogicalID
		res := bad.Resources[id]
		res.Properties = maps.Clone(res.Properties)
		env := maps.Clone(res.Properties["Environment"].(map[string]any))
		vars := maps.Clone(env["Variables"].(map[string]any))
		mutate(vars)
		env["Variables"] = vars
		res.Properties["Environment"] = env
		bad.Resources[id] = res
		if got := disagreements(t, &bad, shared); len(got) != 1 || !strings.Contains(got[0], tm.Pseudo.StackName+"-janitor") {
			t.Errorf("a janitor whose value %s: the check found %q, want one disagreement", name, got)
		}
	}
}

// sharedSettings are the `star serve` flags whose environment fallbacks
// the functions read, less the stand-in overrides.
func sharedSettings() []string {
	read := map[string]bool{}
	awsenv.Parse(func(name string) (string, bool) { read[name] = true; return "", false })
	var shared []string
	servecmd.Serve().Flags().VisitAll(func(f *pflag.Flag) {
		if read[servecmd.EnvName(f.Name)] && !slices.Contains(notShared, f.Name) {
			shared = append(shared, f.Name)
		}
	})
	slices.Sort(shared)
	return shared
}

// disagreements lists every shared setting the star is not given, or that
// a function lacks or has another value of.
func disagreements(t *testing.T, tm *rehearse.Template, shared []string) []string {
	t.Helper()
	script, err := tm.UserData()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rehearse.ServiceRunning(script, "serve")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	argv, starEnv, err := svc.Instance(map[string]string{"INSTANCE_ID": "i-0rehearsal0000001", "LOCAL_IP": "127.0.0.1"})
	if err != nil {
		out = append(out, fmt.Sprintf("the star's instance environment: %v", err))
		argv, starEnv = svc.Argv, svc.Env
	}
	flags := rehearse.Flags(argv)
	fns := auditorFunctions(t, tm)
	for _, flag := range shared {
		env := servecmd.EnvName(flag)
		starVal, onStar := flags[flag]
		if !onStar {
			starVal, onStar = rehearse.Lookup(starEnv, env)
		}
		if !onStar {
			out = append(out, fmt.Sprintf("the star is not given --%s (%s): it would run on its default, and the functions on theirs", flag, env))
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(fns)) {
			v, ok := fns[name].Env[env]
			if !ok && slices.Contains(regionFallback, flag) {
				v, ok = tm.Pseudo.Region, true
			}
			switch {
			case !ok:
				out = append(out, fmt.Sprintf("%s lacks %s: the star has --%s=%s", name, env, flag, starVal))
			case v != starVal:
				out = append(out, fmt.Sprintf("%s has %s=%s, the star --%s=%s", name, env, v, flag, starVal))
			}
		}
	}
	return out
}

// rehearsal is the stand-ins and what the template says about them.
type rehearsal struct {
	t       *testing.T
	tm      *rehearse.Template
	svc     *rehearse.Service
	starBin string
	home    string
	v       testsvc.VersityServer
	express testsvc.ExpressServer
	secrets *secretsfront.Front
	// secretsURL serves secrets (the stack's Secrets Manager).
	secretsURL string
	ddb        testsvc.DynamoServer
	sqs        *localsqs.Server
	queues     map[string]*localsqs.Queue // by queue name
	dirs       []string                   // directory bucket names
	opsDir     string                     // the operation records, <component>.jsonl
}

// buildHostStar builds the star for this host (as star/servecmd's tests
// do, so the build cache serves both).
func buildHostStar(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "star")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/starlog/starlog/star").CombinedOutput(); err != nil {
		t.Fatalf("go build star: %v\n%s", err, out)
	}
	return bin
}

// standIns creates what the stack's create would: the buckets (the
// Standard bucket and the directory buckets, by their rendered names), the
// table with its key schema, the queues with their redrive.
func (r *rehearsal) standIns() {
	t, tm := r.t, r.tm
	std, err := tm.Names("AWS::S3::Bucket")
	if err != nil {
		t.Fatal(err)
	}
	if r.dirs, err = tm.Names("AWS::S3Express::DirectoryBucket"); err != nil {
		t.Fatal(err)
	}
	if len(r.dirs) != 3 {
		t.Fatalf("%d directory buckets, want 3", len(r.dirs))
	}
	r.v = testsvc.StartVersity(t, append(std, r.dirs...)...)
	r.express = testsvc.StartExpress(t, r.v)
	r.startSecrets()

	r.ddb = dyn.Get(t)
	tables, err := tm.Tables()
	if err != nil {
		t.Fatal(err)
	}
	dc := testsvc.DynamoClient(r.ddb.Endpoint)
	for _, tb := range tables {
		in := &dynamodb.CreateTableInput{TableName: aws.String(tb.Name), BillingMode: dtypes.BillingModePayPerRequest}
		for _, a := range tb.AttributeDefinitions {
			in.AttributeDefinitions = append(in.AttributeDefinitions, dtypes.AttributeDefinition{
				AttributeName: aws.String(a["AttributeName"]), AttributeType: dtypes.ScalarAttributeType(a["AttributeType"])})
		}
		for _, k := range tb.KeySchema {
			in.KeySchema = append(in.KeySchema, dtypes.KeySchemaElement{AttributeName: aws.String(k["AttributeName"]), KeyType: dtypes.KeyType(k["KeyType"])})
		}
		if _, err := dc.CreateTable(context.Background(), in); err != nil {
			t.Fatalf("create table %s: %v", tb.Name, err)
		}
	}

	r.sqs = localsqs.Start(t)
	qs, err := tm.Queues()
	if err != nil {
		t.Fatal(err)
	}
	r.queues = map[string]*localsqs.Queue{}
	// Dead-letter queues first: the others' redrive names them.
	slices.SortFunc(qs, func(a, b rehearse.Queue) int { return strings.Compare(a.DeadLetter, b.DeadLetter) })
	for _, q := range qs {
		attrs := map[string]string{}
		if q.DeadLetter != "" {
			dlq, ok := r.queues[q.DeadLetter]
			if !ok {
				t.Fatalf("queue %s redrives to %s, not created", q.Name, q.DeadLetter)
			}
			policy, _ := json.Marshal(map[string]any{"deadLetterTargetArn": dlq.ARN, "maxReceiveCount": q.MaxReceiveCount})
			attrs["RedrivePolicy"] = string(policy)
		}
		r.queues[q.Name] = r.sqs.CreateQueue(t, q.Name, time.Duration(q.VisibilitySeconds)*time.Second, attrs)
	}
}

// startSecrets serves the template's secrets (Secrets Manager stand-in),
// readable with the instance role's keys only (the star policy's grant is
// checked by the IAM coverage step against what the star read).
func (r *rehearsal) startSecrets() {
	t := r.t
	ids := r.tm.OfType("AWS::SecretsManager::Secret")
	var secrets []secretsfront.Secret
	var arns []string
	for _, id := range ids {
		arn, err := r.tm.Name(id)
		if err != nil {
			t.Fatal(err)
		}
		var v string
		switch {
		case strings.HasPrefix(id, "AdminToken"):
			v = rehearsalAdminToken
		case strings.HasPrefix(id, "InternalKey"):
			v = rehearsalInternalKey
		default:
			t.Fatalf("secret %s: the rehearsal does not know what it holds", id)
		}
		secrets = append(secrets, secretsfront.Secret{ARN: arn, Name: id, Value: v})
		arns = append(arns, arn)
	}
	if len(secrets) != 2 {
		t.Fatalf("secrets %v: want the admin token and the internal key", ids)
	}
	f, err := secretsfront.New(secretsfront.Config{
		Region: r.tm.Pseudo.Region, Secrets: secrets,
		Principals: []secretsfront.Principal{{AccessKey: r.express.AccessKey, SecretKey: r.express.SecretKey, Readable: arns}},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	r.secrets, r.secretsURL = f, srv.URL
}

// star is one `star serve` started from the unit.
type star struct {
	id, public, internal string
	kafka                string // host:port of its Kafka listener
	cmd                  *exec.Cmd
	log                  *lockedBuffer
	done                 chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 4<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.b.String()
	if len(s) > 6000 {
		s = "…" + s[len(s)-6000:]
	}
	return s
}

// startStar runs the unit's command line with the unit's environment on
// instance n, with the substitutions above only.
func (r *rehearsal) startStar(n int) *star {
	t := r.t
	t.Helper()
	vars := map[string]string{"INSTANCE_ID": fmt.Sprintf("i-0rehearsal%07d", n), "LOCAL_IP": "127.0.0.1"}
	argv, env, err := r.svc.Instance(vars)
	if err != nil {
		t.Fatal(err)
	}
	s := &star{id: vars["INSTANCE_ID"], log: &lockedBuffer{}, done: make(chan struct{})}
	pub, in := testsvc.Addr(testsvc.FreePort(t)), testsvc.Addr(testsvc.FreePort(t))
	var internalPort string
	argv, err = rehearse.Replace(argv, "listen", func(string) string { return pub })
	if err == nil {
		argv, err = rehearse.Replace(argv, "internal-listen", func(old string) string { internalPort = old; return in })
	}
	if err != nil {
		t.Fatal(err)
	}
	kafka := testsvc.Addr(testsvc.FreePort(t))
	var kafkaPort string
	if argv, err = rehearse.Replace(argv, "kafka-listen", func(old string) string { kafkaPort = old; return kafka }); err != nil {
		t.Fatal(err)
	}
	if argv, err = rehearse.Replace(argv, "kafka-advertise", func(old string) string {
		if !strings.HasSuffix(old, kafkaPort) || len(old) == len(kafkaPort) {
			t.Fatalf("the unit advertises Kafka at %q, not the load balancer's name on the Kafka port %s", old, kafkaPort)
		}
		return kafka
	}); err != nil {
		t.Fatal(err)
	}
	s.kafka = kafka
	if addr, _ := rehearse.Lookup(env, "STARLOG_ADDRESS"); addr != "127.0.0.1"+internalPort {
		t.Fatalf("the unit advertises %q, not the internal listen address 127.0.0.1%s", addr, internalPort)
	}
	env = rehearse.MergeEnv(env, []string{
		"STARLOG_ADDRESS=" + in,
		"STARLOG_S3_ENDPOINT=" + r.express.PathEndpoint,
		"STARLOG_DYNAMO_ENDPOINT=" + r.ddb.Endpoint,
		"AWS_ACCESS_KEY_ID=" + r.express.AccessKey,
		"AWS_SECRET_ACCESS_KEY=" + r.express.SecretKey,
		"AWS_EC2_METADATA_DISABLED=true",
		"STARLOG_RECORD_OPS=" + r.opsFile(starComponent),
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin",
		"HOME=" + r.home, "USER=starlog", "LOGNAME=starlog",
		// The unit names both credentials by their secrets' ARNs.
		"AWS_ENDPOINT_URL_SECRETS_MANAGER=" + r.secretsURL,
	})
	s.public, s.internal = "http://"+pub, "http://"+in
	s.cmd = exec.Command(r.starBin, argv[1:]...)
	s.cmd.Env = env
	s.cmd.Dir = r.home
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.cmd.Wait(); close(s.done) }()
	t.Cleanup(func() { s.kill9() })
	t.Logf("star %s: %s %s", s.id, filepath.Base(r.starBin), strings.Join(argv[1:], " "))
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-s.done:
			t.Fatalf("star %s exited before it was healthy: %v\n%s", s.id, s.cmd.ProcessState, s.log)
		default:
		}
		if status, _, err := s.call("GET", "/health", ""); err == nil && status == 200 {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("star %s not healthy after 90 s\n%s", s.id, s.log)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (s *star) kill9() {
	select {
	case <-s.done:
		return
	default:
	}
	syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
}

const rehearsalBasin = "starlog-rehearsal"

var apiClient = &http.Client{Timeout: 60 * time.Second}

// The values of the stack's two secrets in the rehearsal (CloudFormation
// generates them on AWS).
const (
	rehearsalAdminToken  = "rehearsal-admin-token-0123456789"
	rehearsalInternalKey = "rehearsal-internal-key-0123456789abcdef"
)

func (s *star) call(method, path, body string) (int, []byte, error) {
	req, err := http.NewRequest(method, s.public+path, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("s2-basin", rehearsalBasin)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+rehearsalAdminToken)
	res, err := apiClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	return res.StatusCode, b, err
}

// acks maps each stream's acknowledged seq nums to their bodies.
type acks map[string]map[uint64]string

// appendBatch appends bodies to stream through s and records the ack.
func (a acks) appendBatch(s *star, stream string, bodies []string) (int, []byte, error) {
	recs := make([]map[string]string, len(bodies))
	for i, b := range bodies {
		recs[i] = map[string]string{"body": b}
	}
	body, _ := json.Marshal(map[string]any{"records": recs})
	status, out, err := s.call("POST", "/v1/streams/"+stream+"/records", string(body))
	if err != nil || status != 200 {
		return status, out, err
	}
	ack, aerr := api.DecodeAppendAckJSON(out)
	if aerr != nil {
		return status, out, aerr
	}
	if a[stream] == nil {
		a[stream] = map[uint64]string{}
	}
	for i, b := range bodies {
		a[stream][ack.Start.SeqNum+uint64(i)] = b
	}
	return status, out, nil
}

// checkReadBack reads every stream back through s and compares.
func (a acks) checkReadBack(t *testing.T, s *star) {
	t.Helper()
	for stream, want := range a {
		status, out, err := s.call("GET", "/v1/streams/"+stream+"/records/tail", "")
		if err != nil || status != 200 {
			t.Fatalf("tail of %s through %s: %d %s %v", stream, s.id, status, out, err)
		}
		tail, terr := api.DecodeTailJSON(out)
		if terr != nil {
			t.Fatal(terr)
		}
		got := map[uint64]string{}
		for next := uint64(0); next < tail.SeqNum; {
			status, out, err := s.call("GET", fmt.Sprintf("/v1/streams/%s/records?seq_num=%d", stream, next), "")
			if err != nil || status != 200 {
				t.Fatalf("read %s at %d through %s: %d %.300s %v", stream, next, s.id, status, out, err)
			}
			b, berr := api.DecodeReadBatchJSON(out, api.FormatRaw)
			if berr != nil || len(b.Records) == 0 {
				t.Fatalf("read %s at %d: %v %.300s", stream, next, berr, out)
			}
			for _, rec := range b.Records {
				got[rec.SeqNum] = string(rec.Body)
				next = rec.SeqNum + 1
			}
		}
		for seq, body := range want {
			if got[seq] != body {
				t.Fatalf("%s: acknowledged seq %d reads back through %s as %.40q, want %.40q (tail %d)", stream, seq, s.id, got[seq], body, tail.SeqNum)
			}
		}
		t.Logf("%s: %d acknowledged records read back through %s (tail %d)", stream, len(want), s.id, tail.SeqNum)
	}
}

// functionEnv is a function's environment as the template gives it, plus
// the endpoint overrides and what the Lambda runtime sets.
func (r *rehearsal) functionEnv(f rehearse.Function) []string {
	env := make([]string, 0, len(f.Env)+8)
	for k, v := range f.Env {
		env = append(env, k+"="+v)
	}
	// The settle role may open only ReadOnly Express sessions (its grant).
	ak, sk := r.express.AccessKey, r.express.SecretKey
	if jobOf(r.t, r.tm, f) == "settle" {
		ak, sk = r.express.ReadOnlyAccessKey, r.express.ReadOnlySecretKey
	}
	return rehearse.MergeEnv(env, []string{
		awsenv.EnvS3Endpoint + "=" + r.express.PathEndpoint,
		awsenv.EnvDynamoEndpoint + "=" + r.ddb.Endpoint,
		awsenv.EnvSQSEndpoint + "=" + r.sqs.Endpoint,
		"AWS_REGION=" + r.tm.Pseudo.Region,
		"AWS_ACCESS_KEY_ID=" + ak,
		"AWS_SECRET_ACCESS_KEY=" + sk,
		"AWS_EC2_METADATA_DISABLED=true",
		"AWS_LAMBDA_FUNCTION_NAME=" + f.Name,
		awsenv.EnvRecordOps + "=" + r.opsFile(jobOf(r.t, r.tm, f)),
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=" + r.home,
	})
}

// mapping is a queue's event source mapping: its function and batch size.
type mapping struct {
	queue     *localsqs.Queue
	function  string
	batchSize int
}

func (r *rehearsal) mappings() map[string]mapping {
	t, tm := r.t, r.tm
	out := map[string]mapping{}
	for _, id := range tm.OfType("AWS::Lambda::EventSourceMapping") {
		p := tm.Resources[id].Properties
		arn, err := tm.Render(p["EventSourceArn"])
		if err != nil {
			t.Fatal(err)
		}
		fn, err := tm.Render(p["FunctionName"])
		if err != nil {
			t.Fatal(err)
		}
		q := r.queues[arn[strings.LastIndexByte(arn, ':')+1:]]
		if q == nil {
			t.Fatalf("mapping %s reads %s, not a queue of the template", id, arn)
		}
		n, _ := p["BatchSize"].(float64)
		out[fn] = mapping{queue: q, function: fn, batchSize: max(int(n), 1)}
	}
	return out
}

// The rehearsal. Star: the unit's command line and environment start a
// star that becomes healthy; an append to a Standard and to an Express
// stream round-trips; a second star of the same unit takes over after a
// kill -9 of the first. Lambdas: each function, under the emulator with
// the template's environment, does one real job: janitor finds the dead
// star and chain-settle settles its chains (before the takeover, so there
// is something to settle), plan finds the ripe Express era, settle settles
// it, trim advances the chain's cursors.
func TestRehearsal(t *testing.T) {
	tm := rehearsalTemplate(t)
	t0 := time.Now()
	script, err := tm.UserData()
	if err != nil {
		t.Fatal(err)
	}
	svc, err := rehearse.ServiceRunning(script, "serve")
	if err != nil {
		t.Fatal(err)
	}
	r := &rehearsal{t: t, tm: tm, svc: svc, home: t.TempDir(), opsDir: t.TempDir()}
	var wg sync.WaitGroup
	var buildErr error
	wg.Go(func() { _, buildErr = buildFunctions() })
	r.starBin = buildHostStar(t)
	r.standIns()
	fns := auditorFunctions(t, tm)
	byJob := map[string]rehearse.Function{}
	for _, f := range fns {
		byJob[jobOf(t, tm, f)] = f
	}
	feeds := r.mappings()
	ctx := context.Background()
	// Each step needs the one before it.
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}

	// Star 1: healthy, then both classes round-trip.
	a := acks{}
	s1 := r.startStar(1)
	t.Logf("star 1 healthy %v after the start", time.Since(t0).Round(time.Millisecond))
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/basins", `{"basin":"` + rehearsalBasin + `"}`},
		{"POST", "/v1/streams", `{"stream":"std","config":{"storage_class":"standard"}}`},
		{"POST", "/v1/streams", `{"stream":"exp","config":{"storage_class":"express"}}`},
	} {
		if status, out, err := s1.call(c.method, c.path, c.body); err != nil || status != 201 {
			t.Fatalf("%s %s: %d %s %v\n%s", c.method, c.path, status, out, err, s1.log)
		}
	}
	for _, stream := range []string{"std", "exp"} {
		if status, out, err := a.appendBatch(s1, stream, []string{stream + "-first", stream + "-second"}); err != nil || status != 200 {
			t.Fatalf("append to %s: %d %s %v\n%s", stream, status, out, err, s1.log)
		}
	}
	a.checkReadBack(t, s1)
	// More than the settle trigger on the Express stream: its crossing
	// marker ripens at the Express linger, so plan has an era to settle.
	trigger := 8 << 20
	if v, ok := rehearse.Flag(svc.Argv, "settle-trigger-mib"); ok {
		fmt.Sscan(v, &trigger)
		trigger <<= 20
	}
	body := strings.Repeat("x", 10000)
	for i := 0; i*100*len(body) <= trigger+len(body)*100; i++ {
		bodies := make([]string, 100)
		for j := range bodies {
			bodies[j] = fmt.Sprintf("exp-%04d-%03d-", i, j) + body
		}
		if status, out, err := a.appendBatch(s1, "exp", bodies); err != nil || status != 200 {
			t.Fatalf("bulk append to exp: %d %.300s %v", status, out, err)
		}
	}
	st := r.express.Front.Stats()
	for _, d := range r.dirs {
		if st.SessionsByBucket[d] == 0 {
			t.Fatalf("directory bucket %s: no session: the Express stream did not go through S3 Express (%+v)", d, st)
		}
	}
	if st.Sessions[expressfront.ReadWrite] == 0 || len(st.Refused) > 0 {
		t.Fatalf("the star's Express sessions: %+v (want ReadWrite sessions and no refusal)", st)
	}
	t.Logf("star 1: Standard and Express round-trips and %d Express records written %v after the start", len(a["exp"]), time.Since(t0).Round(time.Millisecond))

	// Star 2 from the same unit; Kafka through both; then kill -9 of star 1.
	s2 := r.startStar(2)
	step("kafka", func(t *testing.T) { rehearseKafka(t, s1, s2) })
	s1.kill9()
	killed := time.Now()
	wg.Wait()
	if buildErr != nil {
		t.Fatal(buildErr)
	}

	// janitor and chain-settle, before star 2 takes over: the janitor
	// finds star 1 dead once its heartbeat is older than dead-after and
	// queues chain-settle jobs for its chains.
	csQueue := feeds[byJob["chain-settle"].Name].queue
	step("janitor", func(t *testing.T) {
		f := byJob["janitor"]
		rie := startRIETimeout(t, "janitor", r.functionEnv(f), 60)
		defer rie.stop()
		for {
			rie.invokeOK(t, scheduledEvent(f.Name))
			bodies, err := r.sqs.Peek(ctx, csQueue)
			if err != nil {
				t.Fatal(err)
			}
			if len(bodies) > 0 {
				t.Logf("janitor: star 1 dead %v after its kill -9; queued %q", time.Since(killed).Round(time.Second), bodies)
				for _, b := range bodies {
					if j, err := auditjob.Parse([]byte(b)); err != nil || j.Chain.Star != s1.id {
						t.Fatalf("chain-settle job %s: %v", b, err)
					}
				}
				return
			}
			if time.Since(killed) > 90*time.Second {
				t.Fatalf("janitor queued no chain-settle job for the killed star within 90 s")
			}
			time.Sleep(2 * time.Second)
		}
	})
	step("chain-settle", func(t *testing.T) {
		deliverRIE(t, r, byJob["chain-settle"], feeds, 1)
		// Nothing is left for the janitor to find.
		f := byJob["janitor"]
		rie := startRIETimeout(t, "janitor", r.functionEnv(f), 60)
		rie.invokeOK(t, scheduledEvent(f.Name))
		rie.stop()
		if bodies, _ := r.sqs.Peek(ctx, csQueue); len(bodies) != 0 {
			t.Fatalf("after chain-settle the janitor still queues %q", bodies)
		}
	})

	// Star 2 takes both streams over; every acknowledged record reads
	// back through it.
	for _, stream := range []string{"std", "exp"} {
		deadline := time.Now().Add(60 * time.Second)
		for {
			status, out, err := a.appendBatch(s2, stream, []string{stream + "-after-takeover"})
			if err == nil && status == 200 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("star 2 did not take %s over: %d %s %v\n%s", stream, status, out, err, s2.log)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	a.checkReadBack(t, s2)
	t.Logf("star 2 took over %v after the kill -9 of star 1", time.Since(killed).Round(time.Millisecond))

	settleQueue := feeds[byJob["settle"].Name].queue
	trimQueue := feeds[byJob["trim"].Name].queue
	step("plan", func(t *testing.T) {
		f := byJob["plan"]
		rie := startRIETimeout(t, "plan", r.functionEnv(f), 60)
		defer rie.stop()
		deadline := time.Now().Add(60 * time.Second)
		for {
			rie.invokeOK(t, scheduledEvent(f.Name))
			bodies, err := r.sqs.Peek(ctx, settleQueue)
			if err != nil {
				t.Fatal(err)
			}
			if len(bodies) > 0 {
				t.Logf("plan queued %d settle jobs", len(bodies))
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("plan found no ripe era within 60 s")
			}
			time.Sleep(2 * time.Second)
		}
	})
	step("settle", func(t *testing.T) {
		deliverRIE(t, r, byJob["settle"], feeds, 1)
	})
	step("trim", func(t *testing.T) {
		// Plan again: resolved markers make the chain's slots retirable.
		f := byJob["plan"]
		rie := startRIETimeout(t, "plan", r.functionEnv(f), 60)
		rie.invokeOK(t, scheduledEvent(f.Name))
		rie.stop()
		if bodies, _ := r.sqs.Peek(ctx, trimQueue); len(bodies) == 0 {
			// A trim-check is due anyway: send one for the Express chain.
			j := auditjob.FromSettle(settle.Job{Kind: settle.KindTrim, Chain: settle.ChainRef{Star: s1.id, Class: meta.Express}})
			if _, err := r.sqs.Client.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: aws.String(trimQueue.URL), MessageBody: aws.String(string(j.Marshal()))}); err != nil {
				t.Fatal(err)
			}
			t.Logf("plan queued no trim job; sent %s", j)
		}
		deliverRIE(t, r, byJob["trim"], feeds, 1)
	})
	a.checkReadBack(t, s2)
	s2.kill9() // its last calls are recorded before the check reads them
	step("iam-coverage", r.iamCoverage)
	if st := r.secrets.Stats(); len(st.Reads) != 2 || len(st.Refused) > 0 {
		t.Errorf("secret reads %v, refused %v: want both secrets read by the star role, nothing refused", st.Reads, st.Refused)
	} else {
		t.Logf("secrets read from the Secrets Manager stand-in: %v", st.Reads)
	}
	if st := r.express.Front.Stats(); st.Sessions[expressfront.ReadOnly] == 0 || len(st.Refused) > 0 {
		t.Errorf("Express sessions over the rehearsal: %+v (want the settle role's ReadOnly sessions and no refusal)", st)
	} else {
		t.Logf("Express sessions: %d ReadWrite, %d ReadOnly; nothing refused (%d requests cut off by the kill -9)", st.Sessions[expressfront.ReadWrite], st.Sessions[expressfront.ReadOnly], st.Aborted)
	}
	t.Logf("rehearsal done in %v", time.Since(t0).Round(time.Millisecond))
}

// deliverRIE runs f under the emulator and plays its event source mapping
// until its queue is empty: at least min messages, none failed.
func deliverRIE(t *testing.T, r *rehearsal, f rehearse.Function, feeds map[string]mapping, min int) {
	t.Helper()
	m, ok := feeds[f.Name]
	if !ok {
		t.Fatalf("no event source mapping feeds %s", f.Name)
	}
	timeout, _ := r.tm.Resources[f.LogicalID].Properties["Timeout"].(float64)
	rie := startRIETimeout(t, jobOf(t, r.tm, f), r.functionEnv(f), int(timeout))
	defer rie.stop()
	bodies := deliverAll(t, r.sqs, m.queue, m.batchSize, rie.sqsHandler(t))
	if len(bodies) < min {
		t.Fatalf("%s delivered %d messages, want at least %d", f.Name, len(bodies), min)
	}
	for _, line := range strings.Split(rie.proc.Output(), "\n") {
		if strings.Contains(line, `"msg":"job done"`) {
			t.Logf("%s: %.300s", f.Name, line)
		}
	}
	t.Logf("%s: %d jobs done: %q", f.Name, len(bodies), bodies)
}

// The user data the template renders is valid bash, and its systemd units
// restart forever and are what systemd (systemd-analyze verify) takes
// without a word.
func TestRehearsalUserDataVerifies(t *testing.T) {
	tm := rehearsalTemplate(t)
	script, err := tm.UserData()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	f := filepath.Join(dir, "user-data")
	if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("bash", "-n", f).CombinedOutput(); err != nil {
		t.Errorf("bash -n user data: %v\n%s", err, out)
	}
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not on PATH")
	}
	docs, err := rehearse.Heredocs(script)
	if err != nil {
		t.Fatal(err)
	}
	units := 0
	for path, h := range docs {
		if !strings.HasPrefix(path, "/etc/systemd/system/") {
			continue
		}
		units++
		u, err := rehearse.ParseUnit(h.Body)
		if err != nil {
			t.Fatal(err)
		}
		// Issue 12 item 6: systemd never gives up restarting it.
		if v := u.Values("Unit", "StartLimitIntervalSec"); !slices.Equal(v, []string{"0"}) {
			t.Errorf("%s: StartLimitIntervalSec=%v: systemd gives up after 5 starts in 10 s", path, v)
		}
		if v := u.Values("Service", "Restart"); len(v) != 1 || (v[0] != "always" && v[0] != "on-failure") {
			t.Errorf("%s: Restart=%v", path, v)
		}
		// verify checks that the command exists: give it one.
		body := h.Body
		argv, err := u.ExecStart()
		if err != nil {
			t.Fatal(err)
		}
		fake := filepath.Join(dir, filepath.Base(argv[0]))
		if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		body = strings.Replace(body, "ExecStart="+argv[0], "ExecStart="+fake, 1)
		p := filepath.Join(dir, filepath.Base(path))
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(analyze, "verify", "--man=no", p).CombinedOutput(); err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", path, err, out)
		}
	}
	if units < 2 {
		t.Errorf("%d systemd units in the user data, want the star's and the drain watcher's", units)
	}
}

// rehearseKafka: the unit's Kafka flags serve the protocol on both stars,
// authenticated with the stack's admin token (SASL/PLAIN): a topic is
// created and produced to through star 1, which leads its partition;
// star 2 appends to it at star 1 (forwarding with the internal key the
// unit reads from Secrets Manager) and reads it all back. The stack's load
// balancer has no stand-in here: each star is reached directly, under its
// own address (docs/kafka.md, "Many stars").
func rehearseKafka(t *testing.T, s1, s2 *star) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	client := func(s *star, opts ...kgo.Opt) *kgo.Client {
		c, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(s.kafka), kgo.RetryTimeout(20 * time.Second),
			kgo.SASL(plain.Auth{User: "rehearsal", Pass: rehearsalAdminToken}.AsMechanism())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c
	}
	c1 := client(s1)
	req := kmsg.NewPtrCreateTopicsRequest()
	req.Topics = []kmsg.CreateTopicsRequestTopic{{Topic: "rehearsal", NumPartitions: 1, ReplicationFactor: -1}}
	resp, err := req.RequestWith(ctx, c1)
	if err != nil || resp.Topics[0].ErrorCode != 0 {
		t.Fatalf("CreateTopics through star 1: %v %+v\n%s", err, resp, s1.log)
	}
	if err := c1.ProduceSync(ctx, &kgo.Record{Topic: "rehearsal", Key: []byte("k1"), Value: []byte("through star 1")}).FirstErr(); err != nil {
		t.Fatalf("produce through star 1: %v\n%s", err, s1.log)
	}
	if err := client(s2).ProduceSync(ctx, &kgo.Record{Topic: "rehearsal", Key: []byte("k2"), Value: []byte("through star 2")}).FirstErr(); err != nil {
		t.Fatalf("produce through star 2 (forwarded to star 1): %v\n%s", err, s2.log)
	}
	cons := client(s2, kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"rehearsal": {0: kgo.NewOffset().AtStart()}}))
	var got []string
	for len(got) < 2 {
		fs := cons.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			t.Fatalf("consume through star 2: %v\n%s", err, s2.log)
		}
		for _, r := range fs.Records() {
			got = append(got, fmt.Sprintf("%d %s=%s", r.Offset, r.Key, r.Value))
		}
	}
	if want := []string{"0 k1=through star 1", "1 k2=through star 2"}; !slices.Equal(got, want) {
		t.Fatalf("consumed through star 2: %q, want %q", got, want)
	}
	t.Logf("kafka: produced through both stars, consumed through star 2: %q", got)
}
