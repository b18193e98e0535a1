// Package userdata renders the first-boot script of a star VM: it installs
// the star binary, writes its systemd unit (restart always) and flags, the
// lifecycle watcher that drains the star before Auto Scaling terminates the
// instance, the CloudWatch agent configuration that ships logs and the
// star's alarm metrics, and signals CloudFormation once /health answers.
//
// It is pure text rendering. String parameters may hold CDK token strings
// (for example a bucket name not known until deploy); they are copied
// verbatim and CloudFormation substitutes them, so nothing here may split,
// escape or inspect a parameter beyond quoting it.
package userdata

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/template"
)

// Paths on the instance.
const (
	// StarEnvFile holds the per-instance settings (STARLOG_STAR_ID,
	// STARLOG_ADDRESS) as the star flags' environment fallbacks.
	StarBinaryPath     = "/opt/starlog/bin/star"
	LifecycleScript    = "/opt/starlog/bin/starlog-lifecycle"
	StarEnvFile        = "/etc/starlog/star.env"
	LifecycleEnvFile   = "/etc/starlog/lifecycle.env"
	StarLogFile        = "/var/log/starlog/star.log"
	BootstrapLogFile   = "/var/log/starlog-bootstrap.log"
	AgentConfigPath    = "/opt/aws/amazon-cloudwatch-agent/etc/starlog.json"
	PrometheusConfPath = "/opt/aws/amazon-cloudwatch-agent/etc/starlog-prometheus.yaml"
	StarUnit           = "starlog.service"
	LifecycleUnit      = "starlog-lifecycle.service"
)

// MaxBytes is EC2's limit on user data before base64.
const MaxBytes = 16 * 1024

// Metric names the star exports on /metrics that the CloudWatch agent
// forwards and the stack's alarms watch. They are the contract with the star.
const (
	MetricBacklogAge = "starlog_backlog_age_seconds"
	MetricStall      = "starlog_backlog_stalls_total"
	MetricSettleLag  = "starlog_settle_lag_seconds"
	// MetricClassDegraded is 1 while a storage class of the star commits
	// nothing (its buckets refuse or do not answer: appends to it are
	// answered 503), by the label class (star/loglet, MetricClassDegraded).
	MetricClassDegraded = "starlog_storage_class_degraded"
	// DimensionCluster is the one dimension of the forwarded metrics; its
	// value is Params.Cluster, so the alarms aggregate over every star.
	DimensionCluster = "cluster"
)

// Forward is one group of Prometheus series the agent sends to CloudWatch
// with the same dimensions.
type Forward struct {
	// Why says what reads them (alarms, dashboard panels).
	Why string `json:"why"`
	// Dimensions are the series' labels kept as dimensions, besides
	// DimensionCluster; the series of other labels are data points of the
	// same metric (the alarms take their maximum).
	Dimensions []string `json:"dimensions"`
	Metrics    []string `json:"metrics"`
}

// forwardedJSON lists the forwarded series; a test of the star
// (star/servecmd) checks each name and dimension against what star dev
// exports on /metrics.
//
//go:embed forwarded.json
var forwardedJSON []byte

// Forwarded are the agent's forwarding declarations; everything else
// stays on /metrics (CloudWatch bills per metric).
var Forwarded = func() []Forward {
	var f []Forward
	if err := json.Unmarshal(forwardedJSON, &f); err != nil {
		panic("userdata: forwarded.json: " + err.Error())
	}
	return f
}()

// ForwardedMetrics are the names of every forwarded series, each once.
var ForwardedMetrics = func() []string {
	var out []string
	for _, f := range Forwarded {
		for _, m := range f.Metrics {
			if !slices.Contains(out, m) {
				out = append(out, m)
			}
		}
	}
	return out
}()

// ForwardedWith reports whether the agent forwards metric with exactly
// the dimensions dims (DimensionCluster included or not).
func ForwardedWith(metric string, dims []string) bool {
	want := slices.DeleteFunc(slices.Clone(dims), func(d string) bool { return d == DimensionCluster })
	slices.Sort(want)
	for _, f := range Forwarded {
		have := slices.Sorted(slices.Values(f.Dimensions))
		if slices.Contains(f.Metrics, metric) && slices.Equal(have, want) {
			return true
		}
	}
	return false
}

// ExitMarker starts the line the unit appends to the star's log whenever
// the star process ends (ExecStopPost): "starlog-unit: star-exited
// <cluster> <result> <code> <status>", with systemd's SERVICE_RESULT
// (success for a clean stop), EXIT_CODE and EXIT_STATUS. The stack counts
// the unclean ones (a crash loop) with a log metric filter.
const ExitMarker = "starlog-unit: star-exited"

