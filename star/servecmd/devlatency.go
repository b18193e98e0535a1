package servecmd

import (
	"fmt"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/objstore"
	objfaults "github.com/starlog/starlog/shared/objstore/faults"
)

// maxDevLatency bounds --dev-express-latency's p99 (a typo should not make
// every Express request take minutes).
const maxDevLatency = 10 * time.Second

// parseDevLatency reads --dev-express-latency: "P50,P99" (durations, P99 ≥
// P50 > 0), a log-normal latency; empty is none.
func parseDevLatency(spec string) (objfaults.Latency, error) {
	if spec == "" {
		return nil, nil
	}
	a, b, ok := strings.Cut(spec, ",")
	if !ok {
		return nil, fmt.Errorf("--dev-express-latency %q: want P50,P99 (for example 5ms,20ms)", spec)
	}
	p50, err := time.ParseDuration(strings.TrimSpace(a))
	if err != nil {
		return nil, fmt.Errorf("--dev-express-latency %q: p50: %w", spec, err)
	}
	p99, err := time.ParseDuration(strings.TrimSpace(b))
	if err != nil {
		return nil, fmt.Errorf("--dev-express-latency %q: p99: %w", spec, err)
	}
	if p50 <= 0 || p99 < p50 || p99 > maxDevLatency {
		return nil, fmt.Errorf("--dev-express-latency %q: want 0 < P50 ≤ P99 ≤ %v", spec, maxDevLatency)
	}
	return objfaults.LogNormal(p50, p99), nil
}

// withDevLatency wraps objs so that every request on the Express buckets
// takes a latency drawn from l (nil: objs as it is): `star dev` on S3
// Express-like timings, for benchmarks (make bench-kafka).
func withDevLatency(objs objstore.Store, express []string, l objfaults.Latency) objstore.Store {
	if l == nil {
		return objs
	}
	w := objfaults.Wrap(objs)
	for _, b := range express {
		w.SetLatency(b, l)
	}
	return w
}
