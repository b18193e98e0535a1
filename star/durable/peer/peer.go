// Package peer is how the Durable Streams handler (star/durable) reaches
// streams another star leads. The handler reads (and deletes) streams it
// may not lead — a fork's source, a soft-deleted source a fork's deletion
// cascades to — so a Client tries the node first and, when another star
// leads the stream (*node.NotLeaderError), asks that star through the
// handler's own request path (Self: forwarded to the leader with the
// stars' internal credential). There the request is a peer operation on
// the stream's path, which a Server serves from the leader's node
// without the protocol's folding: raw records, so honoured only for
// requests a server made (WithServerRequest), never for a client's.
package peer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/node"
)

const (
	// Param names the peer operation in the query: Tail, Records (GET)
	// or Stream (DELETE). A client sending it is 400.
	Param   = "starlog-peer"
	Tail    = "tail"
	Records = "records"
	Stream  = "stream"
	// hPeer echoes the operation on its answer: a star that does not
	// know the operation (an older version) serves a protocol read
	// instead, which must not be taken for records.
	hPeer = "Starlog-Durable-Peer"
	// hPeerTail is the tail seq num a Tail answers.
	hPeerTail = "Starlog-Durable-Peer-Tail"
	// HeaderNotLeader is star/server's HeaderNotLeader: the answering
	// star does not lead the stream (its forwarder re-resolves the lease).
	HeaderNotLeader = "Starlog-Not-Leader"
	// Timeout bounds one peer operation, hop and retries included.
	Timeout = 10 * time.Second
	// maxPeerBody bounds a peer answer: one unary read (1,000 records,
	// 1 MiB metered) encoded, with room for the protobuf framing.
	maxPeerBody = 2 * api.MaxBatchMeteredBytes
)

type serverRequestKey struct{}

// WithServerRequest marks ctx as a request a star made itself (the
// handler's own requests, Self, and star/server's for a request that
// carries the stars' internal credential): only such a request may run a
// peer operation. Nothing a client sends sets it.
func WithServerRequest(ctx context.Context) context.Context {
	return context.WithValue(ctx, serverRequestKey{}, true)
}

// IsServerRequest reports whether ctx is a request a star made itself.
func IsServerRequest(ctx context.Context) bool {
	v, _ := ctx.Value(serverRequestKey{}).(bool)
	return v
}

// Client runs the handler's reads and deletes of any stream: on this
// star's node, or on the star that leads the stream.
type Client struct {
	Node  *node.Node
	Basin string
	// Self serves the handler's own requests; one for another star's
	// stream is forwarded to that star.
	Self Self
}

// Tail is the durable tail of any stream: from this star's node, or
// from the star that leads it.
func (c Client) Tail(ctx context.Context, name string) (uint64, error) {
	pos, err := c.Node.CheckTail(ctx, c.Basin, name, nil)
	if _, ok := errors.AsType[*node.NotLeaderError](err); !ok {
		return pos.SeqNum, err
	}
	res, err := c.ask(ctx, http.MethodGet, name, url.Values{Param: {Tail}}, Tail)
	if err != nil {
		return 0, err
	}
	v, perr := strconv.ParseUint(res.Header.Get(hPeerTail), 10, 64)
	if perr != nil {
		return 0, fmt.Errorf("durable: tail of %s from its leader: %q", name, res.Header.Get(hPeerTail))
	}
	return v, nil
}

// Read is one unary read of any stream, as node.Read: from this star's
// node, or from the star that leads it (never waiting there).
func (c Client) Read(ctx context.Context, name string, req api.ReadRequest) (api.ReadBatch, error) {
	b, err := c.Node.Read(ctx, c.Basin, name, req, nil)
	if _, ok := errors.AsType[*node.NotLeaderError](err); !ok {
		return b, err
	}
	q := req.Query()
	q.Del("wait")
	q.Set(Param, Records)
	res, err := c.ask(ctx, http.MethodGet, name, q, Records)
	if err != nil {
		return api.ReadBatch{}, err
	}
	if ct := res.Header.Get("Content-Type"); ct != api.ContentTypeProto {
		return api.ReadBatch{}, fmt.Errorf("durable: read of %s from its leader answered %q", name, ct)
	}
	batch, derr := api.DecodeReadBatchProto(res.Body)
	if derr != nil {
		return api.ReadBatch{}, fmt.Errorf("durable: read of %s from its leader: %w", name, derr)
	}
	return *batch, nil
}

// DeleteStream deletes name's starlog stream on the star that leads it,
// so the leader drops the stream it holds open (as star/server forwards
// an S2 delete): deleted elsewhere, only its rows would say so, and the
// leader would go on serving its cached stream.
func (c Client) DeleteStream(ctx context.Context, name string) error {
	if c.Node.LeaderOf(ctx, c.Basin, name) == nil {
		return c.Node.DeleteStream(ctx, c.Basin, name)
	}
	_, err := c.ask(ctx, http.MethodDelete, name, url.Values{Param: {Stream}}, Stream)
	return err
}

