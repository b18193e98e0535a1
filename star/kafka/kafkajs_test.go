package kafka_test

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/starlog/starlog/shared/testsvc"
)

var kafkajsSummary = regexp.MustCompile(`^(\d+) passed, (\d+) failed$`)

// KafkaJS, a second Kafka client (pinned in .ci/tools/package.json), runs
// testdata/kafkajs.mjs against an open star: produce, consume from the
// beginning, a group of two that rebalances when one leaves, commit and
// resume. Each scenario prints PASS or FAIL; all three must pass.
func TestKafkaJS(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs KafkaJS from .ci/tools/node_modules (make tools)")
	}
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found on PATH: KafkaJS needs Node 20 (install it, then run `make tools`): %v", err)
	}
	tools := testsvc.NodeToolsDir(t)
	if _, err := os.Stat(filepath.Join(tools, "kafkajs", "package.json")); err != nil {
		t.Fatalf("kafkajs is not installed under %s (run `make tools`): %v", tools, err)
	}
	s := startStar(t, true)
	script, err := filepath.Abs(filepath.Join("testdata", "kafkajs.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, script)
	cmd.Env = append(os.Environ(), "KAFKA_BROKER="+s.kafka, "STARLOG_NODE_TOOLS="+tools, "KAFKAJS_NO_PARTITIONER_WARNING=1")
	cmd.WaitDelay = 5 * time.Second
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var passes, fails []string
	summary := ""
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		t.Log(line)
		switch {
		case strings.HasPrefix(line, "PASS "):
			passes = append(passes, line)
		case strings.HasPrefix(line, "FAIL "):
			fails = append(fails, line)
		case kafkajsSummary.MatchString(line):
			summary = line
		}
	}
	runErr := cmd.Wait()
	if stderr.Len() > 0 {
		t.Logf("KafkaJS's warnings:\n%s", stderr.String())
	}
	if len(fails) > 0 || len(passes) != 3 || summary != "3 passed, 0 failed" || runErr != nil {
		t.Fatalf("KafkaJS: %d passed, failures %q, summary %q, exit %v\nstderr:\n%s", len(passes), fails, summary, runErr, stderr.String())
	}
}
