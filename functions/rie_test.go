package functions_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/starlog/starlog/shared/testsvc"
)

// jobs are the five functions, as folders under functions/.
var jobs = []string{"plan", "janitor", "settle", "trim", "chain-settle"}

// builtDir holds the built functions, removed by TestMain.
var builtDir string

// buildFunctions builds every function for the host (linux, this arch),
// with the flags `make lambda` uses, once per test binary.
var buildFunctions = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "starlog-lambda-")
	if err != nil {
		return "", err
	}
	builtDir = dir
	args := []string{"build", "-trimpath", "-tags", "lambda.norpc", "-o", dir + string(filepath.Separator)}
	for _, j := range jobs {
		args = append(args, "github.com/starlog/starlog/functions/"+j)
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return dir, nil
})

func bootstrap(t *testing.T, job string) string {
	t.Helper()
	dir, err := buildFunctions()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, job)
}

// rie is one function running under the Lambda Runtime Interface
// Emulator on loopback.
type rie struct {
	url  string
	proc *testsvc.Process
	once sync.Once
}

// rieMu keeps one emulator at a time: its runtime API defaults to the
// fixed 127.0.0.1:9001 (we move it to a free port, and still never run
// two at once).
var rieMu sync.Mutex

// startRIE runs job's bootstrap under the emulator with exactly env;
// stop it (or let the test end) before starting the next.
func startRIE(t *testing.T, job string, env []string) *rie {
	t.Helper()
	return startRIETimeout(t, job, env, 120)
}

// startRIETimeout is startRIE with the function's timeout in seconds.
func startRIETimeout(t *testing.T, job string, env []string, timeoutSeconds int) *rie {
	t.Helper()
	bin := filepath.Join(testsvc.ToolsDir(t), "bin", "aws-lambda-rie")
	testsvc.RequireFile(t, bin, "aws-lambda-rie")
	boot := bootstrap(t, job)
	rieMu.Lock()
	r := &rie{}
	t.Cleanup(r.stop)
	port, api := testsvc.FreePort(t), testsvc.FreePort(t)
	cmd := exec.Command(bin, "--log-level", "error",
		"--runtime-interface-emulator-address", testsvc.Addr(port),
		"--runtime-api-address", testsvc.Addr(api), boot)
	cmd.Env = append(slices.Clone(env), fmt.Sprintf("AWS_LAMBDA_FUNCTION_TIMEOUT=%d", timeoutSeconds))
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "AWS_LAMBDA_FUNCTION_NAME=") }) {
		cmd.Env = append(cmd.Env, "AWS_LAMBDA_FUNCTION_NAME=starlog-"+job)
	}
	r.url = "http://" + testsvc.Addr(port) + "/2015-03-31/functions/function/invocations"
	r.proc = testsvc.Start(t, "aws-lambda-rie "+job, cmd)
	r.proc.WaitTCP(t, testsvc.Addr(port), 15*time.Second)
	return r
}

// stop ends the emulator and lets the next one start; safe twice.
func (r *rie) stop() {
	r.once.Do(func() {
		if r.proc != nil {
			r.proc.Stop()
		}
		rieMu.Unlock()
	})
}

// invoke posts an event and returns the payload. A handler error is a 200
// with {"errorMessage","errorType"}, never an HTTP error.
func (r *rie) invoke(t *testing.T, event any) []byte {
	t.Helper()
	b, err := json.Marshal(event)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, r.url, bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("invoke: %v\n%s", err, r.proc.Output())
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("invoke: HTTP %d %s\n%s", resp.StatusCode, body, r.proc.Output())
	}
	return body
}

// lambdaError is the payload of a failed invocation.
type lambdaError struct {
	Message string `json:"errorMessage"`
	Type    string `json:"errorType"`
}

// invokeOK invokes and fails the test on an error payload.
func (r *rie) invokeOK(t *testing.T, event any) []byte {
	t.Helper()
	body := r.invoke(t, event)
	var le lambdaError
	if json.Unmarshal(body, &le) == nil && le.Message != "" {
		t.Fatalf("function failed: %s (%s)\n%s", le.Message, le.Type, r.proc.Output())
	}
	return body
}

// sqsHandler invokes an SQS-fed function through the emulator, for
// localsqs.Deliver.
func (r *rie) sqsHandler(t *testing.T) func(context.Context, events.SQSEvent) (events.SQSEventResponse, error) {
	return func(_ context.Context, ev events.SQSEvent) (events.SQSEventResponse, error) {
		var resp events.SQSEventResponse
		body := r.invokeOK(t, ev)
		if err := json.Unmarshal(body, &resp); err != nil {
			return resp, fmt.Errorf("response %s: %w", body, err)
		}
		return resp, nil
	}
}

// scheduledEvent is the EventBridge event a rate schedule sends.
func scheduledEvent(rule string) map[string]any {
	return map[string]any{
		"version":     "0",
		"id":          fmt.Sprintf("%d-0000-4000-8000-%012d", time.Now().UnixNano()%1e8, time.Now().UnixNano()%1e12),
		"detail-type": "Scheduled Event",
		"source":      "aws.events",
		"account":     "123456789012",
		"time":        time.Now().UTC().Format(time.RFC3339),
		"region":      "us-east-1",
		"resources":   []string{"arn:aws:events:us-east-1:123456789012:rule/" + rule},
		"detail":      map[string]any{},
	}
}

func hasError(body []byte) (lambdaError, bool) {
	var le lambdaError
	err := json.Unmarshal(body, &le)
	return le, err == nil && le.Message != "" && strings.TrimSpace(le.Type) != ""
}
