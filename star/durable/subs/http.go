package subs

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/durable/offsets"
	"github.com/starlog/starlog/star/durable/subs/signing"
)

// controlRoute is a request under a __ds segment: root is the stored
// name prefix before it ("" or ending in "/"), base the client-visible URL
// of that root, rest the escaped segments after __ds.
type controlRoute struct {
	root, clientRoot, base string
	rest                   []string
}

// splitControl finds the reserved segment in an escaped path after the
// prefix. A subscription belongs to the root before it, and its paths
// are relative to that root: /ds/__ds/… covers every stream, and
// /ds/v1/stream/__ds/… the streams named v1/stream/… (the suite's URL
// shape, <base>/v1/stream/<path>).
func (m *Manager) splitControl(r *http.Request) (controlRoute, bool) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), m.prefix+"/")
	if !ok {
		return controlRoute{}, false
	}
	segs := strings.Split(rest, "/")
	for i, seg := range segs {
		if u, err := url.PathUnescape(seg); err != nil || u != reservedSegment {
			continue
		}
		clientRoot, err := url.PathUnescape(strings.Join(segs[:i], "/"))
		if err != nil {
			return controlRoute{}, false
		}
		if clientRoot != "" {
			clientRoot += "/"
		}
		escRoot := strings.Join(segs[:i], "/")
		if escRoot != "" {
			escRoot += "/"
		}
		return controlRoute{clientRoot: clientRoot, base: baseURL(r) + m.prefix + "/" + escRoot, rest: segs[i+1:]}, true
	}
	return controlRoute{}, false
}

func baseURL(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// SelfAuthenticated reports whether a request authenticates itself
// rather than with an access token: the JWK Set (public) and the
// callback, ack and release of a wake (their bearer is the wake token the
// handler minted). star/server serves these without a principal.
func (m *Manager) SelfAuthenticated(r *http.Request) bool {
	c, ok := m.splitControl(r)
	if !ok {
		return false
	}
	switch {
	case len(c.rest) == 1 && c.rest[0] == "jwks.json":
		return true
	case len(c.rest) == 3 && c.rest[0] == "subscriptions" && r.Method == http.MethodPost:
		return c.rest[2] == "callback" || c.rest[2] == "ack" || c.rest[2] == "release"
	}
	return false
}

// Controls reports whether a request is for the reserved subscription
// APIs: its path under the prefix holds a __ds segment (protocol §6). The
// handler routes these here before streams: no stream path holds it.
func (m *Manager) Controls(r *http.Request) bool {
	_, ok := m.splitControl(r)
	return ok
}

// ServeHTTP serves the reserved subscription APIs (protocol §6–7): a
// request Controls reports, authenticated (its principal in the
// context) or self-authenticated (SelfAuthenticated).
func (m *Manager) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	c, ok := m.splitControl(r)
	if !ok {
		writeSubError(w, &subError{Status: http.StatusNotFound, Code: codeNotFound, Message: "no such Durable Streams control route"})
		return
	}
	op, err := m.route(w, r, c)
	result := "ok"
	if err != nil {
		var se *subError
		if !errors.As(err, &se) {
			se = m.subInternal(err)
		}
		result = se.Code
		writeSubError(w, se)
	}
	m.control.WithLabelValues(op, result).Inc()
}

// subInternal maps a driver error to a response: 503 for the metastore
// and timeouts (retryable), else 500 logged.
func (m *Manager) subInternal(err error) *subError {
	if _, ok := errors.AsType[*metaError](err); ok || isKeysMetaError(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return &subError{Status: http.StatusServiceUnavailable, Code: "UNAVAILABLE", Message: "the metastore or a stream is unavailable; retry"}
	}
	if e, ok := errors.AsType[*api.Error](err); ok && e.Status == http.StatusServiceUnavailable {
		return &subError{Status: e.Status, Code: "UNAVAILABLE", Message: e.Message}
	}
	m.log.Error("subscription request failed", "err", err)
	return &subError{Status: http.StatusInternalServerError, Code: "INTERNAL", Message: "internal error"}
}