// ExitFilterPattern is the CloudWatch Logs filter that matches an unclean
// exit line and names its fields (the cluster becomes the dimension).
const ExitFilterPattern = `[marker="starlog-unit:", event="star-exited", cluster, result!=success, code, status]`

// Flag is one `star serve` command-line flag.
type Flag struct{ Name, Value string }

// Params is everything the script needs.
type Params struct {
	Region string
	// StackName and SignalResource (the ASG's logical ID) address the
	// cfn-signal that tells CloudFormation this star came up healthy.
	StackName      string
	SignalResource string

	// StarBinaryURL is the s3:// URL of the star binary asset.
	StarBinaryURL string
	// Port serves S2's API and /health (the load balancer's target);
	// InternalPort serves peers and operators (forwarding, drain,
	// /metrics) and is the address the star advertises.
	Port         int
	InternalPort int
	// KafkaPort serves the Kafka protocol (0: not served), and
	// KafkaAdvertise is the host Kafka clients are told to connect to on
	// it: the load balancer's name (docs/kafka.md, "Many stars").
	KafkaPort      int
	KafkaAdvertise string

	TableName      string
	StandardBucket string
	ExpressBuckets []string
	// AdminTokenSecret and InternalKeySecret are the Secrets Manager ARNs
	// of the star's credentials (docs/security.md).
	AdminTokenSecret  string
	InternalKeySecret string
	// PolicyFlags are what the stars share with the auditor functions
	// (config.Policy), rendered after the stack's own flags.
	PolicyFlags []Flag
	// ExtraFlags are rendered last, in the given order.
	ExtraFlags []Flag

	// DrainArgs are the star CLI arguments that drain the local star and
	// wait for its terminate gate.
	DrainArgs            []string
	DrainMaxSeconds      int
	HeartbeatEverySecond int
	LifecycleHookName    string
	AutoScalingGroupName string
	// StopTimeoutSeconds bounds the graceful close after SIGTERM.
	StopTimeoutSeconds int
	// HealthWaitSeconds bounds the wait for /health before signalling
	// failure.
	HealthWaitSeconds int

	Cluster          string
	MetricsNamespace string
	StarLogGroup     string
	MetricsLogGroup  string
}

// SortedFlags turns a flag map into flags sorted by name, so the rendered
// unit (and the launch template version) is stable.
func SortedFlags(m map[string]string) []Flag {
	out := make([]Flag, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		out = append(out, Flag{Name: k, Value: m[k]})
	}
	return out
}

// Render returns the user data script.
func Render(p Params) (string, error) {
	if err := p.check(); err != nil {
		return "", err
	}
	agent, err := AgentConfig(p)
	if err != nil {
		return "", err
	}
	var b bytes.Buffer
	data := struct {
		Params
		Agent       string
		Prometheus  string
		Flags       []Flag
		ExpressList string
	}{
		Params:      p,
		Agent:       agent,
		Prometheus:  PrometheusConfig(p),
		Flags:       p.Flags(),
		ExpressList: strings.Join(p.ExpressBuckets, ","),
	}
	if err := scriptTemplate.Execute(&b, data); err != nil {
		return "", fmt.Errorf("render user data: %w", err)
	}
	return b.String(), nil
}

// StackFlags are the `star serve` flags the stack sets itself: on the
// command line, or (star-id, address: known only on the instance) through
// their environment fallbacks in StarEnvFile.
var StackFlags = []string{"listen", "internal-listen", "star-id", "address", "s3-region", "dynamo-region",
	"dynamo-table", "standard-buckets", "express-buckets", "admin-token-secret", "internal-key-secret",
	"kafka-listen", "kafka-advertise"}

// Flags are the star's command-line flags: the stack-owned ones first,
// then the policy, then the extra ones. Every setting `star serve` needs
// is here or in StarEnvFile; nothing is left to a default that only
// happens to work.
func (p Params) Flags() []Flag {
	fs := []Flag{
		{"listen", fmt.Sprintf(":%d", p.Port)},
		{"internal-listen", fmt.Sprintf(":%d", p.InternalPort)},
		{"s3-region", p.Region},
		{"dynamo-region", p.Region},
		{"dynamo-table", p.TableName},
		{"standard-buckets", p.StandardBucket},
		{"express-buckets", strings.Join(p.ExpressBuckets, ",")},
		{"admin-token-secret", p.AdminTokenSecret},
		{"internal-key-secret", p.InternalKeySecret},
	}
	if p.KafkaPort > 0 {
		fs = append(fs, Flag{"kafka-listen", fmt.Sprintf(":%d", p.KafkaPort)},
			Flag{"kafka-advertise", fmt.Sprintf("%s:%d", p.KafkaAdvertise, p.KafkaPort)})
	}
	fs = append(fs, p.PolicyFlags...)
	return append(fs, p.ExtraFlags...)
}

