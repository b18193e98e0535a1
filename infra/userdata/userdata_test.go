package userdata

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// sample uses CDK-token-shaped strings where the stack passes tokens, so the
// tests prove tokens pass through verbatim.
func sample() Params {
	return Params{
		Region:               "${Token[AWS.Region.11]}",
		StackName:            "${Token[AWS.StackName.7]}",
		SignalResource:       "StarsASG1A2B3C4D",
		StarBinaryURL:        "s3://${Token[TOKEN.101]}/${Token[TOKEN.102]}",
		Port:                 8080,
		InternalPort:         8081,
		TableName:            "${Token[TOKEN.201]}",
		StandardBucket:       "${Token[TOKEN.202]}",
		AdminTokenSecret:     "${Token[TOKEN.301]}",
		InternalKeySecret:    "${Token[TOKEN.302]}",
		ExpressBuckets:       []string{"starlog-1--use1-az4--x-s3", "starlog-1--use1-az5--x-s3", "starlog-1--use1-az6--x-s3"},
		PolicyFlags:          []Flag{{"settle-linger", "60s"}, {"dead-after", "30s"}},
		ExtraFlags:           SortedFlags(map[string]string{"s3-memory-buffer-mib": "256", "s3-chain-backlog-flights": "1024"}),
		DrainArgs:            []string{"drain", "--wait"},
		DrainMaxSeconds:      1800,
		HeartbeatEverySecond: 200,
		LifecycleHookName:    "starlog-drain",
		AutoScalingGroupName: "Starlog-stars",
		StopTimeoutSeconds:   600,
		HealthWaitSeconds:    300,
		Cluster:              "Starlog",
		MetricsNamespace:     "Starlog",
		StarLogGroup:         "/starlog/Starlog/star",
		MetricsLogGroup:      "/starlog/Starlog/prometheus",
	}
}

func render(t *testing.T, p Params) string {
	t.Helper()
	s, err := Render(p)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// heredoc returns the body of the heredoc that writes path.
func heredoc(t *testing.T, script, path string) string {
	t.Helper()
	start := "cat > " + path + " <<'EOF'\n"
	i := strings.Index(script, start)
	if i < 0 {
		t.Fatalf("no heredoc for %s", path)
	}
	body := script[i+len(start):]
	j := strings.Index(body, "\nEOF\n")
	if j < 0 {
		t.Fatalf("heredoc for %s not closed", path)
	}
	return body[:j+1]
}

func bashSyntax(t *testing.T, name, script string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not on PATH")
	}
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bash, "-n", f).CombinedOutput(); err != nil {
		t.Errorf("%s: bash -n: %v\n%s", name, err, out)
	}
}

func TestScriptIsValidBash(t *testing.T) {
	s := render(t, sample())
	if !strings.HasPrefix(s, "#!/bin/bash\n") {
		t.Error("script must start with a bash shebang")
	}
	bashSyntax(t, "userdata.sh", s)
	bashSyntax(t, "lifecycle.sh", heredoc(t, s, LifecycleScript))
}

func TestScriptSize(t *testing.T) {
	// Tokens resolve to names of at most 63 characters; leave room.
	if n := len(render(t, sample())); n > MaxBytes*3/4 {
		t.Errorf("user data is %d bytes, too close to EC2's %d", n, MaxBytes)
	}
}

