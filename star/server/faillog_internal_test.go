package server

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"

	"golang.org/x/time/rate"

	"github.com/starlog/starlog/shared/api"
)

// A request whose client hung up is not a failure of the server's: no
// ERROR or WARN line (20,000 HTTP/2 rapid resets gave 15,055 ERROR lines
// before). Real failures are logged, at most the burst and rate allow,
// and the next line written counts the ones left out.
func TestFailureLines(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
	s := &Server{log: log, failures: newFailureLog(log)}
	f := s.failures

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 1000 {
		r := httptest.NewRequestWithContext(ctx, "POST", "/v1/streams/s/records", nil)
		s.writeError(httptest.NewRecorder(), r, context.Canceled)
		s.writeError(httptest.NewRecorder(), r, api.Unavailable("stopped waiting for the acknowledgement"))
	}
	if buf.Len() != 0 {
		t.Fatalf("hung-up requests logged:\n%.300s", buf.String())
	}

	for range 1000 {
		s.writeError(httptest.NewRecorder(), httptest.NewRequest("GET", "/v1/basins", nil), errors.New("boom"))
	}
	lines := strings.Count(buf.String(), "\n")
	if lines < failureLineBurst || lines > failureLineBurst+failureLinesPerSec {
		t.Fatalf("1000 failures wrote %d lines, want about the burst of %d", lines, failureLineBurst)
	}
	f.lim = rate.NewLimiter(rate.Inf, 1) // the rate refilled
	buf.Reset()
	f.failed(httptest.NewRequest("GET", "/v1/basins", nil), slog.LevelWarn, "status", 503)
	if !strings.Contains(buf.String(), "lines_suppressed=") {
		t.Fatalf("the line after a suppressed run does not count them: %s", buf.String())
	}
}
