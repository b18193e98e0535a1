package config

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/starlog/starlog/infra/userdata"
)

// AL2023ARM64Parameter is the public SSM parameter naming the current
// arm64 Amazon Linux 2023 image (where to look up a value for amiId).
const AL2023ARM64Parameter = "/aws/service/ami-amazon-linux-latest/al2023-ami-kernel-default-arm64"

// Policy is what the stars and the auditor functions must agree on
// (docs/design.md §9, §10): when a batch marker ripens, how big a settled object
// grows, how long a retired slot stays readable, when a silent star is
// dead. The stack renders it twice from this one value: as `star serve`
// flags in the stars' unit and, under the same names' environment
// fallbacks (EnvName), into every function's environment. Values are
// written as the star's flags take them (durations in Go syntax).
type Policy struct {
	SettleTriggerMiB    int
	SettleLinger        string
	SettleExpressLinger string
	SettleAgeCap        string
	SettleExpressAgeCap string
	SettleOutputCapMiB  int
	ReadGrace           string
	DeadAfter           string
}

// DefaultPolicy is docs/design.md §10's settlement defaults and the leader's
// dead-after bound, the same values the star's flags default to.
func DefaultPolicy() Policy {
	return Policy{
		SettleTriggerMiB:    8,
		SettleLinger:        "60s",
		SettleExpressLinger: "10s",
		SettleAgeCap:        "15m",
		SettleExpressAgeCap: "2m",
		SettleOutputCapMiB:  256,
		ReadGrace:           "5m",
		DeadAfter:           "30s",
	}
}

// PolicyFlagNames are the star flags the policy sets, in render order.
func PolicyFlagNames() []string {
	return []string{"settle-trigger-mib", "settle-linger", "settle-express-linger", "settle-age-cap",
		"settle-express-age-cap", "settle-output-cap-mib", "read-grace", "dead-after"}
}

// Flags is the policy as `star serve` flags, in PolicyFlagNames order.
func (p Policy) Flags() []userdata.Flag {
	vals := []string{strconv.Itoa(p.SettleTriggerMiB), p.SettleLinger, p.SettleExpressLinger, p.SettleAgeCap,
		p.SettleExpressAgeCap, strconv.Itoa(p.SettleOutputCapMiB), p.ReadGrace, p.DeadAfter}
	out := make([]userdata.Flag, len(vals))
	for i, name := range PolicyFlagNames() {
		out[i] = userdata.Flag{Name: name, Value: vals[i]}
	}
	return out
}

// EnvName is the environment fallback of a star flag (star/servecmd:
// STARLOG_ + the flag upper-cased, dashes as underscores), which is also
// the variable a function reads for the same setting.
func EnvName(flag string) string {
	return "STARLOG_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// defaultRegistryHeartbeat is the star's --registry-heartbeat default.
const defaultRegistryHeartbeat = 10 * time.Second

// validate checks what the star and the functions would refuse at start:
// a star that refuses its flags never becomes healthy, so the deploy would
// only find out by rolling back.
func (p Policy) validate(starFlags map[string]string) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	dur := func(key, v string) time.Duration {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 || !flagValueRe.MatchString(v) {
			bad("%s %q: want a positive duration such as 90s or 15m", key, v)
			return 0
		}
		return d
	}
	linger, ageCap := dur("settleLinger", p.SettleLinger), dur("settleAgeCap", p.SettleAgeCap)
	xLinger, xAgeCap := dur("settleExpressLinger", p.SettleExpressLinger), dur("settleExpressAgeCap", p.SettleExpressAgeCap)
	dur("readGrace", p.ReadGrace)
	deadAfter := dur("deadAfter", p.DeadAfter)
	if linger > ageCap && ageCap > 0 {
		bad("settleLinger %s exceeds settleAgeCap %s", p.SettleLinger, p.SettleAgeCap)
	}
	if xLinger > xAgeCap && xAgeCap > 0 {
		bad("settleExpressLinger %s exceeds settleExpressAgeCap %s", p.SettleExpressLinger, p.SettleExpressAgeCap)
	}
	if p.SettleTriggerMiB < 1 {
		bad("settleTriggerMiB %d: want at least 1", p.SettleTriggerMiB)
	}
	if p.SettleOutputCapMiB < p.SettleTriggerMiB {
		bad("settleOutputCapMiB %d is below settleTriggerMiB %d", p.SettleOutputCapMiB, p.SettleTriggerMiB)
	}
	beat := defaultRegistryHeartbeat
	if v, ok := starFlags["registry-heartbeat"]; ok {
		if beat = dur("starFlags registry-heartbeat", v); beat == 0 {
			return errs
		}
	}
	if deadAfter > 0 && deadAfter <= 2*beat {
		bad("deadAfter %s must exceed twice the stars' registry heartbeat (%s)", p.DeadAfter, beat)
	}
	return errs
}