func TestStarUnit(t *testing.T) {
	s := render(t, sample())
	unit := heredoc(t, s, "/etc/systemd/system/"+StarUnit)
	for _, want := range []string{
		"Restart=always",
		"KillSignal=SIGTERM",
		"TimeoutStopSec=600",
		"EnvironmentFile=" + StarEnvFile,
		"Environment=AWS_REGION=${Token[AWS.Region.11]}",
		"ExecStart=" + StarBinaryPath + " serve \\\n  --listen=:8080 \\\n  --internal-listen=:8081 \\\n" +
			"  --s3-region=${Token[AWS.Region.11]} \\\n  --dynamo-region=${Token[AWS.Region.11]} \\\n" +
			"  --dynamo-table=${Token[TOKEN.201]} \\\n  --standard-buckets=${Token[TOKEN.202]} \\\n" +
			"  --express-buckets=starlog-1--use1-az4--x-s3,starlog-1--use1-az5--x-s3,starlog-1--use1-az6--x-s3 \\\n" +
			"  --admin-token-secret=${Token[TOKEN.301]} \\\n  --internal-key-secret=${Token[TOKEN.302]} \\\n" +
			"  --settle-linger=60s \\\n  --dead-after=30s \\\n" +
			"  --s3-chain-backlog-flights=1024 \\\n  --s3-memory-buffer-mib=256\n",
		"[Unit]\nDescription=starlog star\n",
		"\nStartLimitIntervalSec=0\n",
		"User=starlog",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("star unit lacks %q\n%s", want, unit)
		}
	}
	// Every continuation line of ExecStart ends in a backslash except the
	// last; a stray line would make systemd reject the unit.
	lines := strings.Split(unit, "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "  --") && i+1 < len(lines) && strings.HasPrefix(lines[i+1], "  --") && !strings.HasSuffix(l, " \\") {
			t.Errorf("ExecStart line %q lacks its continuation", l)
		}
	}
}

func TestTokensVerbatim(t *testing.T) {
	s := render(t, sample())
	for _, tok := range []string{"${Token[TOKEN.101]}/${Token[TOKEN.102]}", "'${Token[AWS.StackName.7]}'", "StarsASG1A2B3C4D"} {
		if !strings.Contains(s, tok) {
			t.Errorf("token %q not copied verbatim", tok)
		}
	}
}

func TestLifecycleScript(t *testing.T) {
	s := render(t, sample())
	env := heredoc(t, s, LifecycleEnvFile)
	for _, want := range []string{"ASG_NAME='Starlog-stars'", "HOOK_NAME='starlog-drain'", "DRAIN_ARGS='drain --wait'", "DRAIN_MAX_SECONDS=1800", "HEARTBEAT_EVERY=200"} {
		if !strings.Contains(env, want) {
			t.Errorf("lifecycle env lacks %q:\n%s", want, env)
		}
	}
	script := heredoc(t, s, LifecycleScript)
	// Order matters: wait for termination, drain, stop, then release.
	order := []string{"target-lifecycle-state", "$DRAIN_ARGS", "record-lifecycle-action-heartbeat", "systemctl stop " + StarUnit, "complete-lifecycle-action --lifecycle-action-result CONTINUE"}
	last := -1
	for _, w := range order {
		i := strings.Index(script, w)
		if i < 0 {
			t.Fatalf("lifecycle script lacks %q", w)
		}
		if i < last {
			t.Errorf("%q comes before the step that must precede it", w)
		}
		last = i
	}
}

