package faults

import (
	"fmt"
	"math"
	"math/rand/v2"
	"time"
)

// Latency is a distribution of request latencies.
type Latency interface {
	// Sample draws one latency using r.
	Sample(r *rand.Rand) time.Duration
	String() string
}

// Constant is a fixed latency.
func Constant(d time.Duration) Latency { return constant(max(d, 0)) }

type constant time.Duration

func (c constant) Sample(*rand.Rand) time.Duration { return time.Duration(c) }
func (c constant) String() string                  { return "constant(" + time.Duration(c).String() + ")" }

// Uniform draws uniformly from [lo, hi].
func Uniform(lo, hi time.Duration) Latency {
	lo = max(lo, 0)
	return uniform{lo: lo, hi: max(hi, lo)}
}

type uniform struct{ lo, hi time.Duration }

func (u uniform) Sample(r *rand.Rand) time.Duration {
	if u.hi == u.lo {
		return u.lo
	}
	return u.lo + time.Duration(r.Int64N(int64(u.hi-u.lo)+1))
}
func (u uniform) String() string { return fmt.Sprintf("uniform(%v, %v)", u.lo, u.hi) }

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263478740408408

// LogNormal is the log-normal distribution with the given median and 99th
// percentile (object store latencies are close to log-normal with a long
// tail). p99 below p50 is taken as p50 (no spread).
func LogNormal(p50, p99 time.Duration) Latency {
	p50 = max(p50, time.Nanosecond)
	p99 = max(p99, p50)
	return logNormal{
		p50: p50, p99: p99,
		mu:    math.Log(float64(p50)),
		sigma: (math.Log(float64(p99)) - math.Log(float64(p50))) / z99,
	}
}

type logNormal struct {
	p50, p99  time.Duration
	mu, sigma float64
}

func (l logNormal) Sample(r *rand.Rand) time.Duration {
	v := math.Exp(l.mu + l.sigma*r.NormFloat64())
	if v > float64(math.MaxInt64) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(v)
}
func (l logNormal) String() string { return fmt.Sprintf("lognormal(p50=%v, p99=%v)", l.p50, l.p99) }
