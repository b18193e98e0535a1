package durable

import (
	"context"
	"net/http"

	"github.com/starlog/starlog/star/durable/peer"
)

// The handler's own requests and its peer operations on streams another
// star leads are star/durable/peer's; this is their wiring.

// maxInternalBody bounds the body kept of an internal request's answer
// that is not a peer operation's (an error message).
const maxInternalBody = 256 << 10

// HeaderServerRequest marks a request the handler made itself (internal).
const HeaderServerRequest = peer.HeaderServerRequest

const (
	peerParam  = peer.Param
	hNotLeader = peer.HeaderNotLeader
)

// WithServerRequest marks ctx as a request a star made itself
// (peer.WithServerRequest): only such a request may run a peer operation.
func WithServerRequest(ctx context.Context) context.Context { return peer.WithServerRequest(ctx) }

func isServerRequest(ctx context.Context) bool { return peer.IsServerRequest(ctx) }

// internal serves a request through the handler as the admin (peer.Self).
func (h *Handler) internal(ctx context.Context, method, name, ct string, body []byte) peer.Answer {
	res := peer.Self{Handler: h, Prefix: h.prefix}.Do(ctx, method, name, nil, ct, body, maxInternalBody)
	res.Status = max(res.Status, http.StatusOK)
	return res
}

// peers reads and deletes any stream, on this star or on its leader.
func (h *Handler) peers() peer.Client {
	return peer.Client{Node: h.n, Basin: h.basin, Self: peer.Self{Handler: h, Prefix: h.prefix}}
}

// servePeer serves a peer operation on the stream name from this star's
// node (the caller checked the request is a server's).
func (h *Handler) servePeer(w http.ResponseWriter, r *http.Request, name, op string) {
	peer.Server{Node: h.n, Basin: h.basin, Log: h.log, Forget: func(name string) {
		h.states.drop(name)
		h.rows.Delete(name)
	}}.Serve(w, r, name, op)
}
