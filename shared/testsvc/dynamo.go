package testsvc

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
)

// DynamoEndpointEnv names an already running DynamoDB-compatible server
// (DynamoDB Local, dynalite) to use instead of starting one (make test's
// root lane sets it). Not STARLOG_DYNAMO_ENDPOINT: that is star's
// --dynamo-endpoint and the functions' override, which the stars and
// functions the tests start would inherit.
const DynamoEndpointEnv = "STARLOG_TEST_DYNAMO_ENDPOINT"

// The static credentials and region DynamoDB Local is spoken to with: it
// accepts any, and tests must never pick up real AWS credentials.
const (
	DynamoRegion    = "us-east-1"
	DynamoAccessKey = "starlogtest"
	DynamoSecretKey = "starlogtest"
)

// dynamoStartTimeout bounds the JVM start: 3–4 s on an idle machine, over
// 20 s seen on a loaded 2-core one.
const dynamoStartTimeout = 2 * time.Minute

// DynamoServer is a DynamoDB-compatible endpoint for tests.
type DynamoServer struct {
	Endpoint string // http://127.0.0.1:<port>
}

// tableSeq makes table names unique within a test process; the pid makes
// them unique across processes sharing one STARLOG_TEST_DYNAMO_ENDPOINT.
var tableSeq atomic.Uint64

var tableNameUnsafe = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)

// TableName returns a table name no other test uses, derived from the
// test's name so a failing test's table is recognisable.
func (s DynamoServer) TableName(tb testing.TB) string {
	base := tableNameUnsafe.ReplaceAllString(tb.Name(), "_")
	if len(base) > 150 {
		base = base[len(base)-150:]
	}
	return fmt.Sprintf("t%d_%d_%s", os.Getpid(), tableSeq.Add(1), base)
}

// StartDynamo returns a DynamoDB Local for tb: the server named by
// STARLOG_TEST_DYNAMO_ENDPOINT if set, else a fresh one stopped when tb ends.
// Packages with many tests should start one in TestMain (StartDynamoMain)
// instead: each start costs seconds and ~210 MB.
func StartDynamo(tb testing.TB) DynamoServer {
	tb.Helper()
	if ep := os.Getenv(DynamoEndpointEnv); ep != "" {
		return DynamoServer{Endpoint: ep}
	}
	cmd, err := dynamoCommand(NodeToolsDir(tb), FreePort(tb))
	if err != nil {
		tb.Fatalf("testsvc: %v", err)
	}
	p := Start(tb, "DynamoDB Local", cmd.Cmd)
	srv := DynamoServer{Endpoint: "http://" + Addr(cmd.port)}
	if err := waitDynamo(srv.Endpoint, p.done, dynamoStartTimeout); err != nil {
		tb.Fatalf("testsvc: %v\n%s", err, p.Output())
	}
	return srv
}

// StartDynamoMain is StartDynamo without a testing.TB, for TestMain (see
// SharedDynamo for the usual pattern). stop ends the server (a no-op for
// STARLOG_TEST_DYNAMO_ENDPOINT). A missing jar or java is an error telling to
// run `make tools`: callers fail, never skip.
func StartDynamoMain() (DynamoServer, func(), error) {
	if ep := os.Getenv(DynamoEndpointEnv); ep != "" {
		return DynamoServer{Endpoint: ep}, func() {}, nil
	}
	nodeTools, err := nodeToolsDir()
	if err != nil {
		return DynamoServer{}, nil, fmt.Errorf("testsvc: %w", err)
	}
	port, err := freePort()
	if err != nil {
		return DynamoServer{}, nil, fmt.Errorf("testsvc: %w", err)
	}
	cmd, err := dynamoCommand(nodeTools, port)
	if err != nil {
		return DynamoServer{}, nil, fmt.Errorf("testsvc: %w", err)
	}
	out := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return DynamoServer{}, nil, fmt.Errorf("testsvc: start DynamoDB Local: %w", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	stop := func() {
		select {
		case <-done:
			return
		default:
		}
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-done
		}
	}
	srv := DynamoServer{Endpoint: "http://" + Addr(port)}
	if err := waitDynamo(srv.Endpoint, done, dynamoStartTimeout); err != nil {
		stop()
		return DynamoServer{}, nil, fmt.Errorf("testsvc: %w\n%s", err, out.String())
	}
	return srv, stop, nil
}

