package server

import (
	"net/http"
	"sync/atomic"

	"github.com/starlog/starlog/shared/api"
)

// KafkaPath is where a star takes the Kafka group requests a peer
// forwards to the coordinator of their group (star/kafka, docs/kafka.md
// "Many stars"): starlog's internal endpoint, with the cluster's internal
// credential only.
const KafkaPath = "/v1/starlog/kafka"

// kafkaPeer holds the Kafka face's handler of KafkaPath (nil: no Kafka
// face on this star).
type kafkaPeer struct{ h atomic.Pointer[http.Handler] }

// ServeKafka sets the handler of KafkaPath: the Kafka face of this star,
// started after the server. Its requests carry their own bounds.
func (s *Server) ServeKafka(h http.Handler) { s.kafka.h.Store(&h) }

func (s *Server) serveKafka(w http.ResponseWriter, r *http.Request) {
	h := s.kafka.h.Load()
	if h == nil {
		s.writeError(w, r, api.NotImplemented("this star serves no Kafka face"))
		return
	}
	(*h).ServeHTTP(w, r)
}
