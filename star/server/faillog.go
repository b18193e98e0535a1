package server

import (
	"context"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Failure lines are bounded: a flood of failing requests (a client
// resetting HTTP/2 streams as fast as it can, a storm of 503s in an
// outage) must not turn the log into the bottleneck. Past the rate,
// lines are counted and the next line written says how many were not.
const (
	failureLinesPerSec = 20
	failureLineBurst   = 100
)

// failureLog writes the "request failed" lines of a server.
type failureLog struct {
	log        *slog.Logger
	lim        *rate.Limiter
	suppressed atomic.Int64
}

func newFailureLog(log *slog.Logger) *failureLog {
	return &failureLog{log: log, lim: rate.NewLimiter(failureLinesPerSec, failureLineBurst)}
}

// failed logs that r failed at level, unless its client hung up (its
// context was cancelled: no failure of the server's, logged at Debug
// only) or the rate of failure lines is spent.
func (f *failureLog) failed(r *http.Request, level slog.Level, args ...any) {
	ctx := r.Context()
	if ctx.Err() == context.Canceled {
		level = slog.LevelDebug
	}
	if !f.log.Enabled(ctx, level) {
		return
	}
	if level > slog.LevelDebug && !f.lim.AllowN(time.Now(), 1) {
		f.suppressed.Add(1)
		return
	}
	args = append([]any{"method", r.Method, "path", r.URL.Path}, args...)
	if n := f.suppressed.Swap(0); n > 0 {
		args = append(args, "lines_suppressed", n)
	}
	f.log.Log(ctx, level, "request failed", args...)
}
