package kafka

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/starlog/starlog/star/auth"
)

// The coordinator's side of a forwarded group request (groupforward.go):
// server.KafkaPath on the star's S2 listener, which lets through only
// requests with the cluster's internal credential (or any on an open
// cluster). The request is answered as if its client had connected here:
// the client's token, sent along, is checked again here and governs what
// the request may do; the client's id and address are what
// DescribeGroups shows. It is never forwarded again: a star that no
// longer coordinates the group answers NOT_COORDINATOR, and the
// forwarding star looks for the new coordinator.

// PeerHandler is the handler of server.KafkaPath (set with
// server.Server.ServeKafka).
func (s *Server) PeerHandler() http.Handler { return http.HandlerFunc(s.servePeer) }

// forwardable lists the API keys a peer may forward: the group requests
// that one coordinator answers, and ListGroups (this star's own groups).
var forwardable = map[int16]bool{
	8: true, 9: true, 11: true, 12: true, 13: true, 14: true, 15: true, 16: true, 42: true,
}

func (s *Server) servePeer(w http.ResponseWriter, r *http.Request) {
	key, kerr1 := strconv.ParseInt(r.Header.Get(headerKafkaKey), 10, 16)
	version, kerr2 := strconv.ParseInt(r.Header.Get(headerKafkaVersion), 10, 16)
	if kerr1 != nil || kerr2 != nil || !forwardable[int16(key)] || !servedVersion(int16(key), int16(version)) {
		http.Error(w, "not a forwardable Kafka group request", http.StatusBadRequest)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxFrameBytes))
	if err != nil {
		http.Error(w, "reading the request: "+err.Error(), http.StatusBadRequest)
		return
	}
	req := kmsg.RequestForKey(int16(key))
	req.SetVersion(int16(version))
	if err := req.ReadFrom(body); err != nil {
		http.Error(w, "malformed "+kmsg.NameForKey(int16(key))+": "+err.Error(), http.StatusBadRequest)
		return
	}
	name := kmsg.NameForKey(int16(key))

	wait := RequestTimeout + groupWaitOf(req)
	if ms, err := strconv.ParseInt(r.Header.Get(headerKafkaWait), 10, 64); err == nil && ms > 0 && ms < wait.Milliseconds() {
		wait = time.Duration(ms) * time.Millisecond // compared first: no overflow
	}
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	stop := context.AfterFunc(s.ctx, cancel) // the face's Close ends it too
	defer stop()

	cs := &conn{s: s, client: r.Header.Get(headerKafkaClient), clientID: r.Header.Get(headerKafkaClientID), peer: true}
	token := auth.Bearer(r.Header.Get("Authorization"))
	if s.cfg.Open {
		p := auth.AdminPrincipal()
		cs.principal = &p
	} else {
		p, err := s.cfg.Authenticate(ctx, token, cs.client)
		if err == nil && p.AutoPrefixStreams {
			err = errors.New("the token prefixes stream names (auto_prefix_streams)")
		}
		if err != nil {
			s.requests.WithLabelValues(name, "refused").Inc()
			http.Error(w, "the client's token: "+errMessage(err), http.StatusUnauthorized)
			return
		}
		cs.principal, cs.token = &p, token
	}
	ctx, span := s.startSpan(ctx, req, true) // under the star's server span of this call
	resp, err := cs.serveGroup(withToken(ctx, token), req)
	s.endSpan(span, req, resp, err, true)
	if err != nil {
		s.requests.WithLabelValues(name, "refused").Inc()
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	s.requests.WithLabelValues(name, "peer").Inc()
	w.Header().Set("Content-Type", "application/octet-stream")
	_, _ = w.Write(resp.AppendTo(nil))
}