func (m *Manager) route(w http.ResponseWriter, r *http.Request, c controlRoute) (string, error) {
	rest := c.rest
	if len(rest) == 1 && rest[0] == "jwks.json" {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			return "jwks", methodNotAllowed(w, "GET, HEAD")
		}
		keys, err := m.keys.Get(r.Context())
		if err != nil {
			return "jwks", err
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Header().Set("Cache-Control", "public, max-age="+strconv.Itoa(int(signing.JWKSMaxAge/time.Second)))
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(keys.JWKS(m.keys.Now()))
		return "jwks", nil
	}
	if len(rest) < 2 || rest[0] != "subscriptions" {
		return "other", &subError{Status: http.StatusNotFound, Code: codeNotFound, Message: "no such Durable Streams control route"}
	}
	id, err := url.PathUnescape(rest[1])
	if err != nil || id == "" || len(id) > maxSubIDBytes || strings.ContainsAny(id, "/\x00") {
		return "other", invalidReq("a subscription id is 1 to %d bytes, without / or NUL", maxSubIDBytes)
	}
	p := auth.FromContext(r.Context())
	// Self-authenticated routes find the subscription by their token; the
	// others by the principal's view of the root.
	c.root = p.StreamName(c.clientRoot)
	switch {
	case len(rest) == 2:
		switch r.Method {
		case http.MethodPut:
			return "put", m.subPut(w, r, c, id)
		case http.MethodGet:
			return "get", m.subGet(w, r, c, id)
		case http.MethodDelete:
			return "delete", m.subDelete(w, r, c, id)
		}
		return "other", methodNotAllowed(w, "GET, PUT, DELETE")
	case rest[2] == "streams" && len(rest) == 3:
		if r.Method != http.MethodPost {
			return "streams", methodNotAllowed(w, "POST")
		}
		return "streams", m.subAddStreams(w, r, c, id)
	case rest[2] == "streams":
		if r.Method != http.MethodDelete {
			return "streams", methodNotAllowed(w, "DELETE")
		}
		path, err := url.PathUnescape(strings.Join(rest[3:], "/"))
		if err != nil {
			return "streams", invalidReq("malformed stream path")
		}
		return "streams", m.subRemoveStream(w, r, c, id, normPath(path))
	case len(rest) == 3 && slices.Contains([]string{"callback", "claim", "ack", "release"}, rest[2]):
		if r.Method != http.MethodPost {
			return rest[2], methodNotAllowed(w, "POST")
		}
		if rest[2] == "claim" {
			return "claim", m.subClaim(w, r, c, id)
		}
		return rest[2], m.subWakeOp(w, r, id, rest[2])
	}
	return "other", &subError{Status: http.StatusNotFound, Code: codeNotFound, Message: "no such Durable Streams control route"}
}

func methodNotAllowed(w http.ResponseWriter, allow string) error {
	w.Header().Set("Allow", allow)
	return &subError{Status: http.StatusMethodNotAllowed, Code: codeInvalidRequest, Message: "method not allowed"}
}

// authorizeManage: managing subscriptions needs reconfigure-basin on the
// Durable Streams basin, and then the streams the subscription names or
// links (scope.go).
func (m *Manager) authorizeManage(r *http.Request) error {
	if aerr := auth.FromContext(r.Context()).Authorize(auth.Request{Op: auth.ReconfigureBasin, Basin: m.basin}); aerr != nil {
		return &subError{Status: aerr.Status, Code: "PERMISSION_DENIED", Message: aerr.Message}
	}
	return nil
}

func readSubBody(r *http.Request) ([]byte, error) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxSubBody+1))
	if err != nil {
		return nil, invalidReq("reading the body: %v", err)
	}
	if len(body) > maxSubBody {
		return nil, &subError{Status: http.StatusRequestEntityTooLarge, Code: codeInvalidRequest, Message: "the body is too large"}
	}
	return body, nil
}

