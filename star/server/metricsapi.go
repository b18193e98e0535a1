package server

import (
	"net/http"

	"github.com/starlog/starlog/shared/api"
)

// metricsAPI serves S2's metrics endpoints (/v1/metrics...).
func (s *Server) metricsAPI(w http.ResponseWriter, r *http.Request, rt route) {
	s.writeError(w, r, api.NotImplemented("the metrics API is not offered by this deployment"))
}