func TestDrainScriptRunsAgainstFakes(t *testing.T) {
	// Run the lifecycle script for real, with curl, aws, systemctl and the
	// star replaced by fakes that log their arguments: it must drain, stop
	// and complete the hook once the instance is marked Terminated.
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not on PATH")
	}
	dir := t.TempDir()
	logf := filepath.Join(dir, "calls.log")
	p := sample()
	p.Region = "us-east-1"
	p.HeartbeatEverySecond = 1
	s := render(t, p)
	env := heredoc(t, s, LifecycleEnvFile)
	script := heredoc(t, s, LifecycleScript)
	star := filepath.Join(dir, "star")
	script = strings.ReplaceAll(script, LifecycleEnvFile, filepath.Join(dir, "lifecycle.env"))
	script = strings.ReplaceAll(script, StarBinaryPath, star)
	script = strings.ReplaceAll(script, "sleep 5", "sleep 0.1")
	fakes := map[string]string{
		"lifecycle.env": env,
		"lifecycle.sh":  script,
		"bin/curl": `#!/bin/bash
case "$*" in
  *api/token*) echo tok ;;
  *instance-id*) echo i-0123456789abcdef0 ;;
  *target-lifecycle-state*) n=$(cat "` + dir + `/polls" 2>/dev/null || echo 0); echo $((n+1)) > "` + dir + `/polls"
     if [ "$n" -ge 2 ]; then echo Terminated; else echo InService; fi ;;
esac`,
		"bin/aws":       "#!/bin/bash\necho \"aws $*\" >> " + logf,
		"bin/systemctl": "#!/bin/bash\necho \"systemctl $*\" >> " + logf,
		"star":          "#!/bin/bash\necho \"star $*\" >> " + logf + "\nsleep 2.5",
	}
	if err := os.MkdirAll(filepath.Join(dir, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, body := range fakes {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bash, filepath.Join(dir, "lifecycle.sh"))
	cmd.Env = append(os.Environ(), "PATH="+filepath.Join(dir, "bin")+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lifecycle script failed: %v\n%s", err, out)
	}
	calls, err := os.ReadFile(logf)
	if err != nil {
		t.Fatal(err)
	}
	got := string(calls)
	want := []string{
		"star drain --wait",
		"aws autoscaling record-lifecycle-action-heartbeat --region us-east-1 --auto-scaling-group-name Starlog-stars --lifecycle-hook-name starlog-drain --instance-id i-0123456789abcdef0",
		"systemctl stop starlog.service",
		"aws autoscaling complete-lifecycle-action --lifecycle-action-result CONTINUE --region us-east-1 --auto-scaling-group-name Starlog-stars --lifecycle-hook-name starlog-drain --instance-id i-0123456789abcdef0",
	}
	last := -1
	for _, w := range want {
		i := strings.Index(got, w)
		if i < 0 {
			t.Fatalf("call %q missing; calls:\n%s\noutput:\n%s", w, got, out)
		}
		if i < last {
			t.Errorf("call %q out of order; calls:\n%s", w, got)
		}
		last = i
	}
	if n := strings.Count(got, "complete-lifecycle-action"); n != 1 {
		t.Errorf("hook completed %d times", n)
	}
}

func TestAgentConfig(t *testing.T) {
	s := render(t, sample())
	var cfg struct {
		Logs struct {
			LogsCollected struct {
				Files struct {
					CollectList []struct {
						FilePath     string `json:"file_path"`
						LogGroupName string `json:"log_group_name"`
					} `json:"collect_list"`
				} `json:"files"`
			} `json:"logs_collected"`
			MetricsCollected struct {
				Prometheus struct {
					LogGroupName string `json:"log_group_name"`
					ConfigPath   string `json:"prometheus_config_path"`
					EMF          struct {
						Namespace    string `json:"metric_namespace"`
						Declarations []struct {
							Dimensions [][]string `json:"dimensions"`
							Selectors  []string   `json:"metric_selectors"`
						} `json:"metric_declaration"`
					} `json:"emf_processor"`
				} `json:"prometheus"`
			} `json:"metrics_collected"`
		} `json:"logs"`
	}
	if err := json.Unmarshal([]byte(heredoc(t, s, AgentConfigPath)), &cfg); err != nil {
		t.Fatalf("agent config is not JSON: %v", err)
	}
	prom := cfg.Logs.MetricsCollected.Prometheus
	if prom.ConfigPath != PrometheusConfPath || prom.LogGroupName != "/starlog/Starlog/prometheus" || prom.EMF.Namespace != "Starlog" {
		t.Errorf("prometheus section %+v", prom)
	}
	if len(prom.EMF.Declarations) != len(Forwarded) {
		t.Fatalf("declarations %+v", prom.EMF.Declarations)
	}
	for i, f := range Forwarded {
		decl := prom.EMF.Declarations[i]
		if len(decl.Selectors) != len(f.Metrics) {
			t.Fatalf("declaration %d selects %v, want %v", i, decl.Selectors, f.Metrics)
		}
		for j, m := range f.Metrics {
			if re := regexp.MustCompile(decl.Selectors[j]); !re.MatchString(m) || re.MatchString(m+"_x") || re.MatchString(m+"_sum") {
				t.Errorf("selector %q does not select exactly %q", re, m)
			}
		}
		if d := decl.Dimensions; len(d) != 1 || !slices.Equal(d[0], append([]string{DimensionCluster}, f.Dimensions...)) {
			t.Errorf("declaration %d dimensions %v, want cluster and %v", i, d, f.Dimensions)
		}
	}
	// The alarms' series keep the one dimension they alarm on.
	for _, m := range []string{MetricBacklogAge, MetricStall, MetricSettleLag, MetricClassDegraded} {
		if !ForwardedWith(m, []string{DimensionCluster}) {
			t.Errorf("%s is not forwarded with the cluster dimension alone", m)
		}
	}
	files := cfg.Logs.LogsCollected.Files.CollectList
	if len(files) != 2 || files[0].FilePath != StarLogFile || files[0].LogGroupName != "/starlog/Starlog/star" {
		t.Errorf("log files %+v", files)
	}
	prometheus := heredoc(t, s, PrometheusConfPath)
	if !strings.Contains(prometheus, `targets: ["127.0.0.1:8081"]`) || !strings.Contains(prometheus, `cluster: "Starlog"`) {
		t.Errorf("scrape config:\n%s", prometheus)
	}
}

func TestHealthGateSignals(t *testing.T) {
	s := render(t, sample())
	i := strings.Index(s, "http://127.0.0.1:8080/health")
	ok := strings.Index(s, "signal 0")
	fail := strings.LastIndex(s, "signal 1")
	if i < 0 || ok < i || fail < ok {
		t.Error("the script must poll /health, then signal success, else failure")
	}
	if !strings.Contains(s, "--resource 'StarsASG1A2B3C4D'") {
		t.Error("cfn-signal must name the ASG's logical ID")
	}
}

func TestRenderRejects(t *testing.T) {
	for name, mut := range map[string]func(*Params){
		"no table":        func(p *Params) { p.TableName = "" },
		"no express":      func(p *Params) { p.ExpressBuckets = nil },
		"no drain":        func(p *Params) { p.DrainArgs = nil },
		"zero port":       func(p *Params) { p.Port = 0 },
		"one port":        func(p *Params) { p.InternalPort = p.Port },
		"policy twice":    func(p *Params) { p.ExtraFlags = []Flag{{"dead-after", "40s"}} },
		"unsafe policy":   func(p *Params) { p.PolicyFlags = []Flag{{"read-grace", "5 m"}} },
		"unsafe flag":     func(p *Params) { p.ExtraFlags = []Flag{{"x", "a b"}} },
		"dollar in flag":  func(p *Params) { p.ExtraFlags = []Flag{{"x", "$HOME"}} },
		"no heartbeat":    func(p *Params) { p.HeartbeatEverySecond = 0 },
		"no signal addr.": func(p *Params) { p.SignalResource = "" },
	} {
		p := sample()
		mut(&p)
		if _, err := Render(p); err == nil {
			t.Errorf("%s: Render accepted it", name)
		}
	}
}

func TestSingleQuote(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not on PATH")
	}
	for _, s := range []string{"plain", "it's", "$(rm -rf /)", `a"b\c`, "", "'"} {
		out, err := exec.Command(bash, "-c", "printf %s "+sq(s)).Output()
		if err != nil || string(out) != s {
			t.Errorf("sq(%q) round-trips to %q (%v)", s, out, err)
		}
	}
}

