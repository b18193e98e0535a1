package server

import (
	"context"
	"errors"
	"net/http"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/node"
)

func (s *Server) checkTail(w http.ResponseWriter, r *http.Request, basin, name string) {
	create, err := streamConfigHeader(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	tail, terr := s.n.CheckTail(r.Context(), basin, name, create)
	if terr != nil {
		s.writeError(w, r, terr)
		return
	}
	writeBody(w, http.StatusOK, api.ContentTypeJSON, api.EncodeTailJSON(tail))
}

// append serves POST …/records: an S2S append session, or one batch in
// protobuf or JSON (raw or base64 by s2-format).
func (s *Server) append(w http.ResponseWriter, r *http.Request, basin, name string) {
	r = withClientConn(r)
	create, err := streamConfigHeader(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	var in *api.AppendInput
	switch api.ParseMediaType(r.Header.Get("Content-Type")) {
	case api.MediaS2S:
		s.appendSession(w, r, basin, name, create)
		return
	case api.MediaProto:
		body, err := readBody(w, r, api.MaxAppendProtoBodyBytes, s.opts.BodyReadTimeout, api.BadProto)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if in, err = api.DecodeAppendProto(body); err != nil {
			s.writeError(w, r, err)
			return
		}
	case api.MediaJSON, api.MediaNone:
		f, err := format(r)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		body, err := readBody(w, r, api.MaxAppendJSONBodyBytes, s.opts.BodyReadTimeout, api.BadJSON)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if in, err = api.DecodeAppendJSON(body, f); err != nil {
			s.writeError(w, r, err)
			return
		}
	default:
		s.writeError(w, r, api.BadHeader("unsupported content-type %q: want application/json, application/protobuf or s2s/proto",
			truncate(r.Header.Get("Content-Type"), 64)))
		return
	}
	if err := checkCommands(r.Context(), basin, name, in); err != nil {
		s.writeError(w, r, err)
		return
	}
	sp, serr := s.streamSpec(r, basin, name)
	if serr != nil {
		s.writeError(w, r, serr)
		return
	}
	if perr := sp.refuseProducer(in); perr != nil {
		s.writeError(w, r, perr)
		return
	}
	sp.encrypt(in)
	ack, aerr := s.n.Append(r.Context(), basin, name, in, create)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	s.appended(basin, name, api.MeteredBytes(in.Records))
	if wantsProto(r) {
		writeBody(w, http.StatusOK, api.ContentTypeProto, api.EncodeAppendAckProto(ack))
		return
	}
	writeBody(w, http.StatusOK, api.ContentTypeJSON, api.EncodeAppendAckJSON(ack))
}

// read serves GET …/records: an S2S read session (Content-Type s2s/proto),
// an SSE session (Accept: text/event-stream), or one batch in protobuf or
// JSON.
func (s *Server) read(w http.ResponseWriter, r *http.Request, basin, name string) {
	create, err := streamConfigHeader(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if api.ParseMediaType(r.Header.Get("Content-Type")) == api.MediaS2S {
		s.readSession(w, r, basin, name, create)
		return
	}
	if api.ParseMediaType(r.Header.Get("Accept")) == api.MediaSSE {
		s.sseSession(w, r, basin, name, create)
		return
	}
	proto := wantsProto(r)
	f := api.FormatRaw
	if !proto {
		if f, err = format(r); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	q, err := query(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	req, err := api.ParseReadQuery(q, api.ReadUnary)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// A long poll must not hold up shutdown, nor outlive its token:
	// draining ends it, and so does its token's revocation or expiry.
	ctx, cancel := s.sessionContext(r)
	defer cancel()
	sp, serr := s.streamSpec(r, basin, name)
	if serr != nil {
		s.writeError(w, r, serr)
		return
	}
	b, rerr := s.unaryRead(ctx, basin, name, req, create)
	if rerr != nil {
		if s.drain.Err() != nil || errors.Is(context.Cause(ctx), errDraining) {
			rerr = errServerDraining() // see sessionErr
		} else if e := credentialErr(ctx); e != nil {
			rerr = e
		}
		s.writeError(w, r, rerr)
		return
	}
	// The metrics count what is stored, as for appends (encrypted: sealed).
	s.usage.record(basin, useReadOps, 1)
	s.usage.record(basin, useReadBytes, float64(api.MeteredBytes(b.Records)))
	if derr := sp.decrypt(&b); derr != nil {
		s.writeError(w, r, derr)
		return
	}
	if proto {
		writeBody(w, http.StatusOK, api.ContentTypeProto, api.EncodeReadBatchProto(&b))
		return
	}
	writeBody(w, http.StatusOK, api.ContentTypeJSON, api.EncodeReadBatchJSON(&b, f))
}

// unaryRead serves a unary read as node.Read does. A read with a wait (a long
// poll) is counted in the sessions gauge (kind long_poll) from when its
// start is placed, so a record appended from then on is one it returns,
// until it answers.
func (s *Server) unaryRead(ctx context.Context, basin, name string, req api.ReadRequest, create *api.StreamConfig) (api.ReadBatch, error) {
	if req.Wait == nil || *req.Wait <= 0 {
		return s.n.Read(ctx, basin, name, req, create)
	}
	c, err := s.n.OpenRead(ctx, basin, name, req, node.ReadOptions{Create: create})
	if err != nil {
		return api.ReadBatch{}, err
	}
	defer c.Close()
	polls := s.sessions.WithLabelValues("long_poll")
	polls.Inc()
	defer polls.Dec()
	ev, err := c.Next(ctx)
	if err != nil || ev.Kind != node.EventBatch {
		return api.ReadBatch{}, err
	}
	return ev.Batch, nil
}
