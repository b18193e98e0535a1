package server

import (
	"context"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/starlog/starlog/shared/api"
	"github.com/starlog/starlog/shared/meta"
	"github.com/starlog/starlog/star/auth"
	"github.com/starlog/starlog/star/ratelimit"
)

// Token verification and the /v1/access-tokens endpoints. A token's row
// (meta.TokenKey) holds its keyed hash and info, never the token; a check
// hashes the presented token and compares in constant time. Verified and
// unknown tokens are cached for TokenCacheTTL, so a revocation is honoured
// by every star within that bound plus one metastore read, and at once by
// the star that revoked (it drops its entry).
const (
	// TokenCacheTTL bounds how long a star trusts what it read of a token.
	TokenCacheTTL = 2 * time.Second
	// TokenStaleIfError is how long a token this star verified stays
	// accepted while the metastore cannot answer: the metastore is not on
	// the ack path, and an outage must not turn every client away. Only
	// a star cut off from the metastore can miss a revocation, for at
	// most this long.
	TokenStaleIfError = 5 * time.Minute
	// tokenCacheMax bounds the cache; when full it is emptied (a flood of
	// invented tokens costs reads, never memory).
	tokenCacheMax = 4096
	// tokenReadTimeout bounds one metastore call of the token store.
	tokenReadTimeout = 5 * time.Second
	// TokenLookupsPerSec and TokenLookupBurst bound, per client address,
	// the token checks that must read the metastore: a token this star
	// has not seen (or saw rejected) within TokenCacheTTL. Each costs one
	// read, so without a bound a client inventing tokens spends the
	// metastore's reads at will (about 4,500 a second from one client was
	// measured). A client that keeps its tokens costs one check per token
	// per TokenCacheTTL, and a refresh of a token verified before is not
	// counted; past the bound the answer is 429 with no read.
	TokenLookupsPerSec = 20
	TokenLookupBurst   = 100
)

// tokenRow is the value of a token's row.
type tokenRow struct {
	auth.Info
	Hash     string    `json:"hash"`
	IssuedAt time.Time `json:"issued_at"`
}

type cacheEntry struct {
	info *auth.Info // nil: no such token
	at   time.Time
}

// tokenStore verifies, issues, lists and revokes tokens.
type tokenStore struct {
	keys auth.Keys
	meta meta.Store
	now  func() time.Time

	// lookups bounds, per client address, the checks that read the
	// metastore for a token not known to be valid (TokenLookupsPerSec).
	lookups *ratelimit.Keyed

	mu    sync.Mutex
	cache map[string]cacheEntry // by keyed hash
	// reads are the metastore reads in flight, by keyed hash: checks of
	// one token at once (the sessions of a token re-check together, when
	// the entry they share goes stale) share one read.
	reads map[string]*tokenRead
}

// tokenRead is one metastore read of a token, shared by the checks that
// wait for it.
type tokenRead struct {
	done    chan struct{}
	info    *auth.Info
	err     *api.Error
	sharers int // checks sharing it besides the first (under tokenStore.mu; tests wait on it)
}

func newTokenStore(keys auth.Keys, ms meta.Store) *tokenStore {
	return &tokenStore{keys: keys, meta: ms, now: time.Now, cache: make(map[string]cacheEntry),
		reads:   make(map[string]*tokenRead),
		lookups: ratelimit.NewKeyed(TokenLookupsPerSec, TokenLookupBurst, 0)}
}

// authResult labels of starlog_auth_decisions_total.
const (
	authOK        = "ok"
	authOpen      = "open"
	authInternal  = "internal"
	authMissing   = "missing"
	authMalformed = "malformed"
	authUnknown   = "unknown"
	authExpired   = "expired"
	authDenied    = "denied"
	authStale     = "stale"
	authError     = "error"
	authThrottled = "throttled"
)

// authenticate returns the principal of a bearer token, or the 401 (or a
// retryable 503 when the metastore cannot answer, or a 429 when client
// has checked too many unknown tokens: see TokenLookupsPerSec) and its
// metric result. client names who presented the token (its address; ""
// for a peer's forward, which the star that took it counted).
func (t *tokenStore) authenticate(ctx context.Context, token, client string) (auth.Principal, string, *api.Error) {
	p, result, _, err := t.verify(ctx, token, client)
	return p, result, err
}

