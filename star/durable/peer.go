package durable

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/node"
)

// Peer operations: the handler reads (and deletes) streams it may not
// lead — a fork's source, a soft-deleted source a fork's deletion
// cascades to — so it tries the node first and, when another star leads
// the stream (*node.NotLeaderError), asks that star through its own
// internal request path (h.internal: forwarded to the leader with the
// stars' internal credential). There the request is a peer operation on
// the stream's path, served from the leader's node without the
// protocol's folding: raw records, so honoured only for requests a
// server made (WithServerRequest), never for a client's.
const (
	// peerParam names the peer operation in the query: peerTail,
	// peerRecords (GET) or peerStream (DELETE). A client sending it is 400.
	peerParam   = "starlog-peer"
	peerTail    = "tail"
	peerRecords = "records"
	peerStream  = "stream"
	// hPeer echoes the operation on its answer: a star that does not
	// know the operation (an older version) serves a protocol read
	// instead, which must not be taken for records.
	hPeer = "Starlog-Durable-Peer"
	// hPeerTail is the tail seq num a peerTail answers.
	hPeerTail = "Starlog-Durable-Peer-Tail"
	// hNotLeader is star/server's HeaderNotLeader: the answering star
	// does not lead the stream (its forwarder re-resolves the lease).
	hNotLeader = "Starlog-Not-Leader"
	// peerTimeout bounds one peer operation, hop and retries included.
	peerTimeout = 10 * time.Second
	// maxPeerBody bounds a peer answer: one unary read (1,000 records,
	// 1 MiB metered) encoded, with room for the protobuf framing.
	maxPeerBody = 2 * api.MaxBatchMeteredBytes
)

type serverRequestKey struct{}

// WithServerRequest marks ctx as a request a star made itself (this
// handler's internal requests, and star/server's for a request that
// carries the stars' internal credential): only such a request may run a
// peer operation. Nothing a client sends sets it.
func WithServerRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, serverRequestKey{}, true)
}

func isServerRequest(ctx context.Context) bool {
	v, _ := ctx.Value(serverRequestKey{}).(bool)
	return v
}

// peerTailOf is the durable tail of any stream: from this star's node,
// or from the star that leads it.
func (h *Handler) peerTailOf(ctx context.Context, name string) (uint64, error) {
	pos, err := h.n.CheckTail(ctx, h.basin, name, nil)
	if _, ok := errors.AsType[*node.NotLeaderError](err); !ok {
		return pos.SeqNum, err
	}
	res, err := h.askLeader(ctx, http.MethodGet, name, url.Values{peerParam: {peerTail}}, peerTail)
	if err != nil {
		return 0, err
	}
	v, perr := strconv.ParseUint(res.header.Get(hPeerTail), 10, 64)
	if perr != nil {
		return 0, fmt.Errorf("durable: tail of %s from its leader: %q", name, res.header.Get(hPeerTail))
	}
	return v, nil
}

// peerRead is one unary read of any stream, as node.Read: from this
// star's node, or from the star that leads it (never waiting there).
func (h *Handler) peerRead(ctx context.Context, name string, req api.ReadRequest) (api.ReadBatch, error) {
	b, err := h.n.Read(ctx, h.basin, name, req, nil)
	if _, ok := errors.AsType[*node.NotLeaderError](err); !ok {
		return b, err
	}
	q := req.Query()
	q.Del("wait")
	q.Set(peerParam, peerRecords)
	res, err := h.askLeader(ctx, http.MethodGet, name, q, peerRecords)
	if err != nil {
		return api.ReadBatch{}, err
	}
	if ct := res.header.Get("Content-Type"); ct != api.ContentTypeProto {
		return api.ReadBatch{}, fmt.Errorf("durable: read of %s from its leader answered %q", name, ct)
	}
	batch, derr := api.DecodeReadBatchProto(res.body)
	if derr != nil {
		return api.ReadBatch{}, fmt.Errorf("durable: read of %s from its leader: %w", name, derr)
	}
	return *batch, nil
}

// peerDeleteStream deletes name's starlog stream on the star that leads
// it, so the leader drops the stream it holds open (as star/server
// forwards an S2 delete): deleted elsewhere, only its rows would say so,
// and the leader would go on serving its cached stream.
func (h *Handler) peerDeleteStream(ctx context.Context, name string) error {
	if h.n.LeaderOf(ctx, h.basin, name) == nil {
		return h.n.DeleteStream(ctx, h.basin, name)
	}
	_, err := h.askLeader(ctx, http.MethodDelete, name, url.Values{peerParam: {peerStream}}, peerStream)
	return err
}