func (p Params) check() error {
	var missing []string
	for name, v := range map[string]string{
		"Region": p.Region, "StackName": p.StackName, "SignalResource": p.SignalResource,
		"StarBinaryURL": p.StarBinaryURL, "TableName": p.TableName, "StandardBucket": p.StandardBucket,
		"AdminTokenSecret": p.AdminTokenSecret, "InternalKeySecret": p.InternalKeySecret,
		"LifecycleHookName": p.LifecycleHookName, "AutoScalingGroupName": p.AutoScalingGroupName,
		"Cluster": p.Cluster, "MetricsNamespace": p.MetricsNamespace,
		"StarLogGroup": p.StarLogGroup, "MetricsLogGroup": p.MetricsLogGroup,
	} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(p.ExpressBuckets) == 0 {
		missing = append(missing, "ExpressBuckets")
	}
	if len(p.DrainArgs) == 0 {
		missing = append(missing, "DrainArgs")
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("user data: missing %s", strings.Join(missing, ", "))
	}
	for _, n := range []struct {
		name string
		v    int
	}{{"Port", p.Port}, {"InternalPort", p.InternalPort}, {"DrainMaxSeconds", p.DrainMaxSeconds}, {"HeartbeatEverySecond", p.HeartbeatEverySecond}, {"StopTimeoutSeconds", p.StopTimeoutSeconds}, {"HealthWaitSeconds", p.HealthWaitSeconds}} {
		if n.v <= 0 {
			return fmt.Errorf("user data: %s must be positive, got %d", n.name, n.v)
		}
	}
	if p.Port == p.InternalPort {
		return fmt.Errorf("user data: Port and InternalPort are both %d", p.Port)
	}
	if p.KafkaPort > 0 && (p.KafkaPort == p.Port || p.KafkaPort == p.InternalPort || p.KafkaAdvertise == "") {
		return fmt.Errorf("user data: KafkaPort %d needs a port of its own and KafkaAdvertise (%q)", p.KafkaPort, p.KafkaAdvertise)
	}
	seen := map[string]bool{}
	for _, f := range p.Flags() {
		if seen[f.Name] {
			return fmt.Errorf("user data: flag --%s given twice", f.Name)
		}
		seen[f.Name] = true
	}
	for _, f := range slices.Concat(p.PolicyFlags, p.ExtraFlags) {
		if f.Name == "" || strings.ContainsAny(f.Name+f.Value, " \t\n'\"\\$%") {
			return fmt.Errorf("user data: flag %q=%q has characters unsafe in a unit file", f.Name, f.Value)
		}
	}
	return nil
}

// AgentConfig is the CloudWatch agent's JSON configuration: the star's log
// and the bootstrap log to CloudWatch Logs, and the forwarded Prometheus
// series as embedded-metric-format records.
func AgentConfig(p Params) (string, error) {
	declarations := make([]map[string]any, len(Forwarded))
	for i, f := range Forwarded {
		selectors := make([]string, len(f.Metrics))
		for j, m := range f.Metrics {
			selectors[j] = "^" + m + "$"
		}
		declarations[i] = map[string]any{
			"source_labels":    []string{"job"},
			"label_matcher":    "^starlog$",
			"dimensions":       [][]string{append([]string{DimensionCluster}, f.Dimensions...)},
			"metric_selectors": selectors,
		}
	}
	type fileLog struct {
		FilePath      string `json:"file_path"`
		LogGroupName  string `json:"log_group_name"`
		LogStreamName string `json:"log_stream_name"`
	}
	cfg := map[string]any{
		"agent": map[string]any{"metrics_collection_interval": 60},
		"logs": map[string]any{
			"force_flush_interval": 15,
			"logs_collected": map[string]any{
				"files": map[string]any{"collect_list": []fileLog{
					{StarLogFile, p.StarLogGroup, "{instance_id}"},
					{BootstrapLogFile, p.StarLogGroup, "{instance_id}/bootstrap"},
				}},
			},
			"metrics_collected": map[string]any{
				"prometheus": map[string]any{
					"log_group_name":         p.MetricsLogGroup,
					"prometheus_config_path": PrometheusConfPath,
					"emf_processor": map[string]any{
						"metric_namespace":   p.MetricsNamespace,
						"metric_declaration": declarations,
					},
				},
			},
		},
	}
	b, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return "", fmt.Errorf("cloudwatch agent config: %w", err)
	}
	return string(b), nil
}