// The units are what systemd 252 (the version of Amazon Linux 2023) accepts
// without a warning, and the star never runs out of restarts.
func TestUnitsVerify(t *testing.T) {
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not on PATH")
	}
	s := render(t, sample())
	dir := t.TempDir()
	// verify checks the commands exist: point them at a real file.
	fake := filepath.Join(dir, "star")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, unit := range []string{StarUnit, LifecycleUnit} {
		body := heredoc(t, s, "/etc/systemd/system/"+unit)
		if !strings.Contains(body, "\nStartLimitIntervalSec=0\n") {
			t.Errorf("%s gives up restarting (no StartLimitIntervalSec=0)", unit)
		}
		body = strings.ReplaceAll(body, LifecycleScript, fake) // before its prefix StarBinaryPath
		body = strings.ReplaceAll(body, StarBinaryPath, fake)
		p := filepath.Join(dir, unit)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(analyze, "verify", "--man=no", p).CombinedOutput()
		if err != nil || len(out) > 0 {
			t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
		}
	}
}

// The environment file gets the instance's id and address on the internal
// port, as the star's --star-id and --address fallbacks.
func TestStarEnvFile(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not on PATH")
	}
	s := render(t, sample())
	start := strings.Index(s, "cat > "+StarEnvFile+" <<EOF\n")
	end := strings.Index(s[start:], "\nEOF\n")
	if start < 0 || end < 0 {
		t.Fatal("no unquoted heredoc writes the env file")
	}
	f := filepath.Join(t.TempDir(), "star.env")
	script := "set -u\nINSTANCE_ID=i-0abc\nLOCAL_IP=10.40.1.7\n" + strings.Replace(s[start:start+end+5], StarEnvFile, f, 1)
	if out, err := exec.Command(bash, "-c", script).CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got, _ := os.ReadFile(f)
	if string(got) != "STARLOG_STAR_ID=i-0abc\nSTARLOG_ADDRESS=10.40.1.7:8081\n" {
		t.Errorf("env file %q", got)
	}
}