// ask runs a peer operation through the handler's own request path,
// which forwards it to the stream's leader (or serves it here when the
// lease came to this star meanwhile), within Timeout. An error answer
// comes back as the *api.Error the peer's node returned (404, 416, …); a
// leader that keeps moving is 503 unavailable, not a NotLeaderError,
// which would name the stream this request serves.
func (c Client) ask(ctx context.Context, method, name string, q url.Values, op string) (Answer, error) {
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	res := c.Self.Do(ctx, method, name, q, "", nil, maxPeerBody)
	switch {
	case ctx.Err() != nil:
		// A hop cut off may have written nothing: never take that for an
		// empty answer.
		return res, fmt.Errorf("durable: %s of %s on its leader: %w", op, name, ctx.Err())
	case res.Status == 0:
		return res, api.Unavailable("the leader of stream %s did not answer; retry", name)
	case res.Truncated:
		return res, fmt.Errorf("durable: %s of %s on its leader: answer over %d bytes", op, name, maxPeerBody)
	case res.Status == http.StatusOK && res.Header.Get(hPeer) == op:
		return res, nil
	case res.Status == http.StatusOK:
		// An older star (a rolling upgrade): retryable once it is replaced.
		return res, api.Unavailable("the leader of stream %s does not serve peer operations (%s); retry", name, op)
	case res.Header.Get(HeaderNotLeader) != "":
		e := api.Unavailable("the leader of stream %s moved; retry", name)
		e.RetryAfter = time.Second
		return res, e
	}
	e := api.ParseError(res.Status, res.Body)
	if s, err := strconv.ParseUint(res.Header.Get("Retry-After"), 10, 64); err == nil && s > 0 {
		e.RetryAfter = api.Seconds(s) // saturating, never wrapping
	}
	return res, e
}

// Server serves peer operations on the streams of one basin from this
// star's node.
type Server struct {
	Node  *node.Node
	Basin string
	Log   *slog.Logger
	// Forget drops this star's copies of a stream's row and fold once a
	// peer deleted the stream (the caller removed the row).
	Forget func(name string)
}

// Serve serves a peer operation on the stream name (the caller checked
// the request is a server's: IsServerRequest).
func (s Server) Serve(w http.ResponseWriter, r *http.Request, name, op string) {
	ctx, cancel := context.WithTimeout(r.Context(), Timeout)
	defer cancel()
	hd := w.Header()
	switch {
	case op == Tail && r.Method == http.MethodGet:
		pos, err := s.Node.CheckTail(ctx, s.Basin, name, nil)
		if err != nil {
			s.writeErr(w, err)
			return
		}
		hd.Set(hPeerTail, strconv.FormatUint(pos.SeqNum, 10))
	case op == Records && r.Method == http.MethodGet:
		q, qerr := api.ParseQuery(r.URL.RawQuery)
		if qerr != nil {
			s.writeErr(w, qerr)
			return
		}
		req, rerr := api.ParseReadQuery(q, api.ReadUnary)
		if rerr != nil {
			s.writeErr(w, rerr)
			return
		}
		req.Wait = nil // bounded and without a wait: never follows the tail
		b, err := s.Node.Read(ctx, s.Basin, name, req, nil)
		if err != nil {
			s.writeErr(w, err)
			return
		}
		hd.Set("Content-Type", api.ContentTypeProto)
		hd.Set(hPeer, op)
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(api.EncodeReadBatchProto(&b))
		return
	case op == Stream && r.Method == http.MethodDelete:
		err := s.Node.DeleteStream(ctx, s.Basin, name)
		if e, ok := errors.AsType[*api.Error](err); err != nil && (!ok || e.Status != http.StatusNotFound) {
			s.writeErr(w, err)
			return
		}
		s.Forget(name)
	default:
		s.writeErr(w, api.BadQuery("unknown peer operation %s %q", r.Method, op))
		return
	}
	hd.Set(hPeer, op)
	w.WriteHeader(http.StatusOK)
}

// writeErr answers a peer operation's error as the node's API error
// (JSON, as S2 answers it), so the asking star gets the same typed error
// back (Client.ask); a NotLeaderError also sets HeaderNotLeader, so the
// forwarding star resolves the lease again.
func (s Server) writeErr(w http.ResponseWriter, err error) {
	if nl, ok := errors.AsType[*node.NotLeaderError](err); ok {
		w.Header().Set(HeaderNotLeader, cmp.Or(nl.Leader.Star, "-"))
	}
	e, ok := errors.AsType[*api.Error](err)
	switch {
	case ok:
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		e = api.Unavailable("peer operation cancelled or timed out")
	default:
		s.Log.Error("peer operation failed", "err", err)
		e = api.Other("internal error")
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(max(1, int(e.RetryAfter.Seconds()+0.999))))
	}
	w.Header().Set("Content-Type", api.ContentTypeJSON)
	w.WriteHeader(e.Status)
	_, _ = w.Write(e.JSON())
}
