package server

import (
	"context"
	"net/http"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/star/auth"
)

// Every request but /health and /metrics is authenticated and authorized
// here, right after its path is parsed and before any handler runs: no
// stream is created, no lease taken, no body read and nothing written for
// a request that fails. Resources named in a body (a basin or stream
// being created, a token being issued) are checked by the handler once the
// bounded body is decoded, still before any effect; so are the command
// records of an append (trim, fence).

// opsOf returns the operations a route and method need (every one of
// them), and whether the resource is named in the body (then only the
// operation, and for streams the basin, are checked here).
func opsOf(k routeKind, method string) (ops []auth.Op, inBody bool) {
	switch k {
	case routeBasins:
		switch method {
		case http.MethodGet:
			return []auth.Op{auth.ListBasins}, false
		case http.MethodPost:
			return []auth.Op{auth.CreateBasin}, true
		}
	case routeBasin:
		switch method {
		case http.MethodGet:
			return []auth.Op{auth.GetBasinConfig}, false
		case http.MethodPut: // creates or reconfigures: it needs both
			return []auth.Op{auth.CreateBasin, auth.ReconfigureBasin}, false
		case http.MethodPatch:
			return []auth.Op{auth.ReconfigureBasin}, false
		case http.MethodDelete:
			return []auth.Op{auth.DeleteBasin}, false
		}
	case routeStreams:
		switch method {
		case http.MethodGet:
			return []auth.Op{auth.ListStreams}, false
		case http.MethodPost:
			return []auth.Op{auth.CreateStream}, true
		}
	case routeStream:
		switch method {
		case http.MethodGet:
			return []auth.Op{auth.GetStreamConfig}, false
		case http.MethodPut:
			return []auth.Op{auth.CreateStream, auth.ReconfigureStream}, false
		case http.MethodPatch:
			return []auth.Op{auth.ReconfigureStream}, false
		case http.MethodDelete:
			return []auth.Op{auth.DeleteStream}, false
		}
	case routeRecords:
		switch method {
		case http.MethodGet:
			return []auth.Op{auth.Read}, false
		case http.MethodPost:
			return []auth.Op{auth.Append}, false
		}
	case routeTail:
		if method == http.MethodGet {
			return []auth.Op{auth.CheckTail}, false
		}
	case routeTokens:
		switch method {
		case http.MethodGet:
			return []auth.Op{auth.ListAccessTokens}, false
		case http.MethodPost:
			return []auth.Op{auth.IssueAccessToken}, true
		}
	case routeToken:
		if method == http.MethodDelete {
			return []auth.Op{auth.RevokeAccessToken}, false
		}
	case routeLocations:
		if method == http.MethodGet {
			return []auth.Op{auth.ListLocations}, false
		}
	case routeDefaultLocation:
		switch method {
		case http.MethodGet:
			return []auth.Op{auth.GetDefaultLocation}, false
		case http.MethodPut:
			return []auth.Op{auth.SetDefaultLocation}, false
		}
	case routeAccountMetrics:
		if method == http.MethodGet {
			return []auth.Op{auth.AccountMetrics}, false
		}
	case routeBasinMetrics:
		if method == http.MethodGet {
			return []auth.Op{auth.BasinMetrics}, false
		}
	case routeStreamMetrics:
		if method == http.MethodGet {
			return []auth.Op{auth.StreamMetrics}, false
		}
	}
	return nil, false
}

// internalRoute reports whether k is one of starlog's own paths, callable
// only with the cluster's internal credential.
func internalRoute(k routeKind) bool {
	return k == routeDrain || k == routeSettle || k == routeHandoff || k == routeDurableKeys || k == routeDurableRotate || k == routeStatus || k == routeKafka
}