// The exit line ExecStopPost prints has the fields the stack's metric
// filter names, whatever systemd sets.
func TestExitLine(t *testing.T) {
	unit := heredoc(t, render(t, sample()), "/etc/systemd/system/"+StarUnit)
	var cmd string
	for _, l := range strings.Split(unit, "\n") {
		if c, ok := strings.CutPrefix(l, "ExecStopPost=/bin/sh -c '"); ok {
			cmd = strings.TrimSuffix(c, "'")
		}
	}
	if cmd == "" {
		t.Fatal("no ExecStopPost")
	}
	cmd = strings.ReplaceAll(cmd, "$$", "$") // systemd's unescaping
	for env, want := range map[string]string{
		"SERVICE_RESULT=exit-code EXIT_CODE=exited EXIT_STATUS=1": "starlog-unit: star-exited Starlog exit-code exited 1",
		"SERVICE_RESULT=success EXIT_CODE=exited EXIT_STATUS=0":   "starlog-unit: star-exited Starlog success exited 0",
		"": "starlog-unit: star-exited Starlog none none none",
	} {
		c := exec.Command("/bin/sh", "-c", cmd)
		c.Env = strings.Fields(env)
		out, err := c.Output()
		if err != nil || strings.TrimSpace(string(out)) != want {
			t.Errorf("env %q: %q %v, want %q", env, out, err, want)
		}
		if n := len(strings.Fields(string(out))); n != 6 {
			t.Errorf("exit line has %d fields; the filter %s names 6", n, ExitFilterPattern)
		}
	}
}

// The alarmed gauge is the one the star registers: star/loglet names it
// MetricClassDegraded in the starlog namespace (the modules do not import
// each other, so the star's source is read). Issue 26 defect 9.
func TestDegradedClassMetricIsTheStars(t *testing.T) {
	src, err := os.ReadFile(filepath.Join("..", "..", "star", "loglet", "metrics.go"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`const MetricClassDegraded = "([a-z_]+)"`).FindSubmatch(src)
	if m == nil {
		t.Fatal("star/loglet/metrics.go declares no MetricClassDegraded")
	}
	if got := "starlog_" + string(m[1]); got != MetricClassDegraded {
		t.Fatalf("the star exports %s, the stack alarms on %s", got, MetricClassDegraded)
	}
	if !strings.Contains(string(src), `Namespace: "starlog"`) || !strings.Contains(string(src), "g(MetricClassDegraded,") {
		t.Fatal("star/loglet/metrics.go no longer registers MetricClassDegraded as a starlog gauge")
	}
	if !slices.Contains(ForwardedMetrics, MetricClassDegraded) {
		t.Fatalf("the agent does not forward %s", MetricClassDegraded)
	}
}