// PrometheusConfig is the agent's scrape configuration: the local star's
// internal port only (/metrics is not served on the public one).
func PrometheusConfig(p Params) string {
	return fmt.Sprintf(`global:
  scrape_interval: 60s
  scrape_timeout: 10s
scrape_configs:
  - job_name: starlog
    metrics_path: /metrics
    static_configs:
      - targets: ["127.0.0.1:%d"]
        labels:
          %s: %q
`, p.InternalPort, DimensionCluster, p.Cluster)
}

// sq quotes s for bash as one word.
func sq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

var scriptTemplate = template.Must(template.New("userdata").Funcs(template.FuncMap{
	"sq":   sq,
	"join": strings.Join,
}).Parse(scriptText))

// The script runs once, as root, at first boot. Each heredoc is quoted
// ('EOF') so the shell expands nothing inside it; CloudFormation has already
// substituted the tokens.
const scriptText = `#!/bin/bash
# starlog star: first-boot setup (rendered by infra/userdata).
set -euo pipefail
exec > >(tee -a ` + BootstrapLogFile + `) 2>&1

REGION={{sq .Region}}
signal() {
  /opt/aws/bin/cfn-signal --exit-code "$1" --stack {{sq .StackName}} --resource {{sq .SignalResource}} --region "$REGION" || true
}
trap 'echo "bootstrap failed at line $LINENO"; signal 1' ERR
retry() {
  local n
  for n in 1 2 3 4 5; do
    "$@" && return 0
    echo "attempt $n of: $* failed"
    sleep $((n * 5))
  done
  return 1
}

retry dnf install -y amazon-cloudwatch-agent aws-cfn-bootstrap

imds() {
  local token
  token=$(curl -sf -m 5 -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60')
  curl -sf -m 5 -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/meta-data/$1"
}
INSTANCE_ID=$(imds instance-id)
LOCAL_IP=$(imds local-ipv4)

id starlog >/dev/null 2>&1 || useradd --system --home-dir /var/lib/starlog --shell /sbin/nologin starlog
install -d -m 0755 /opt/starlog/bin /etc/starlog
install -d -m 0750 -o starlog -g starlog /var/log/starlog /var/lib/starlog

retry aws s3 cp --region "$REGION" --only-show-errors {{sq .StarBinaryURL}} ` + StarBinaryPath + `.new
install -m 0755 ` + StarBinaryPath + `.new ` + StarBinaryPath + `
rm -f ` + StarBinaryPath + `.new

# The star id is the instance id: a replacement VM is a new star, and the
# janitor settles the chains of the one it replaced. Peers forward to the
# star at its private address, on the internal port. Both reach the star
# as its flags' environment fallbacks (--star-id, --address).
cat > ` + StarEnvFile + ` <<EOF
STARLOG_STAR_ID=${INSTANCE_ID}
STARLOG_ADDRESS=${LOCAL_IP}:{{.InternalPort}}
EOF

cat > /etc/systemd/system/` + StarUnit + ` <<'EOF'
[Unit]
Description=starlog star
Wants=network-online.target
After=network-online.target
# Never give up restarting the star (the default gives up after 5 starts
# in 10 s); a crash loop shows in the star-exits alarm instead.
StartLimitIntervalSec=0

[Service]
Type=simple
User=starlog
Group=starlog
EnvironmentFile=` + StarEnvFile + `
Environment=AWS_REGION={{.Region}}
WorkingDirectory=/var/lib/starlog
ExecStart=` + StarBinaryPath + ` serve{{range .Flags}} \
  --{{.Name}}={{.Value}}{{end}}
# One line per exit for the star-exits alarm (stdout is the star's log).
ExecStopPost=/bin/sh -c 'echo "` + ExitMarker + ` {{.Cluster}} $${SERVICE_RESULT:-none} $${EXIT_CODE:-none} $${EXIT_STATUS:-none}"'
# SIGTERM is the star's graceful close; give it time to hand off.
KillSignal=SIGTERM
TimeoutStopSec={{.StopTimeoutSeconds}}
Restart=always
RestartSec=2
LimitNOFILE=1048576
StandardOutput=append:` + StarLogFile + `
StandardError=inherit
NoNewPrivileges=true
ProtectSystem=strict
ProtectHome=true
PrivateTmp=true
ReadWritePaths=/var/lib/starlog /var/log/starlog

[Install]
WantedBy=multi-user.target
EOF

cat > ` + LifecycleEnvFile + ` <<'EOF'
REGION={{sq .Region}}
ASG_NAME={{sq .AutoScalingGroupName}}
HOOK_NAME={{sq .LifecycleHookName}}
DRAIN_ARGS={{sq (join .DrainArgs " ")}}
DRAIN_MAX_SECONDS={{.DrainMaxSeconds}}
HEARTBEAT_EVERY={{.HeartbeatEverySecond}}
EOF

cat > ` + LifecycleScript + ` <<'EOF'
#!/bin/bash
# Waits for Auto Scaling to start terminating this instance (the lifecycle
# hook holds it in Terminating:Wait), drains the star until its terminate
# gate opens, stops it (graceful close), then lets the instance go.
set -uo pipefail
. ` + LifecycleEnvFile + `
imds() {
  local token
  token=$(curl -sf -m 5 -X PUT http://169.254.169.254/latest/api/token -H 'X-aws-ec2-metadata-token-ttl-seconds: 60') || return 1
  curl -sf -m 5 -H "X-aws-ec2-metadata-token: $token" "http://169.254.169.254/latest/meta-data/$1"
}
hook() {
  aws autoscaling "$@" --region "$REGION" --auto-scaling-group-name "$ASG_NAME" \
    --lifecycle-hook-name "$HOOK_NAME" --instance-id "$INSTANCE_ID"
}
until INSTANCE_ID=$(imds instance-id); do sleep 5; done
until [ "$(imds autoscaling/target-lifecycle-state || true)" = "Terminated" ]; do sleep 5; done

echo "termination started: draining the star"
# DRAIN_ARGS is a list of validated words: split it on purpose.
# shellcheck disable=SC2086
` + StarBinaryPath + ` $DRAIN_ARGS &
drain=$!
now=$(date +%s)
deadline=$((now + DRAIN_MAX_SECONDS))
next_beat=$((now + HEARTBEAT_EVERY))
while kill -0 "$drain" 2>/dev/null; do
  now=$(date +%s)
  if [ "$now" -ge "$deadline" ]; then
    echo "drain still running after ${DRAIN_MAX_SECONDS}s: stopping anyway"
    kill "$drain" 2>/dev/null
    break
  fi
  if [ "$now" -ge "$next_beat" ]; then
    hook record-lifecycle-action-heartbeat || echo "lifecycle heartbeat failed"
    next_beat=$((now + HEARTBEAT_EVERY))
  fi
  sleep 5
done
wait "$drain"
echo "drain exited with status $?"
systemctl stop ` + StarUnit + `
hook complete-lifecycle-action --lifecycle-action-result CONTINUE ||
  echo "complete-lifecycle-action failed: the hook's timeout continues the termination"
EOF
chmod 0755 ` + LifecycleScript + `

cat > /etc/systemd/system/` + LifecycleUnit + ` <<'EOF'
[Unit]
Description=starlog: drain the star when Auto Scaling terminates this instance
After=` + StarUnit + `
StartLimitIntervalSec=0

[Service]
Type=simple
ExecStart=` + LifecycleScript + `
Restart=on-failure
RestartSec=5

[Install]
WantedBy=multi-user.target
EOF

cat > /etc/logrotate.d/starlog <<'EOF'
` + StarLogFile + ` {
  daily
  rotate 7
  maxsize 256M
  compress
  missingok
  notifempty
  copytruncate
}
EOF

cat > ` + PrometheusConfPath + ` <<'EOF'
{{.Prometheus}}EOF

cat > ` + AgentConfigPath + ` <<'EOF'
{{.Agent}}
EOF

systemctl daemon-reload
systemctl enable --now ` + StarUnit + ` ` + LifecycleUnit + `
/opt/aws/amazon-cloudwatch-agent/bin/amazon-cloudwatch-agent-ctl -a fetch-config -m ec2 -s -c file:` + AgentConfigPath + `

deadline=$(( $(date +%s) + {{.HealthWaitSeconds}} ))
while [ "$(date +%s)" -lt "$deadline" ]; do
  if curl -sf -m 2 -o /dev/null http://127.0.0.1:{{.Port}}/health; then
    echo "star healthy"
    signal 0
    exit 0
  fi
  sleep 2
done
echo "star not healthy after {{.HealthWaitSeconds}}s"
signal 1
exit 1
`