// authorize authenticates r and checks that it may do what rt and its
// method ask. It returns the principal and the route with the stream name
// as stored (auto_prefix_streams applied).
func (s *Server) authorize(r *http.Request, rt route, internal bool) (auth.Principal, route, *api.Error) {
	if rt.kind == routeHealth || rt.kind == routeMetrics {
		return auth.Principal{}, rt, nil
	}
	if s.keys.IsOpen() {
		s.authDecisions.WithLabelValues(authOpen).Inc()
		return auth.AdminPrincipal(), rt, nil
	}
	if internalRoute(rt.kind) && internal {
		s.authDecisions.WithLabelValues(authInternal).Inc()
		return auth.AdminPrincipal(), rt, nil
	}
	p, result, err := s.tokens.authenticate(r.Context(), auth.Bearer(r.Header.Get("Authorization")), s.authClient(r, internal))
	if err != nil {
		s.authDecisions.WithLabelValues(result).Inc()
		err = s.countFailedAuth(r, err)
		if internalRoute(rt.kind) && err.Status == http.StatusUnauthorized {
			err = auth.Unauthenticated("%s is starlog's internal endpoint: it needs the cluster's internal credential (%s)", rt.kind, auth.HeaderInternal)
		}
		return p, rt, err
	}
	if internalRoute(rt.kind) {
		s.authDecisions.WithLabelValues(authDenied).Inc()
		return p, rt, auth.Denied("%s is starlog's internal endpoint: it needs the cluster's internal credential, not an access token", rt.kind)
	}
	ops, inBody := opsOf(rt.kind, r.Method)
	if ops == nil {
		// No such method here: the router answers 405; nothing happens.
		s.authDecisions.WithLabelValues(result).Inc()
		return p, rt, nil
	}
	req := auth.Request{}
	switch rt.kind {
	case routeStreams, routeStream, routeRecords, routeTail:
		basin, berr := basinHeader(r)
		if berr != nil {
			return p, rt, berr
		}
		req.Basin = basin
		if rt.kind != routeStreams {
			rt.name = p.StreamName(rt.name)
			req.Stream = rt.name
		}
	case routeBasin, routeBasinMetrics:
		req.Basin = rt.name
	case routeStreamMetrics:
		req.Basin = rt.name
		rt.stream = p.StreamName(rt.stream)
		req.Stream = rt.stream
	case routeToken:
		req.TokenID = rt.name
	}
	for _, op := range ops {
		req.Op = op
		var aerr *api.Error
		if inBody {
			aerr = p.AuthorizeOp(req)
		} else {
			aerr = p.Authorize(req)
		}
		if aerr != nil {
			s.authDecisions.WithLabelValues(authDenied).Inc()
			return p, rt, aerr
		}
	}
	s.authDecisions.WithLabelValues(result).Inc()
	return p, rt, nil
}

// storedStreamKey carries the stored name of the request's stream, so
// errors name the stream as the client does (auto_prefix_streams).
type storedStreamKey struct{}

// checkResource authorizes a resource named in a request body: a 403 is
// written and false returned when it is out of scope.
func (s *Server) checkResource(w http.ResponseWriter, r *http.Request, req auth.Request) bool {
	if err := auth.FromContext(r.Context()).Authorize(req); err != nil {
		s.authDecisions.WithLabelValues(authDenied).Inc()
		s.writeError(w, r, err)
		return false
	}
	return true
}

// checkCommands authorizes the command records of an append input: a
// trim needs the trim operation and a fence the fence operation, beside
// append (checked with the route).
func checkCommands(ctx context.Context, basin, stream string, in *api.AppendInput) *api.Error {
	p := auth.FromContext(ctx)
	for i := range in.Records {
		rec := &in.Records[i]
		if len(rec.Headers) != 1 || len(rec.Headers[0].Name) != 0 {
			continue
		}
		var op auth.Op
		switch string(rec.Headers[0].Value) {
		case "trim":
			op = auth.Trim
		case "fence":
			op = auth.Fence
		default:
			continue // not a command: the node refuses it (422)
		}
		if err := p.Authorize(auth.Request{Op: op, Basin: basin, Stream: stream}); err != nil {
			return err
		}
	}
	return nil
}