// askLeader runs a peer operation through the handler's internal request
// path, which forwards it to the stream's leader (or serves it here when
// the lease came to this star meanwhile), within peerTimeout. An error
// answer comes back as the *api.Error the peer's node returned (404,
// 416, …); a leader that keeps moving is 503 unavailable, not a
// NotLeaderError, which would name the stream this request serves.
func (h *Handler) askLeader(ctx context.Context, method, name string, q url.Values, op string) (internalResult, error) {
	ctx, cancel := context.WithTimeout(ctx, peerTimeout)
	defer cancel()
	res := h.serveInternal(ctx, method, name, q, "", nil, maxPeerBody)
	switch {
	case ctx.Err() != nil:
		// A hop cut off may have written nothing: never take that for an
		// empty answer.
		return res, fmt.Errorf("durable: %s of %s on its leader: %w", op, name, ctx.Err())
	case res.status == 0:
		return res, api.Unavailable("the leader of stream %s did not answer; retry", name)
	case res.truncated:
		return res, fmt.Errorf("durable: %s of %s on its leader: answer over %d bytes", op, name, maxPeerBody)
	case res.status == http.StatusOK && res.header.Get(hPeer) == op:
		return res, nil
	case res.status == http.StatusOK:
		// An older star (a rolling upgrade): retryable once it is replaced.
		return res, api.Unavailable("the leader of stream %s does not serve peer operations (%s); retry", name, op)
	case res.header.Get(hNotLeader) != "":
		e := api.Unavailable("the leader of stream %s moved; retry", name)
		e.RetryAfter = time.Second
		return res, e
	}
	e := api.ParseError(res.status, res.body)
	if s, err := strconv.ParseUint(res.header.Get("Retry-After"), 10, 64); err == nil && s > 0 {
		e.RetryAfter = api.Seconds(s) // saturating, never wrapping
	}
	return res, e
}

// servePeer serves a peer operation on the stream name from this star's
// node (the caller checked the request is a server's).
func (h *Handler) servePeer(w http.ResponseWriter, r *http.Request, name, op string) {
	ctx, cancel := context.WithTimeout(r.Context(), peerTimeout)
	defer cancel()
	hd := w.Header()
	switch {
	case op == peerTail && r.Method == http.MethodGet:
		pos, err := h.n.CheckTail(ctx, h.basin, name, nil)
		if err != nil {
			h.writePeerErr(w, err)
			return
		}
		hd.Set(hPeerTail, strconv.FormatUint(pos.SeqNum, 10))
	case op == peerRecords && r.Method == http.MethodGet:
		q, qerr := api.ParseQuery(r.URL.RawQuery)
		if qerr != nil {
			h.writePeerErr(w, qerr)
			return
		}
		req, rerr := api.ParseReadQuery(q, api.ReadUnary)
		if rerr != nil {
			h.writePeerErr(w, rerr)
			return
		}
		req.Wait = nil // bounded and without a wait: never follows the tail
		b, err := h.n.Read(ctx, h.basin, name, req, nil)
		if err != nil {
			h.writePeerErr(w, err)
			return
		}
		hd.Set("Content-Type", api.ContentTypeProto)
		hd.Set(hPeer, op)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(api.EncodeReadBatchProto(&b))
		return
	case op == peerStream && r.Method == http.MethodDelete:
		if err := h.n.DeleteStream(ctx, h.basin, name); err != nil && !isStatus(err, http.StatusNotFound) {
			h.writePeerErr(w, err)
			return
		}
		// The caller removed the row: forget this star's copies of it.
		h.states.drop(name)
		h.rows.Delete(name)
	default:
		h.writePeerErr(w, api.BadQuery("unknown peer operation %s %q", r.Method, op))
		return
	}
	hd.Set(hPeer, op)
	w.WriteHeader(http.StatusOK)
}

// writePeerErr answers a peer operation's error as the node's API error
// (JSON, as S2 answers it), so the asking star gets the same typed error
// back (askLeader); a NotLeaderError also sets hNotLeader, so the
// forwarding star resolves the lease again.
func (h *Handler) writePeerErr(w http.ResponseWriter, err error) {
	if nl, ok := errors.AsType[*node.NotLeaderError](err); ok {
		w.Header().Set(hNotLeader, cmp.Or(nl.Leader.Star, "-"))
	}
	e, ok := errors.AsType[*api.Error](err)
	switch {
	case ok:
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		e = api.Unavailable("peer operation cancelled or timed out")
	default:
		h.log.Error("peer operation failed", "err", err)
		e = api.Other("internal error")
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(e.RetryAfter.Seconds()+0.999))))
	}
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSON())
}
