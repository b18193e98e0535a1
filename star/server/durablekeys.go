package server

import (
	"encoding/json"
	"net/http"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/durable"
)

// The operators' routes of the Durable Streams subscription keys (the
// webhook signing key and the wake tokens' key; docs/durable-streams.md).
// Like the other /v1/starlog/ routes they take the cluster's internal
// credential only, never an access token (auth.go), and with
// --internal-listen they are not on the client port (Public). Any star
// takes them: the keys are one metastore row.
const (
	DurableKeysPath   = "/v1/starlog/durable/keys"
	DurableRotatePath = "/v1/starlog/durable/keys/rotate"
)

// RotateKeysRequest is the body of POST DurableRotatePath.
type RotateKeysRequest struct {
	// Emergency (a leaked key): the new key signs at once and every other
	// key is dropped, so wake tokens in flight are refused. Without it the
	// new key is published at once and signs after the publish lead.
	Emergency bool `json:"emergency"`
}

// DurableKeysResponse answers both routes: the keys after the call.
type DurableKeysResponse struct {
	Basin string            `json:"basin"`
	Keys  []durable.KeyInfo `json:"keys"`
}

// durableKeys lists the keys (GET DurableKeysPath).
func (s *Server) durableKeys(w http.ResponseWriter, r *http.Request) {
	if !s.durableOn(w, r) {
		return
	}
	keys, err := s.ds.SubscriptionKeys(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, DurableKeysResponse{Basin: s.ds.Basin(), Keys: keys})
}

// rotateDurableKeys adds a key (POST DurableRotatePath).
func (s *Server) rotateDurableKeys(w http.ResponseWriter, r *http.Request) {
	if !s.durableOn(w, r) {
		return
	}
	body, aerr := readBody(w, r, 4<<10, s.opts.BodyReadTimeout, api.BadJSON)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	var req RotateKeysRequest
	if len(body) > 0 {
		if err := json.Unmarshal(body, &req); err != nil {
			s.writeError(w, r, api.BadJSON("rotate request: %v", err))
			return
		}
	}
	keys, err := s.ds.RotateSubscriptionKeys(r.Context(), req.Emergency)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, DurableKeysResponse{Basin: s.ds.Basin(), Keys: keys})
}

func (s *Server) durableOn(w http.ResponseWriter, r *http.Request) bool {
	if s.ds == nil {
		s.writeError(w, r, api.NotImplemented("this star does not serve Durable Streams (--durable-prefix is empty)"))
		return false
	}
	return true
}
