package server

import (
	"bytes"
	"net/http"
	"slices"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
)

func (s *Server) listBasins(w http.ResponseWriter, r *http.Request) {
	req, err := parseList(r, api.MaxBasinNameLen)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	set := auth.FromContext(r.Context()).Scope.Basins
	var ok bool
	if req.Prefix, ok = set.Narrow(req.Prefix); !ok {
		writeJSON(w, http.StatusOK, api.ListBasinsResponse{})
		return
	}
	out, lerr := s.n.ListBasins(r.Context(), req)
	if lerr != nil {
		s.writeError(w, r, lerr)
		return
	}
	out.Basins = slices.DeleteFunc(out.Basins, func(b api.BasinInfo) bool { return !set.Contains(b.Name) })
	for i := range out.Basins {
		out.Basins[i].Location = s.opts.Location
	}
	out.HasMore = out.HasMore && set.Prefix // an exact set holds one name
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createBasin(w http.ResponseWriter, r *http.Request) {
	req, ok := decodeResource(s, w, r, api.DecodeCreateBasinRequest)
	if !ok || !s.checkLocation(w, r, req.Location) || !s.checkResource(w, r, auth.Request{Op: auth.CreateBasin, Basin: req.Basin}) {
		return
	}
	// Quotas are the operator's: setting them needs what reconfiguring does.
	if req.Config != nil && req.Config.Quotas != nil && !s.checkResource(w, r, auth.Request{Op: auth.ReconfigureBasin, Basin: req.Basin}) {
		return
	}
	info, result, cerr := s.n.ProvisionBasin(r.Context(), req, r.Header.Get(api.HeaderRequestToken))
	if cerr != nil {
		s.writeError(w, r, cerr)
		return
	}
	// S2 answers a repeated create 201 too; the header tells them apart.
	w.Header().Set(api.HeaderProvisionResult, result)
	info.Location = s.opts.Location
	writeJSON(w, http.StatusCreated, info)
}

// checkLocation refuses a basin asked for in a location this deployment
// does not serve (422 invalid): it has one, Options.Location.
func (s *Server) checkLocation(w http.ResponseWriter, r *http.Request, loc *string) bool {
	if loc == nil || *loc == s.opts.Location {
		return true
	}
	s.writeError(w, r, api.Invalid("location %q is not offered: this deployment serves %q", truncate(*loc, 64), s.opts.Location))
	return false
}

func (s *Server) getBasin(w http.ResponseWriter, r *http.Request, name string) {
	cfg, err := s.n.BasinConfig(r.Context(), name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}

func (s *Server) ensureBasin(w http.ResponseWriter, r *http.Request, name string) {
	if err := api.ValidateBasinName(name); err != nil {
		s.writeError(w, r, err)
		return
	}
	req, ok := decodeResource(s, w, r, api.DecodeEnsureBasinRequest)
	if !ok || !s.checkLocation(w, r, req.Location) {
		return
	}
	info, result, eerr := s.n.EnsureBasin(r.Context(), name, req)
	if eerr != nil {
		s.writeError(w, r, eerr)
		return
	}
	w.Header().Set(api.HeaderProvisionResult, result)
	status := http.StatusOK
	if result == api.ProvisionCreated {
		status = http.StatusCreated
	}
	info.Location = s.opts.Location
	writeJSON(w, status, info)
}

func (s *Server) reconfigureBasin(w http.ResponseWriter, r *http.Request, name string) {
	if err := api.ValidateBasinName(name); err != nil {
		s.writeError(w, r, err)
		return
	}
	rec, ok := decodeResource(s, w, r, api.DecodeBasinReconfiguration)
	if !ok {
		return
	}
	cfg, rerr := s.n.ReconfigureBasin(r.Context(), name, rec)
	if rerr != nil {
		s.writeError(w, r, rerr)
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}

func (s *Server) deleteBasin(w http.ResponseWriter, r *http.Request, name string) {
	if err := s.n.DeleteBasin(r.Context(), name); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeEmpty(w, http.StatusAccepted)
}

func (s *Server) listStreams(w http.ResponseWriter, r *http.Request, basin string) {
	req, err := parseList(r, api.MaxStreamNameLen)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	// The listing shows the streams of the token's scope, named as the
	// client knows them (auto_prefix_streams strips the prefix).
	p := auth.FromContext(r.Context())
	req.Prefix = p.StreamName(req.Prefix)
	if req.StartAfter != "" {
		req.StartAfter = p.StreamName(req.StartAfter)
	}
	var ok bool
	if req.Prefix, ok = p.Scope.Streams.Narrow(req.Prefix); !ok {
		writeJSON(w, http.StatusOK, api.ListStreamsResponse{})
		return
	}
	out, lerr := s.n.ListStreams(r.Context(), basin, req)
	if lerr != nil {
		s.writeError(w, r, lerr)
		return
	}
	out.Streams = slices.DeleteFunc(out.Streams, func(st api.StreamInfo) bool { return !p.Scope.Streams.Contains(st.Name) })
	out.HasMore = out.HasMore && p.Scope.Streams.Prefix // an exact set holds one name
	for i := range out.Streams {
		out.Streams[i].Name = p.ClientStream(out.Streams[i].Name)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) createStream(w http.ResponseWriter, r *http.Request, basin string) {
	req, ok := decodeResource(s, w, r, api.DecodeCreateStreamRequest)
	if !ok {
		return
	}
	p := auth.FromContext(r.Context())
	client := req.Stream
	req.Stream = p.StreamName(req.Stream)
	if !s.checkResource(w, r, auth.Request{Op: auth.CreateStream, Basin: basin, Stream: req.Stream}) {
		return
	}
	info, result, cerr := s.n.ProvisionStream(r.Context(), basin, req, r.Header.Get(api.HeaderRequestToken))
	if cerr != nil {
		s.writeError(w, r, cerr)
		return
	}
	info.Name = client
	w.Header().Set(api.HeaderProvisionResult, result)
	writeJSON(w, http.StatusCreated, info)
}

func (s *Server) getStream(w http.ResponseWriter, r *http.Request, basin, name string) {
	cfg, err := s.n.StreamConfig(r.Context(), basin, name)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}

func (s *Server) ensureStream(w http.ResponseWriter, r *http.Request, basin, name string) {
	cfg, ok := decodeResource(s, w, r, api.DecodeStreamConfig)
	if !ok {
		return
	}
	info, result, eerr := s.n.EnsureStream(r.Context(), basin, name, cfg)
	if eerr != nil {
		s.writeError(w, r, eerr)
		return
	}
	info.Name = auth.FromContext(r.Context()).ClientStream(info.Name)
	w.Header().Set(api.HeaderProvisionResult, result)
	status := http.StatusOK
	if result == api.ProvisionCreated {
		status = http.StatusCreated
	}
	writeJSON(w, status, info)
}

func (s *Server) reconfigureStream(w http.ResponseWriter, r *http.Request, basin, name string) {
	rec, ok := decodeResource(s, w, r, api.DecodeStreamReconfiguration)
	if !ok {
		return
	}
	cfg, rerr := s.n.ReconfigureStream(r.Context(), basin, name, rec)
	if rerr != nil {
		s.writeError(w, r, rerr)
		return
	}
	writeJSON(w, http.StatusOK, cfg)
}

func (s *Server) deleteStream(w http.ResponseWriter, r *http.Request, basin, name string) {
	if err := s.n.DeleteStream(r.Context(), basin, name); err != nil {
		s.writeError(w, r, err)
		return
	}
	writeEmpty(w, http.StatusAccepted)
}

// decodeResource reads a resource request's bounded JSON body and decodes
// it, answering the error itself when either fails.
func decodeResource[T any](s *Server, w http.ResponseWriter, r *http.Request, decode func([]byte) (T, *api.Error)) (T, bool) {
	var zero T
	body, err := readResourceBody(s, w, r)
	if err != nil {
		s.writeError(w, r, err)
		return zero, false
	}
	v, err := decode(body)
	if err != nil {
		s.writeError(w, r, err)
		return zero, false
	}
	return v, true
}

// readResourceBody reads a resource request's JSON body, bounded in size
// and time. As S2 does, a body that does not say it is JSON is 400
// bad_json, before any of it is read: the Content-Type must be
// application/json or application/*+json. Only a PUT (ensure), whose
// body is optional, may leave the Content-Type out, and then it must send
// no body (S2 ignores one; a star refuses it rather than drop the config
// it holds).
func readResourceBody(s *Server, w http.ResponseWriter, r *http.Request) ([]byte, *api.Error) {
	ct := r.Header.Get("Content-Type")
	switch mt := api.ParseMediaType(ct); {
	case mt == api.MediaJSON:
	case mt == api.MediaNone && r.Method == http.MethodPut:
		body, err := readBody(w, r, api.MaxResourceJSONBytes, s.opts.BodyReadTimeout, api.BadJSON)
		if err == nil && len(bytes.TrimSpace(body)) > 0 {
			err = api.BadJSON("a request body needs Content-Type: %s", api.ContentTypeJSON)
		}
		return nil, err
	case mt == api.MediaNone:
		return nil, api.BadJSON("expected a JSON body with Content-Type: %s", api.ContentTypeJSON)
	default:
		return nil, api.BadJSON("expected Content-Type: %s, got %q", api.ContentTypeJSON, truncate(ct, 96))
	}
	return readBody(w, r, api.MaxResourceJSONBytes, s.opts.BodyReadTimeout, api.BadJSON)
}
