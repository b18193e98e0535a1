package server

import (
	"net/http"
	"strings"

	"github.com/starlog/starlog/shared/api"
)

// InternalPrefix is the path prefix of starlog's own endpoints beyond S2's
// API: drain, handoff and the settle nudge peers send. With Public they
// are served on the internal listener only.
const InternalPrefix = "/v1/starlog/"

// Public is the handler for a listener that clients reach (through the load
// balancer) when the star serves its peers and operators on a separate
// internal listener (`star serve --internal-listen`, which serves s
// itself, with the profiler: Admin). It answers S2's API and /health;
// /metrics, /debug/ and every InternalPrefix path are 404, as if they did not exist. A request cannot
// pose as a peer's: HeaderForwardedBy is dropped, so the star resolves the
// stream's leader itself and forwards as usual.
func (s *Server) Public() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p := r.URL.EscapedPath(); p == "/metrics" || strings.HasPrefix(p, DebugPrefix) || strings.HasPrefix(p, InternalPrefix) || p == strings.TrimSuffix(InternalPrefix, "/") {
			s.writeError(w, r, &api.Error{Status: http.StatusNotFound, Code: api.CodeBadPath,
				Message: "no such endpoint: " + truncate(p, 128)})
			return
		}
		r.Header.Del(HeaderForwardedBy)
		s.ServeHTTP(w, r)
	})
}