func (m *Manager) subPut(w http.ResponseWriter, r *http.Request, c controlRoute, id string) error {
	if err := m.authorizeManage(r); err != nil {
		return err
	}
	body, err := readSubBody(r)
	if err != nil {
		return err
	}
	cfg, serr := parseSubConfig(body)
	if serr != nil {
		return serr
	}
	if cfg.Type == subWebhook {
		if err := m.policy.check(cfg.WebhookURL); err != nil {
			return &subError{Status: http.StatusBadRequest, Code: codeURLRejected, Message: err.Error()}
		}
	}
	for _, p := range append(slices.Clone(cfg.Streams), cfg.WakeStream) {
		if p == "" {
			continue
		}
		if err := api.ValidateStreamName(c.root + p); err != nil {
			return invalidReq("stream %q: %s", p, err.Message)
		}
	}
	p := auth.FromContext(r.Context())
	if err := m.authorizeConfig(p, c.root, &cfg); err != nil {
		return err
	}
	keys, err := m.keys.Get(r.Context())
	if err != nil {
		return err
	}
	k := subKey(m.basin, c.root, id)
	hash := cfg.hash()
	for range subAttempts {
		if it, err := m.meta.Get(r.Context(), k.PK, k.SK); err == nil {
			var cur subRow
			if err := json.Unmarshal(it.Val, &cur); err != nil {
				return err
			}
			if cur.Hash != hash {
				return &subError{Status: http.StatusConflict, Code: codeExists, Message: "a subscription with this id exists with another configuration"}
			}
			if err := m.authorizeSub(p, &cur); err != nil {
				return err // its links reach past the scope
			}
			return writeSubJSON(w, http.StatusOK, subView(&cur, c.base, keys.Signer(m.keys.Now()).Kid()))
		} else if !errors.Is(err, meta.ErrNotFound) {
			return &metaError{err}
		}
		s, err := m.newSub(r.Context(), c, id, cfg, hash)
		if err != nil {
			return err
		}
		val, err := json.Marshal(&s)
		if err != nil {
			return err
		}
		if _, err := m.meta.Put(r.Context(), k.PK, k.SK, val, meta.IfAbsent()); errors.Is(err, meta.ErrConditionFailed) {
			continue // created meanwhile: compare with it
		} else if err != nil {
			return &metaError{err}
		}
		m.recache(k, s)
		return writeSubJSON(w, http.StatusCreated, subView(&s, c.base, keys.Signer(m.keys.Now()).Kid()))
	}
	return errors.New("durable: subscription row kept changing")
}

// newSub builds a new subscription: explicit streams and the streams the
// pattern matches now are linked at their tails (creation replays no
// history, protocol §6.2).
func (m *Manager) newSub(ctx context.Context, c controlRoute, id string, cfg subConfig, hash string) (subRow, error) {
	s := subRow{ID: id, Root: c.root, Incarnation: newIncarnation(), Base: c.base, Config: cfg, Hash: hash,
		Created: time.Now().UTC(), Creator: creatorOf(ctx)}
	paths := slices.Clone(cfg.Streams)
	if cfg.Pattern != "" {
		found, err := m.matching(ctx, c.root, &s)
		if err != nil {
			return subRow{}, err
		}
		paths = append(paths, found...)
	}
	t, err := m.tails(ctx, c.root, paths)
	if err != nil {
		return subRow{}, err
	}
	for _, p := range cfg.Streams {
		s.addLink(p, true, t.of(p))
	}
	for _, p := range paths[len(cfg.Streams):] {
		if t.present[p] && !s.addLink(p, false, t.of(p)) {
			return subRow{}, invalidReq("the pattern matches more than %d streams", maxSubLinks)
		}
	}
	return s, nil
}