// SharedDynamo starts one DynamoDB Local for a whole test package, on first
// use, so tests that do not need it (unit tests, fuzz targets) never wait
// for it:
//
//	var dynamo testsvc.SharedDynamo
//
//	func TestMain(m *testing.M) {
//		code := m.Run()
//		dynamo.Stop()
//		os.Exit(code)
//	}
//
//	func TestX(t *testing.T) { srv := dynamo.Get(t); … }
type SharedDynamo struct {
	once sync.Once
	srv  DynamoServer
	stop func()
	err  error
}

// Get starts the server if this is the first call and returns it; a
// server that cannot start fails tb (every later caller too).
func (s *SharedDynamo) Get(tb testing.TB) DynamoServer {
	tb.Helper()
	s.once.Do(func() { s.srv, s.stop, s.err = StartDynamoMain() })
	if s.err != nil {
		tb.Fatal(s.err)
	}
	return s.srv
}

// Stop ends the server if Get started one.
func (s *SharedDynamo) Stop() {
	if s.stop != nil {
		s.stop()
	}
}

type dynamoCmd struct {
	*exec.Cmd
	port int
}

// dynamoCommand builds the DynamoDB Local command line from the jar that the
// npm package amplify-dynamodb-simulator ships (installed by `make tools`).
func dynamoCommand(nodeTools string, port int) (dynamoCmd, error) {
	emulator := filepath.Join(nodeTools, "amplify-dynamodb-simulator", "emulator")
	jar := filepath.Join(emulator, "DynamoDBLocal.jar")
	if _, err := os.Stat(jar); err != nil {
		return dynamoCmd{}, fmt.Errorf("DynamoDB Local not installed at %s (run `make tools`): %w", jar, err)
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return dynamoCmd{}, fmt.Errorf("java not found on PATH; DynamoDB Local needs a JRE (install one, then run `make tools`): %w", err)
	}
	// No bind-address flag exists: it listens on every interface, and
	// clients use 127.0.0.1.
	cmd := exec.Command(java,
		"-Djava.library.path="+filepath.Join(emulator, "DynamoDBLocal_lib"),
		"-jar", jar, "-inMemory", "-sharedDb", "-port", fmt.Sprint(port), "-disableTelemetry")
	cmd.Dir = emulator
	return dynamoCmd{Cmd: cmd, port: port}, nil
}

// waitDynamo polls ListTables until the server answers, the process exits
// (done closes) or timeout passes.
func waitDynamo(endpoint string, done <-chan struct{}, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	client := DynamoClient(endpoint)
	var last error
	for {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := client.ListTables(actx, &dynamodb.ListTablesInput{}, func(o *dynamodb.Options) {
			o.RetryMaxAttempts = 1
		})
		acancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-done:
			return fmt.Errorf("DynamoDB Local exited before answering on %s: %v", endpoint, last)
		case <-ctx.Done():
			return fmt.Errorf("DynamoDB Local not answering on %s after %v: %v", endpoint, timeout, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// DynamoClient is a client for a test server: static test credentials, no
// shared config files, so a developer's AWS profile is never used.
func DynamoClient(endpoint string) *dynamodb.Client {
	return dynamodb.New(dynamodb.Options{
		Region:       DynamoRegion,
		BaseEndpoint: aws.String(endpoint),
		Credentials:  credentials.NewStaticCredentialsProvider(DynamoAccessKey, DynamoSecretKey, ""),
	})
}

// nodeToolsDir is NodeToolsDir without a testing.TB.
func nodeToolsDir() (string, error) {
	if d := os.Getenv("STARLOG_NODE_TOOLS"); d != "" {
		return d, nil
	}
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("getwd: %w", err)
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/starlog/starlog\n")) {
			return filepath.Join(dir, ".ci", "tools", "node_modules"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no starlog go.mod above the working directory")
		}
		dir = parent
	}
}

// freePort is FreePort without a testing.TB.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
