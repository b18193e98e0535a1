package server

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strings"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/node"
)

// HandoffRequest is the body of POST /v1/starlog/streams/{s}/handoff
// (starlog's admin extension; the basin is the s2-basin header).
type HandoffRequest struct {
	// To is the star to give the stream to; empty releases it to whichever
	// star gets its next request.
	To string `json:"to"`
}

// HandoffResponse reports a completed handoff.
type HandoffResponse struct {
	Stream   string `json:"stream"`
	From     string `json:"from"`
	To       string `json:"to,omitempty"`
	Frontier uint64 `json:"frontier"`
	TookMs   int64  `json:"took_ms"`
}

// handoff moves a stream to another star. Any star takes the call: one
// that does not lead the stream forwards it to the live leader.
func (s *Server) handoff(w http.ResponseWriter, r *http.Request, name string) {
	basin, aerr := basinHeader(r)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	if err := api.ValidateStreamName(name); err != nil {
		s.writeError(w, r, err)
		return
	}
	body, aerr := readBody(w, r, 4<<10, s.opts.BodyReadTimeout, api.BadJSON)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	var req HandoffRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			s.writeError(w, r, api.BadJSON("handoff request: %v", err))
			return
		}
	}
	if r.Header.Get(HeaderForwardedBy) == "" {
		if nl := s.n.LeaderOf(r.Context(), basin, name); nl != nil {
			// The body was consumed: forward a fresh copy.
			r.Body = http.NoBody
			r.ContentLength = 0
			if b, err := json.Marshal(req); err == nil {
				r.Body, r.ContentLength = newBody(b), int64(len(b))
			}
			if s.fwd.serve(w, r, nl, nil) {
				return
			}
		}
	}
	res, err := s.n.Handoff(r.Context(), basin, name, req.To)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, HandoffResponse{Stream: name, From: s.n.StarID(), To: res.To, Frontier: res.Frontier, TookMs: res.Took.Milliseconds()})
}

// settleFor takes a closing peer's nudge (node.SettleRequest): this star
// starts settling the peer's chains in the background and answers 202. A
// nudge naming a basin is a peer's basin delete: this star stops leading
// the basin's streams before it answers 200 (node.RecheckBasin).
func (s *Server) settleFor(w http.ResponseWriter, r *http.Request) {
	body, aerr := readBody(w, r, 4<<10, s.opts.BodyReadTimeout, api.BadJSON)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	var req node.SettleRequest
	if err := json.Unmarshal(body, &req); err != nil {
		s.writeError(w, r, api.BadJSON("settle request: %v", err))
		return
	}
	if req.Basin != "" {
		if err := s.n.RecheckBasin(r.Context(), req.Basin); err != nil {
			s.writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, req)
		return
	}
	if err := s.n.SettleFor(req.Star, req.Incarnation); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, req)
}

// fromLoopback reports whether r came from a loopback address.
func fromLoopback(r *http.Request) bool {
	ip, err := netip.ParseAddr(clientIP(r.RemoteAddr))
	return err == nil && ip.Unmap().IsLoopback()
}

func newBody(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }

// DebugPrefix is the path prefix of the Go profiler (net/http/pprof).
const DebugPrefix = "/debug/"

// Admin is the handler for the internal listener: everything s serves, plus
// the Go profiler under /debug/pprof/ for operators (CPU, heap, goroutine,
// mutex and block profiles of a live star). The profiler is never on the
// client port (Public answers 404): a profile reveals the process's
// internals and a CPU profile holds a request open for its duration. On
// the internal listener it answers an operator on the star's own host
// (a loopback address) or a request carrying the cluster's internal
// credential; anything else is 403 (an open star answers everyone).
func (s *Server) Admin() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, DebugPrefix) {
			if !s.keys.IsOpen() && !fromLoopback(r) && !s.keys.IsInternal(r.Header.Get(auth.HeaderInternal)) {
				s.writeError(w, r, auth.Denied("the profiler answers the star's own host, or the cluster's internal credential (%s)", auth.HeaderInternal))
				return
			}
			mux.ServeHTTP(w, r)
			return
		}
		s.ServeHTTP(w, r)
	})
}