// matching lists the existing Durable Streams streams (Streams.Names)
// under the pattern's literal prefix that it matches, as root-relative
// paths.
func (m *Manager) matching(ctx context.Context, root string, s *subRow) ([]string, error) {
	var out []string
	tooMany := false
	err := m.streams.Names(ctx, root+globPrefix(s.Config.Pattern), func(name string) bool {
		if rel, ok := s.relative(name); ok && s.globs(rel) {
			if len(out) == maxSubLinks {
				tooMany = true
				return false
			}
			out = append(out, rel)
		}
		return true
	})
	switch {
	case err != nil:
		return nil, &metaError{err}
	case tooMany:
		return nil, invalidReq("the pattern matches more than %d streams", maxSubLinks)
	}
	return out, nil
}

func (m *Manager) subGet(w http.ResponseWriter, r *http.Request, c controlRoute, id string) error {
	if err := m.authorizeManage(r); err != nil {
		return err
	}
	k := subKey(m.basin, c.root, id)
	it, err := m.meta.Get(r.Context(), k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		return errSubNotFound
	} else if err != nil {
		return &metaError{err}
	}
	var s subRow
	if err := json.Unmarshal(it.Val, &s); err != nil {
		return err
	}
	if err := m.authorizeSub(auth.FromContext(r.Context()), &s); err != nil {
		return err
	}
	keys, err := m.keys.Get(r.Context())
	if err != nil {
		return err
	}
	return writeSubJSON(w, http.StatusOK, subView(&s, c.base, keys.Signer(m.keys.Now()).Kid()))
}