// verify is authenticate, and also says when what it relied on was read
// from the metastore: the cache serves it until that time plus
// TokenCacheTTL, so a session's credential watch (credwatch.go) checks
// again then, not a whole period after its own check.
func (t *tokenStore) verify(ctx context.Context, token, client string) (auth.Principal, string, time.Time, *api.Error) {
	if token == "" {
		return auth.Principal{}, authMissing, time.Time{}, auth.Unauthenticated("missing access token: send Authorization: Bearer <token>")
	}
	if t.keys.IsAdmin(token) {
		return auth.AdminPrincipal(), authOK, t.now(), nil
	}
	id, err := auth.ParseToken(token)
	if err != nil {
		return auth.Principal{}, authMalformed, time.Time{}, auth.Unauthenticated("invalid access token")
	}
	h := t.keys.Hash(token)
	result := authOK
	e, ok := t.cached(h)
	info, at := e.info, e.at
	if !ok || t.now().Sub(e.at) >= TokenCacheTTL {
		if (!ok || info == nil) && client != "" {
			if wait, ok := t.lookups.Take(client, 1, t.now()); !ok {
				return auth.Principal{}, authThrottled, time.Time{}, api.RateLimitedAfter(wait,
					"too many checks of unknown access tokens from this client; retry after %v", wait.Round(time.Millisecond))
			}
		}
		loaded, aerr := t.loadShared(ctx, id, h)
		switch {
		case aerr == nil:
			info, at = loaded, t.now()
			t.remember(h, info)
		case ok && info != nil && t.now().Sub(e.at) < TokenStaleIfError:
			result = authStale // verified lately; the metastore cannot answer now
		default:
			return auth.Principal{}, authError, time.Time{}, aerr
		}
	}
	if info == nil {
		return auth.Principal{}, authUnknown, time.Time{}, auth.Unauthenticated("invalid access token")
	}
	if info.Expired(t.now()) {
		return auth.Principal{}, authExpired, time.Time{}, expiredErr(info.ID)
	}
	return auth.Principal{Info: *info}, result, at, nil
}

// expiredErr is the 401 of a token past its expires_at.
func expiredErr(id string) *api.Error {
	return auth.Unauthenticated("access token %q has expired", truncate(id, 96))
}

// loadShared is load, shared with the checks of the same token that
// wait for a read already in flight. The read runs without the first
// caller's cancellation (its own bound is tokenReadTimeout), so one
// client hanging up fails no other; a waiter whose ctx ends stops waiting.
func (t *tokenStore) loadShared(ctx context.Context, id string, h []byte) (*auth.Info, *api.Error) {
	t.mu.Lock()
	rd, waiting := t.reads[string(h)]
	if waiting {
		rd.sharers++
	} else {
		rd = &tokenRead{done: make(chan struct{})}
		t.reads[string(h)] = rd
	}
	t.mu.Unlock()
	if !waiting {
		rd.info, rd.err = t.load(context.WithoutCancel(ctx), id, h)
		t.mu.Lock()
		delete(t.reads, string(h))
		t.mu.Unlock()
		close(rd.done)
	}
	select {
	case <-rd.done:
		return rd.info, rd.err
	case <-ctx.Done():
		return nil, api.Unavailable("cannot verify the access token now: %v", ctx.Err())
	}
}

// load reads id's row: the info when its hash is h, nil when there is no
// such token (no row, or another token's hash).
func (t *tokenStore) load(ctx context.Context, id string, h []byte) (*auth.Info, *api.Error) {
	ctx, cancel := context.WithTimeout(ctx, tokenReadTimeout)
	defer cancel()
	it, err := t.meta.Get(ctx, meta.TokenKey(id).PK, meta.TokenKey(id).SK)
	if errors.Is(err, meta.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, api.Unavailable("cannot verify the access token now: %v", err)
	}
	var row tokenRow
	if err := json.Unmarshal(it.Val, &row); err != nil {
		return nil, api.Other("access token row %q: %v", truncate(id, 96), err)
	}
	stored, err := hex.DecodeString(row.Hash)
	if err != nil || subtle.ConstantTimeCompare(stored, h) != 1 {
		return nil, nil
	}
	return &row.Info, nil
}

// cached returns the entry of h, fresh or not.
func (t *tokenStore) cached(h []byte) (cacheEntry, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e, ok := t.cache[string(h)]
	return e, ok
}

func (t *tokenStore) remember(h []byte, info *auth.Info) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.cache) >= tokenCacheMax {
		clear(t.cache)
	}
	t.cache[string(h)] = cacheEntry{info: info, at: t.now()}
}

// forget drops every cached entry of id.
func (t *tokenStore) forget(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, e := range t.cache {
		if e.info != nil && e.info.ID == id {
			delete(t.cache, k)
		}
	}
}

// IssueResponse is S2's IssueAccessTokenResponse.
type IssueResponse struct {
	AccessToken string `json:"access_token"`
}

// ListTokensResponse is S2's ListAccessTokensResponse.
type ListTokensResponse struct {
	AccessTokens []auth.Info `json:"access_tokens"`
	HasMore      bool        `json:"has_more"`
}

// issueToken serves POST /v1/access-tokens: 201 with the token, shown
// this once; 409 when the id is taken.
func (s *Server) issueToken(w http.ResponseWriter, r *http.Request) {
	body, aerr := readResourceBody(s, w, r)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	req, aerr := auth.ParseIssueRequest(body)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	p := auth.FromContext(r.Context())
	info, aerr := p.Issue(req, s.tokens.now())
	if aerr != nil {
		s.authDecisions.WithLabelValues(authDenied).Inc()
		s.writeError(w, r, aerr)
		return
	}
	tok, err := auth.NewToken(info.ID)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	row := tokenRow{Info: info, Hash: hex.EncodeToString(s.tokens.keys.Hash(tok)), IssuedAt: s.tokens.now().UTC()}
	val, err := json.Marshal(row)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), tokenReadTimeout)
	defer cancel()
	k := meta.TokenKey(info.ID)
	if _, err := s.tokens.meta.Put(ctx, k.PK, k.SK, val, meta.IfAbsent()); err != nil {
		if errors.Is(err, meta.ErrConditionFailed) {
			s.writeError(w, r, &api.Error{Status: http.StatusConflict, Code: api.CodeResourceAlreadyExists,
				Message: "access token " + truncate(info.ID, 96) + " already exists"})
			return
		}
		s.writeError(w, r, api.Unavailable("issue access token: %v", err))
		return
	}
	writeJSON(w, http.StatusCreated, IssueResponse{AccessToken: tok})
}

// listTokens serves GET /v1/access-tokens (prefix, start_after, limit),
// showing only the ids within the caller's access_tokens scope.
func (s *Server) listTokens(w http.ResponseWriter, r *http.Request) {
	req, aerr := parseList(r, auth.MaxTokenIDBytes)
	if aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	set := auth.FromContext(r.Context()).Scope.AccessTokens
	out := ListTokensResponse{AccessTokens: []auth.Info{}}
	prefix, ok := set.Narrow(req.Prefix)
	if !ok {
		writeJSON(w, http.StatusOK, out)
		return
	}
	from := prefix
	if req.StartAfter >= from {
		from = req.StartAfter + "\x00" // the next id after start_after
	}
	// No id holds 0xff (ids are UTF-8): prefix+"\xff" ends the prefix.
	q := meta.Query{PK: meta.TokensPK, From: from, To: prefix + "\xff", Limit: min(req.Limit+1, 1000)}
	ctx, cancel := context.WithTimeout(r.Context(), tokenReadTimeout)
	defer cancel()
	for {
		pg, err := s.tokens.meta.Query(ctx, q)
		if err != nil {
			s.writeError(w, r, api.Unavailable("list access tokens: %v", err))
			return
		}
		for _, it := range pg.Items {
			if !strings.HasPrefix(it.SK, prefix) || !set.Contains(it.SK) {
				continue
			}
			var row tokenRow
			if err := json.Unmarshal(it.Val, &row); err != nil {
				s.writeError(w, r, api.Other("access token row %q: %v", truncate(it.SK, 96), err))
				return
			}
			if len(out.AccessTokens) == req.Limit {
				out.HasMore = true
				writeJSON(w, http.StatusOK, out)
				return
			}
			out.AccessTokens = append(out.AccessTokens, row.Info)
		}
		if pg.Next == "" || !set.Prefix { // an exact set holds one id
			writeJSON(w, http.StatusOK, out)
			return
		}
		q.PageToken = pg.Next
	}
}

// revokeToken serves DELETE /v1/access-tokens/{id}: 204, or 404
// access_token_not_found. The row goes; this star forgets it at once.
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request, id string) {
	if aerr := auth.ValidateTokenID(id); aerr != nil {
		s.writeError(w, r, aerr)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), tokenReadTimeout)
	defer cancel()
	k := meta.TokenKey(id)
	it, err := s.tokens.meta.Get(ctx, k.PK, k.SK)
	if errors.Is(err, meta.ErrNotFound) {
		s.writeError(w, r, &api.Error{Status: http.StatusNotFound, Code: auth.CodeAccessTokenNotFound,
			Message: "access token " + truncate(id, 96) + " not found"})
		return
	}
	if err == nil {
		err = s.tokens.meta.Delete(ctx, k.PK, k.SK, meta.IfVer(it.Ver))
		if errors.Is(err, meta.ErrConditionFailed) {
			err = nil // revoked (or reissued) meanwhile: this revocation is moot
		}
	}
	if err != nil {
		s.writeError(w, r, api.Unavailable("revoke access token: %v", err))
		return
	}
	s.tokens.forget(id)
	w.WriteHeader(http.StatusNoContent)
}