// subDelete removes the row: a callback, ack or release of it then finds
// nothing (404) and moves no cursor, and a subscription created again
// under the id has a new incarnation, which no old token names. The row
// deleted is the version authorized (a missing one is 204: idempotent).
func (m *Manager) subDelete(w http.ResponseWriter, r *http.Request, c controlRoute, id string) error {
	if err := m.authorizeManage(r); err != nil {
		return err
	}
	p := auth.FromContext(r.Context())
	k := subKey(m.basin, c.root, id)
	for range subAttempts {
		it, err := m.meta.Get(r.Context(), k.PK, k.SK)
		if errors.Is(err, meta.ErrNotFound) {
			break
		} else if err != nil {
			return &metaError{err}
		}
		var s subRow
		if err := json.Unmarshal(it.Val, &s); err != nil {
			return err
		}
		if err := m.authorizeSub(p, &s); err != nil {
			return err
		}
		err = m.meta.Delete(r.Context(), k.PK, k.SK, meta.IfVer(it.Ver))
		if errors.Is(err, meta.ErrConditionFailed) {
			continue // changed meanwhile: authorize what it is now
		} else if err != nil {
			return &metaError{err}
		}
		m.uncache(k)
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	m.uncache(k)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (m *Manager) subAddStreams(w http.ResponseWriter, r *http.Request, c controlRoute, id string) error {
	if err := m.authorizeManage(r); err != nil {
		return err
	}
	body, err := readSubBody(r)
	if err != nil {
		return err
	}
	pr := auth.FromContext(r.Context())
	var in struct {
		Streams []any `json:"streams"`
	}
	if err := json.Unmarshal(body, &in); err != nil || len(in.Streams) == 0 {
		return invalidReq("streams must be a non-empty array of stream paths")
	}
	var paths []string
	for _, v := range in.Streams {
		p, ok := v.(string)
		if !ok || normPath(p) == "" {
			return invalidReq("streams must be a non-empty array of stream paths")
		}
		p = normPath(p)
		if err := checkRelPath(p); err != nil {
			return invalidReq("stream %q: %s", p, err)
		}
		if aerr := api.ValidateStreamName(c.root + p); aerr != nil {
			return invalidReq("stream %q: %s", p, aerr.Message)
		}
		paths = append(paths, p)
	}
	authz := func(s *subRow) error {
		if err := m.authorizeSub(pr, s); err != nil {
			return err
		}
		for _, p := range paths {
			if err := m.authorizeLink(pr, s, s.Root+p); err != nil {
				return err
			}
		}
		return nil
	}
	_, err = m.mutateAs(r.Context(), c.root, id, paths, authz, func(s *subRow, t tails) (bool, error) {
		for _, p := range paths {
			acked := t.of(p)
			if l := s.link(p); l != nil {
				acked = l.Acked // already linked: keeps its cursor
			}
			if !s.addLink(p, true, acked) {
				return false, invalidReq("a subscription links at most %d streams", maxSubLinks)
			}
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (m *Manager) subRemoveStream(w http.ResponseWriter, r *http.Request, c controlRoute, id, path string) error {
	if err := m.authorizeManage(r); err != nil {
		return err
	}
	p := auth.FromContext(r.Context())
	authz := func(s *subRow) error { return nilIfOK(m.authorizeSub(p, s)) }
	_, err := m.mutateAs(r.Context(), c.root, id, nil, authz, func(s *subRow, _ tails) (bool, error) {
		if l := s.link(path); l == nil || !l.Explicit {
			return false, nil // absent: idempotent
		}
		s.removeExplicit(path)
		return true, nil
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// subClaim gives a pull-wake subscription's wake to a worker. The worker
// authenticates with an access token that may read the wake stream (it
// consumes that stream anyway) and every link (the answer shows their
// tails, and the wake token acks their cursors: only those its token may
// read, HolderStreams).
func (m *Manager) subClaim(w http.ResponseWriter, r *http.Request, c controlRoute, id string) error {
	body, err := readSubBody(r)
	if err != nil {
		return err
	}
	var in struct {
		Worker any `json:"worker"`
	}
	_ = json.Unmarshal(body, &in)
	worker, ok := in.Worker.(string)
	if !ok || worker == "" || len(worker) > maxSubIDBytes {
		return invalidReq("worker must be a non-empty string of at most %d bytes", maxSubIDBytes)
	}
	keys, err := m.keys.Get(r.Context())
	if err != nil {
		return err
	}
	p := auth.FromContext(r.Context())
	now := time.Now()
	authz := func(s *subRow) error { return nilIfOK(m.authorizeClaim(p, s)) }
	s, err := m.mutateAs(r.Context(), c.root, id, nil, authz, func(s *subRow, t tails) (bool, error) {
		if err := s.claim(now, worker, newWakeID(), t); err != nil {
			return false, err
		}
		streams := p.Scope.Streams
		s.HolderStreams = &streams
		if cred := credentialFrom(r.Context()); !p.Admin && cred != "" {
			s.HolderToken, s.HolderCredential = p.ID, cred
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	t, err := m.tails(r.Context(), s.Root, linkPaths(&s))
	if err != nil {
		return err
	}
	return writeSubJSON(w, http.StatusOK, map[string]any{
		"wake_id":      s.WakeID,
		"generation":   s.Generation,
		"token":        keys.Signer(m.keys.Now()).MintToken(signing.WakeToken{Root: s.Root, ID: s.ID, Incarnation: s.Incarnation, Generation: s.Generation, WakeID: s.WakeID}),
		"streams":      s.infos(t.of),
		"lease_ttl_ms": s.Config.LeaseTTLms,
	})
}

func linkPaths(s *subRow) []string {
	out := make([]string, len(s.Links))
	for i := range s.Links {
		out[i] = s.Links[i].Path
	}
	return out
}

// subWakeOp serves a callback (webhook), ack or release (pull-wake). The
// bearer is the wake token; the row fences it (checkWake). Acks without
// done extend the lease (the heartbeat); with done, or a release, the wake
// ends and the next one is issued at once if work is pending.
func (m *Manager) subWakeOp(w http.ResponseWriter, r *http.Request, id, op string) error {
	tok, ok, err := m.keys.Verify(r.Context(), auth.Bearer(r.Header.Get("Authorization")))
	if err != nil {
		return err
	}
	if !ok || tok.ID != id {
		return errTokenBad
	}
	body, err := readSubBody(r)
	if err != nil {
		return err
	}
	var in struct {
		WakeID     string   `json:"wake_id"`
		Generation uint64   `json:"generation"`
		Acks       []ackReq `json:"acks"`
		Done       bool     `json:"done"`
	}
	if err := json.Unmarshal(body, &in); err != nil {
		return invalidReq("the body must be a JSON object: %v", err)
	}
	now := time.Now()
	var next *wake
	holderGone := false
	s, err := m.mutate(r.Context(), tok.Root, tok.ID, nil, func(s *subRow, t tails) (bool, error) {
		next, holderGone = nil, false
		switch {
		case op == "callback" && s.Config.Type != subWebhook:
			return false, invalidReq("the subscription is not a webhook subscription")
		case op != "callback" && s.Config.Type != subPullWake:
			return false, invalidReq("the subscription is not pull-wake")
		}
		if err := s.checkWake(tok, in.Generation, in.WakeID); err != nil {
			return false, err
		}
		if op == "release" {
			next = s.done(now, newWakeID(), t)
			return true, nil
		}
		if ok, err := m.holderStands(r.Context(), s); err != nil {
			return false, err
		} else if !ok {
			s.finishWake() // withdrawn: its acks are not applied, the work wakes again
			holderGone = true
			return true, nil
		}
		if err := s.authorizeAcks(in.Acks); err != nil {
			return false, err
		}
		if err := s.applyAcks(in.Acks, t); err != nil {
			return false, err
		}
		if in.Done {
			next = s.done(now, newWakeID(), t)
		} else {
			s.LeaseUntil = now.Add(s.Config.leaseTTL())
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	if holderGone {
		// Pending work wakes again, for a worker whose token stands.
		go m.pass(s, nil, trigBusy)
		return errHolderGone
	}
	if next != nil {
		m.dispatch(s, *next)
	}
	if op == "release" {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return writeSubJSON(w, http.StatusOK, map[string]any{"ok": true, "next_wake": next != nil})
}

// subView is a subscription as GET and PUT answer it (protocol §6.3).
func subView(s *subRow, base, kid string) map[string]any {
	streams := make([]map[string]string, 0, len(s.Links))
	for i := range s.Links {
		l := &s.Links[i]
		streams = append(streams, map[string]string{"path": l.Path, "link_type": l.linkType(), "acked_offset": offsets.Format(l.Acked)})
	}
	v := map[string]any{
		"id": s.ID, "subscription_id": s.ID, "type": s.Config.Type, "streams": streams,
		"wake_stream": nil, "lease_ttl_ms": s.Config.LeaseTTLms,
		"created_at": s.Created.UTC().Format("2006-01-02T15:04:05.000Z"), "status": "active",
	}
	if s.Config.Pattern != "" {
		v["pattern"] = s.Config.Pattern
	}
	if s.Config.WakeStream != "" {
		v["wake_stream"] = s.Config.WakeStream
	}
	if s.Config.Description != nil {
		v["description"] = *s.Config.Description
	}
	if s.Failed {
		v["status"] = "failed"
	}
	if s.Config.Type == subWebhook {
		v["webhook"] = map[string]any{"url": s.Config.WebhookURL, "signing": map[string]string{
			"alg": "ed25519", "kid": kid, "jwks_url": base + reservedSegment + "/jwks.json",
		}}
	}
	return v
}

func writeSubJSON(w http.ResponseWriter, status int, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(b)
	return nil
}

func writeSubError(w http.ResponseWriter, e *subError) {
	body := map[string]any{"code": e.Code, "message": e.Message}
	if e.Code == codeClaimed {
		body["current_holder"], body["generation"] = e.Holder, e.Generation
	}
	if e.Status == http.StatusServiceUnavailable {
		w.Header().Set("Retry-After", "1")
	}
	_ = writeSubJSON(w, e.Status, map[string]any{"error": body})
}

// isKeysMetaError reports a metastore failure reading the keys row.
func isKeysMetaError(err error) bool {
	_, ok := errors.AsType[*signing.MetaError](err)
	return ok
}
